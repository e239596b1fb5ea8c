#include "request/route/router.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <string>

#include "common/clock.h"
#include "request/route/reservation.h"
#include "upstream/engine_load.h"
#include "upstream/fleet.h"

namespace ramjet::route {
namespace {

std::vector<config::UpstreamUrl> urls(size_t n) {
  std::vector<config::UpstreamUrl> v(n);
  for (size_t i = 0; i < n; ++i) v[i].host = "engine-" + std::to_string(i);
  return v;
}

// A chat request whose system prompt is `prefix_kib` KiB of `fill`, then one user turn.
request::PreparedRequest chat(char fill, size_t prefix_kib, std::string_view user,
                              std::optional<uint64_t> max_tokens = std::nullopt) {
  std::string body = R"({"model":"m","messages":[{"role":"system","content":")" +
                     std::string(prefix_kib * 1024, fill) + R"("},{"role":"user","content":")" +
                     std::string(user) + "\"}]";
  if (max_tokens) body += R"(,"max_tokens":)" + std::to_string(*max_tokens);
  body += "}";
  request::PrepareConfig pc;
  pc.fingerprint = true;
  return request::prepare(request::Endpoint::kChat, std::move(body), pc);
}

struct Rig {
  explicit Rig(size_t n, std::string_view policy = "prefix", std::vector<Profile> profiles = {})
      : fleet(urls(n), clock, 30000),
        index(n),
        approx(index),
        single_flight(n, SingleFlightConfig{}, clock),
        router(make_policy(policy, RouteConfig{}), fleet, {&approx}, single_flight, std::move(profiles)) {}
  ManualClock clock;
  upstream::Fleet fleet;
  cache::ApproxIndex index;
  ApproxOverlap approx;
  SingleFlight single_flight;
  Router router;
};

TEST(Router, ARequestNoEngineHasSeenIsColdAndAfterAServedResponseItIsWarmThere) {
  Rig rig(3);
  auto req = chat('a', 24, "hello");
  ASSERT_GE(req.fingerprints.chain.size(), 12u);
  Routed first = rig.router.decide(req);
  EXPECT_TRUE(first.cold);
  rig.router.observe(2, req);
  for (int i = 0; i < 5; ++i) {
    Routed again = rig.router.decide(chat('a', 24, "a different turn"));
    EXPECT_FALSE(again.cold);
    EXPECT_EQ(again.decision.ranked[0].ordinal, 2u);
    EXPECT_EQ(again.decision.outcome, Outcome::kOverlap);
    EXPECT_GE(again.decision.ranked[0].overlap, 12u);
  }
}

TEST(Router, ConcurrentIdenticalColdRequestsFollowTheirLeaderUntilItsLeaseEnds) {
  Rig rig(4);
  auto req = chat('b', 16, "same");
  Routed leader = rig.router.decide(req);
  ASSERT_TRUE(leader.cold);
  {
    SingleFlight::Lease lease = rig.router.lead(3, leader, req);
    for (int i = 0; i < 8; ++i) {
      Routed follower = rig.router.decide(req);
      EXPECT_FALSE(follower.cold);
      EXPECT_EQ(follower.decision.ranked[0].ordinal, 3u);
      EXPECT_EQ(follower.decision.outcome, Outcome::kSingleFlight);
      // A follower does not lead.
      EXPECT_FALSE(rig.router.lead(follower.decision.ranked[0].ordinal, follower, req).active());
    }
  }
  EXPECT_TRUE(rig.router.decide(req).cold);
}

TEST(Router, NewPrefixesTakeTurnsAcrossEnginesEvenWithWarmRequestsInBetween) {
  // Four apps, one after another, each a cold first turn then three warm turns: rotation
  // advances only on tied decisions, so the cold turns land on 0, 1, 0, 1 (a counter advanced
  // by every decision would put all four on one engine).
  Rig rig(2);
  std::vector<size_t> homes;
  for (char app : {'p', 'q', 'r', 's'}) {
    auto first = chat(app, 24, "turn 0");
    Routed r = rig.router.decide(first);
    ASSERT_TRUE(r.cold);
    EXPECT_TRUE(r.decision.rotated);
    const size_t home = r.decision.ranked[0].ordinal;
    rig.router.observe(home, first);
    homes.push_back(home);
    for (int t = 1; t < 4; ++t) {
      Routed w = rig.router.decide(chat(app, 24, "turn " + std::to_string(t)));
      EXPECT_EQ(w.decision.ranked[0].ordinal, home);
      EXPECT_FALSE(w.decision.rotated);
    }
  }
  EXPECT_EQ(homes, (std::vector<size_t>{0, 1, 0, 1}));
}

TEST(Router, TheLoadPolicyNeitherReadsTheIndexNorMarksRequestsCold) {
  Rig rig(2, "load");
  auto req = chat('c', 8, "x");
  rig.router.observe(1, req);  // ignored: the load policy keeps no index
  Routed r = rig.router.decide(req);
  EXPECT_FALSE(r.cold);
  for (const auto& t : r.decision.ranked) EXPECT_EQ(t.overlap, 0u);
  EXPECT_EQ(rig.index.entries(1), 0u);
}

TEST(Router, AShortRequestPrefersTheMtpEngineWhenCacheAndLoadTie) {
  Rig rig(4, "prefix", {Profile::kStandard, Profile::kMtp, Profile::kStandard, Profile::kMtp});
  for (int i = 0; i < 8; ++i) {
    Routed s = rig.router.decide(chat('d', 1, "q", 128));
    EXPECT_EQ(s.decision.ranked[0].profile, Profile::kMtp);
    // The profile separated the MTP pair from the standard pair (rotation then picked one).
    EXPECT_EQ(s.decision.outcome, Outcome::kProfile);
    Routed l = rig.router.decide(chat('d', 1, "q", 1024));
    EXPECT_EQ(l.decision.ranked[0].profile, Profile::kStandard);
  }
}

TEST(Router, TheOutcomeIsProfileWhenOnlyTheProfileSeparatedTheTwoBest) {
  Rig rig(2, "prefix", {Profile::kStandard, Profile::kMtp});
  Routed s = rig.router.decide(chat('d', 1, "q", 256));
  EXPECT_EQ(s.decision.ranked[0].ordinal, 1u);
  EXPECT_EQ(s.decision.outcome, Outcome::kProfile);
  Routed l = rig.router.decide(chat('d', 1, "q", 257));
  EXPECT_EQ(l.decision.ranked[0].ordinal, 0u);
  EXPECT_EQ(l.decision.outcome, Outcome::kProfile);
}

TEST(Router, CacheLocalityComesBeforeTheProfilePreference) {
  Rig rig(2, "prefix", {Profile::kStandard, Profile::kMtp});
  auto req = chat('e', 8, "q", 64);
  rig.router.observe(0, req);
  EXPECT_EQ(rig.router.decide(req).decision.ranked[0].ordinal, 0u);
}

TEST(Router, AFencedEngineGetsNothingEvenWhenItHoldsThePrefix) {
  Rig rig(2);
  auto req = chat('f', 8, "q");
  rig.router.observe(0, req);
  rig.fleet.fence(0, upstream::FenceReason::kConnect);
  Routed r = rig.router.decide(req);
  ASSERT_EQ(r.decision.dispatch_order().size(), 1u);
  EXPECT_EQ(r.decision.dispatch_order()[0].ordinal, 1u);
}

// A source with fixed answers (or none), to show the order sources are asked in.
class FixedOverlap final : public OverlapSource {
 public:
  FixedOverlap(bool answers, std::vector<uint32_t> overlap) : answers_(answers), overlap_(std::move(overlap)) {}
  std::string_view name() const override { return "fixed"; }
  bool overlaps(const request::PreparedRequest&, std::span<uint32_t> out, OverlapNote&) const override {
    if (!answers_) {
      out[0] = 999;  // scribbled on while declining: the router must not keep it
      return false;
    }
    std::copy(overlap_.begin(), overlap_.end(), out.begin());
    return true;
  }
  void served(size_t, const request::PreparedRequest&) override { ++served_; }
  void write_metrics(metrics::Exposition&) const override {}
  int served_ = 0;

 private:
  bool answers_;
  std::vector<uint32_t> overlap_;
};

TEST(Router, TheFirstSourceThatAnswersGivesTheOverlapsAndEverySourceLearnsWhatWasServed) {
  ManualClock clock;
  upstream::Fleet fleet(urls(3), clock, 30000);
  cache::ApproxIndex index(3);
  ApproxOverlap approx(index);
  SingleFlight single_flight(3, SingleFlightConfig{}, clock);
  FixedOverlap declines(false, {});
  FixedOverlap exact(true, {0, 0, 7});
  auto req = chat('g', 12, "q");
  approx.served(1, req);  // the approximate index says engine 1

  Router first_answers(make_policy("prefix", RouteConfig{}), fleet, {&exact, &approx}, single_flight, {});
  Routed r = first_answers.decide(req);
  EXPECT_EQ(r.decision.ranked[0].ordinal, 2u);
  EXPECT_EQ(r.decision.ranked[0].overlap, 7u);
  EXPECT_FALSE(r.cold);

  Router falls_back(make_policy("prefix", RouteConfig{}), fleet, {&declines, &approx}, single_flight, {});
  r = falls_back.decide(req);
  EXPECT_EQ(r.decision.ranked[0].ordinal, 1u);
  for (const CandidateTerms& t : r.decision.ranked) {
    if (t.ordinal == 0) {
      EXPECT_EQ(t.overlap, 0u) << "a declining source's output is discarded";
    }
  }

  falls_back.observe(0, req);
  EXPECT_EQ(declines.served_, 1);
  EXPECT_EQ(index.overlap(0, req.fingerprints.chain), req.fingerprints.chain.size());
}

// The request path decides into the connection's Routed, which holds its previous request's
// decision: every field is written, so what is left of that one (an exact placement, a session
// note, a cold prefix, a longer ranking) reads as a decision made afresh.
TEST(Router, ADecisionWrittenOverThePreviousOneReadsAsAFreshOne) {
  Rig rig(3);
  rig.router.observe(1, chat('w', 12, "warm"));
  for (const auto& req : {chat('w', 12, "again"), chat('z', 12, "cold")}) {
    Routed out;
    out.request.body_bytes = 999999;
    out.request.total_blocks = 77;
    out.decision.ranked.resize(5);
    out.decision.outcome = Outcome::kSpread;
    out.decision.fail_open = true;
    out.cold = true;
    out.exact = ExactOutcome::kShadowWouldMove;
    out.exact_tokens = {1, 2, 3};
    out.exact_tiers.resize(3);
    out.exact_provisional = {4, 5, 6};
    out.exact_stamps.resize(3);
    out.exact_block_size = 16;
    out.session.enabled = true;
    out.session.outcome = SessionOutcome::kMoved;
    out.session.target = 2;
    std::atomic<uint64_t> rotation_a{7}, rotation_b{7};
    rig.router.decide(req, nullptr, &rotation_a, {}, out);
    const Routed fresh = rig.router.decide(req, nullptr, &rotation_b, {});
    EXPECT_EQ(out.request.body_bytes, fresh.request.body_bytes);
    EXPECT_EQ(out.request.total_blocks, fresh.request.total_blocks);
    EXPECT_EQ(out.request.endpoint, fresh.request.endpoint);
    ASSERT_EQ(out.decision.ranked.size(), fresh.decision.ranked.size());
    for (size_t i = 0; i < out.decision.ranked.size(); ++i) {
      EXPECT_EQ(out.decision.ranked[i].ordinal, fresh.decision.ranked[i].ordinal);
      EXPECT_EQ(out.decision.ranked[i].overlap, fresh.decision.ranked[i].overlap);
      EXPECT_EQ(out.decision.ranked[i].score, fresh.decision.ranked[i].score);
    }
    EXPECT_EQ(out.decision.outcome, fresh.decision.outcome);
    EXPECT_EQ(out.decision.fail_open, fresh.decision.fail_open);
    EXPECT_EQ(out.decision.rotation, fresh.decision.rotation);
    EXPECT_EQ(out.cold, fresh.cold);
    EXPECT_EQ(out.exact, ExactOutcome::kNone);
    EXPECT_TRUE(out.exact_tokens.empty() && out.exact_tiers.empty() && out.exact_provisional.empty() &&
                out.exact_stamps.empty());
    EXPECT_EQ(out.exact_block_size, 0u);
    EXPECT_FALSE(out.session.enabled);
    EXPECT_EQ(out.session.outcome, fresh.session.outcome);
    EXPECT_FALSE(out.session.target.has_value());
  }
}

// ---- several routers: other routers' load, as the engines report it ----

TEST(Router, ARouterPicksTheIdleEngineWhenAnotherRouterLoadedTheOther) {
  Rig rig(2, "load");
  upstream::EngineLoadBoard board(rig.clock, upstream::EngineLoadConfig{});
  rig.router.set_engine_load(&board);
  // Engine 0 runs three requests this router never sent; engine 1 is idle.
  board.record(0, 3, 0, rig.fleet.at(0).inflight());
  board.record(1, 0, 0, rig.fleet.at(1).inflight());
  for (int i = 0; i < 6; ++i) {  // never rotated onto the loaded engine
    Routed r = rig.router.decide(chat('c', 1, "turn " + std::to_string(i)));
    EXPECT_EQ(r.decision.ranked[0].ordinal, 1u);
    EXPECT_EQ(r.decision.outcome, Outcome::kLoad);
    EXPECT_EQ(r.decision.ranked[1].foreign_load_units, 3);
    EXPECT_EQ(r.decision.ranked[0].foreign_load_units, 0);
  }
}

TEST(Router, ThisRoutersOwnInflightRequestsAreNotCountedAgainAsForeign) {
  Rig rig(2, "load");
  upstream::EngineLoadBoard board(rig.clock, upstream::EngineLoadConfig{});
  rig.router.set_engine_load(&board);
  // Two of this router's requests run on engine 0 (one unit each); three of another's on 1.
  LoadReservation a(rig.fleet.at(0), 1), b(rig.fleet.at(0), 1);
  board.record(0, 2, 0, rig.fleet.at(0).inflight());
  board.record(1, 3, 0, rig.fleet.at(1).inflight());
  // Engine 0 carries 2 units (its reservations), engine 1 three: engine 0 wins. Counted twice,
  // engine 0 would carry 4.
  Routed r = rig.router.decide(chat('d', 1, "x"));
  EXPECT_EQ(r.decision.ranked[0].ordinal, 0u);
  EXPECT_EQ(r.decision.ranked[0].load_units, 2);
  EXPECT_EQ(r.decision.ranked[0].foreign_load_units, 0);
  EXPECT_EQ(r.decision.ranked[1].foreign_load_units, 3);
}

TEST(Router, AStaleEngineReadingIsIgnored) {
  Rig rig(2, "load");
  upstream::EngineLoadBoard board(rig.clock, upstream::EngineLoadConfig{.stale_ms = 1500});
  rig.router.set_engine_load(&board);
  board.record(0, 5, 0, 0);
  EXPECT_EQ(rig.router.decide(chat('e', 1, "x")).decision.ranked[0].ordinal, 1u);
  rig.clock.advance_ms(1501);  // no scrape since: the reading no longer counts
  std::set<size_t> chosen;
  for (int i = 0; i < 4; ++i) {
    Routed r = rig.router.decide(chat('e', 1, "x"));
    EXPECT_EQ(r.decision.outcome, Outcome::kRoundRobin);
    for (const CandidateTerms& c : r.decision.ranked) EXPECT_EQ(c.foreign_load_units, 0);
    chosen.insert(r.decision.ranked[0].ordinal);
  }
  EXPECT_EQ(chosen.size(), 2u);  // equal engines take turns again
}

TEST(Router, ForeignLoadIsExportedPerUpstreamAsRoutingReadsIt) {
  Rig rig(2);
  upstream::EngineLoadBoard board(rig.clock, upstream::EngineLoadConfig{.stale_ms = 1500});
  rig.router.set_engine_load(&board);
  board.record(1, 0, 2, 0);  // two waiting: 2 x 2 units
  metrics::Exposition x;
  rig.router.write_metrics(x);
  const std::string text = x.take();
  EXPECT_NE(text.find("ramjet_upstream_foreign_load_units{upstream=\"0\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_upstream_foreign_load_units{upstream=\"1\"} 4\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace ramjet::route
