#include <gtest/gtest.h>

#include <map>
#include <set>
#include <random>

#include "common/clock.h"
#include "request/route/policy.h"
#include "request/route/reservation.h"
#include "upstream/fleet.h"

namespace ramjet::route {
namespace {

request::PreparedRequest req_of(size_t bytes) {
  request::PreparedRequest r;
  r.body.assign(bytes, 'x');
  return r;
}

FleetSnapshot snap(std::vector<std::pair<bool, int64_t>> engines) {
  FleetSnapshot s;
  for (size_t i = 0; i < engines.size(); ++i)
    s.candidates.push_back(CandidateState{i, engines[i].first, engines[i].second, 0});
  return s;
}

TEST(LeastLoadPolicy, PicksTheEngineWithFewestLoadUnits) {
  auto p = make_policy("load", {});
  auto d = p->decide(req_of(10), snap({{true, 5}, {true, 1}, {true, 3}}));
  EXPECT_EQ(d.ranked[0].ordinal, 1u);
  EXPECT_EQ(d.ranked[1].ordinal, 2u);
  EXPECT_EQ(d.outcome, Outcome::kLoad);
}

TEST(LeastLoadPolicy, HealthyEnginesComeBeforeIdleFencedOnes) {
  auto p = make_policy("load", {});
  auto d = p->decide(req_of(10), snap({{false, 0}, {true, 7}}));
  EXPECT_EQ(d.ranked[0].ordinal, 1u);
  EXPECT_FALSE(d.fail_open);
  ASSERT_EQ(d.dispatch_order().size(), 1u);
}

TEST(LeastLoadPolicy, EqualEnginesShareTrafficEvenlyThroughRotation) {
  auto p = make_policy("load", {});
  std::map<size_t, int> picks;
  const int n = 30000;
  for (int i = 0; i < n; ++i) picks[p->decide(req_of(1), snap({{true, 0}, {true, 0}, {true, 0}})).ranked[0].ordinal]++;
  for (auto& [ordinal, count] : picks) EXPECT_NEAR(count, n / 3, n / 100) << ordinal;
}

TEST(LeastLoadSimulation, EnginesTiedForTheLeastLoadShareEvenlyWhereverTheySit) {
  // Engines 1 and 3 tie at the least load; 0 is busier and 2 fenced. Each of 1 and 3 gets half.
  auto p = make_policy("load", {});
  std::map<size_t, int> picks;
  const int n = 20000;
  for (int i = 0; i < n; ++i)
    picks[p->decide(req_of(1), snap({{true, 5}, {true, 2}, {false, 0}, {true, 2}})).ranked[0].ordinal]++;
  ASSERT_EQ(picks.size(), 2u);
  EXPECT_NEAR(picks[1], n / 2, n / 100);
  EXPECT_NEAR(picks[3], n / 2, n / 100);
}

TEST(LeastLoadSimulation, ClosedLoopRequestsKeepEveryEngineWithinOneUnitOfTheOthers) {
  // Requests of random sizes arrive and finish in random order; every decision sees the live
  // reservations. Least load keeps the spread of reserved units within one request's units.
  ManualClock clock;
  std::vector<config::UpstreamUrl> urls(5);
  for (size_t i = 0; i < urls.size(); ++i) urls[i].host = "e" + std::to_string(i);
  upstream::Fleet fleet(urls, clock, 30000);
  auto p = make_policy("load", {});
  std::mt19937 rng(42);
  std::vector<LoadReservation> live;
  for (int step = 0; step < 20000; ++step) {
    if (!live.empty() && (live.size() > 40 || rng() % 2 == 0)) {
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(rng() % live.size()));
    } else {
      auto d = p->decide(req_of(1 + rng() % (64 * 1024)), FleetSnapshot::of(fleet));
      const auto& w = d.ranked[0];
      int64_t lo = INT64_MAX;
      for (size_t i = 0; i < fleet.size(); ++i) lo = std::min(lo, fleet.at(i).load_units());
      ASSERT_EQ(fleet.at(w.ordinal).load_units(), lo) << "step " << step;
      live.emplace_back(fleet.at(w.ordinal), w.request_load_units);
    }
  }
}

TEST(LeastLoadPolicy, NothingHealthyFailsOpenToAtMostTwoCandidates) {
  auto p = make_policy("load", {});
  auto d = p->decide(req_of(1), snap({{false, 0}, {false, 0}, {false, 0}}));
  EXPECT_TRUE(d.fail_open);
  EXPECT_EQ(d.dispatch_order().size(), 2u);
}

TEST(LeastLoadPolicy, SingleEngineOutcomeIsSingle) {
  auto p = make_policy("load", {});
  EXPECT_EQ(p->decide(req_of(1), snap({{true, 0}})).outcome, Outcome::kSingle);
}

TEST(LeastLoadPolicy, UnknownPolicyNameYieldsNull) { EXPECT_EQ(make_policy("nope", {}), nullptr); }

TEST(RequestLoadUnits, AreCeilOfBytesOverUnitClampedToOneAndMax) {
  RouteConfig c{32768, 8};
  EXPECT_EQ(request_load_units(0, c), 1u);
  EXPECT_EQ(request_load_units(32768, c), 1u);
  EXPECT_EQ(request_load_units(32769, c), 2u);
  EXPECT_EQ(request_load_units(100u << 20, c), 8u);
}

TEST(LoadReservation, ReleasesOnDestructionAndShrinksButNeverGrows) {
  ManualClock clock;
  std::vector<config::UpstreamUrl> urls(1);
  upstream::Fleet fleet(urls, clock, 30000);
  {
    LoadReservation r(fleet.at(0), 5);
    EXPECT_EQ(fleet.at(0).load_units(), 5);
    EXPECT_EQ(fleet.at(0).inflight(), 1);
    r.shrink_to(1);
    EXPECT_EQ(fleet.at(0).load_units(), 1);
    r.shrink_to(4);
    EXPECT_EQ(fleet.at(0).load_units(), 1);
    LoadReservation moved = std::move(r);
    EXPECT_EQ(fleet.at(0).inflight(), 1);
  }
  EXPECT_EQ(fleet.at(0).load_units(), 0);
  EXPECT_EQ(fleet.at(0).inflight(), 0);
}

TEST(LeastLoadPolicy, SeveralRoutersDecidingAtOnceTakeDifferentEnginesOfAnEvenFleet) {
  auto p = make_policy("load", RouteConfig{});
  const RouteRequest r = RouteRequest::of(req_of(100), p->config());
  std::set<size_t> taken;
  for (uint32_t place = 0; place < 2; ++place) {
    FleetSnapshot s = snap({{true, 0}, {true, 0}, {true, 0}});
    s.routers = 2;
    s.spread_place = place;
    const Decision d = p->decide(r, s, 0);
    taken.insert(d.ranked.front().ordinal);
    EXPECT_EQ(d.outcome, Outcome::kRoundRobin);  // equal engines: a tie, not a move
  }
  EXPECT_EQ(taken.size(), 2u);
  // Two units apart: one unit of the request's own load does not close the gap; every place
  // takes the idle engine.
  for (uint32_t place : {0u, 1u}) {
    FleetSnapshot s = snap({{true, 2}, {true, 0}});
    s.routers = 2;
    s.spread_place = place;
    EXPECT_EQ(p->decide(r, s, 0).ranked.front().ordinal, 1u);
  }
}

}  // namespace
}  // namespace ramjet::route
