#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <tuple>

#include "request/route/policy.h"

namespace ramjet::route {
namespace {

struct Engine {
  uint32_t overlap = 0;
  int64_t load = 0;
  bool eligible = true;
  Profile profile = Profile::kNone;
  uint32_t single_flight = 0;
  int64_t foreign = 0;
};

FleetSnapshot fleet(const std::vector<Engine>& engines) {
  FleetSnapshot s;
  for (size_t i = 0; i < engines.size(); ++i) {
    CandidateState c;
    c.ordinal = i;
    c.eligible = engines[i].eligible;
    c.load_units = engines[i].load;
    c.overlap = engines[i].overlap;
    c.profile = engines[i].profile;
    c.single_flight = engines[i].single_flight;
    c.foreign_load_units = engines[i].foreign;
    s.candidates.push_back(c);
  }
  return s;
}

request::PreparedRequest chat(size_t bytes = 1000,
                              std::optional<uint64_t> max_tokens = std::nullopt) {
  request::PreparedRequest r;
  r.endpoint = request::Endpoint::kChat;
  r.body.assign(bytes, 'x');
  r.max_output_tokens = max_tokens;
  return r;
}

std::unique_ptr<Policy> prefix(RouteConfig c = {}) {
  return make_policy("prefix", c);
}

size_t winner(Policy& p, const request::PreparedRequest& r, const std::vector<Engine>& engines) {
  return p.decide(r, fleet(engines)).ranked.front().ordinal;
}

// ---- scoring ----

TEST(PrefixLoadPolicy, OtherRoutersLoadWeighsLikeThisRoutersOwnReservations) {
  auto p = prefix();
  // Engine 0 holds 8 blocks but other routers keep 3 units busy there: 8 - 4*3 < 0.
  Engine warm{.overlap = 8, .foreign = 3};
  Engine cold{};
  Decision d = p->decide(chat(), fleet({warm, cold}));
  EXPECT_EQ(d.ranked.front().ordinal, 1u);
  EXPECT_EQ(d.outcome, Outcome::kLoad);
  EXPECT_EQ(d.ranked.back().foreign_load_units, 3);
  EXPECT_EQ(d.ranked.back().score, 8.0 - 4.0 * 3);
  // The same units reserved by this router decide the same way.
  EXPECT_EQ(winner(*p, chat(), {Engine{.overlap = 8, .load = 3}, cold}), 1u);
  // With less foreign load the cache wins again: 8 - 4*1 > 0.
  EXPECT_EQ(winner(*p, chat(), {Engine{.overlap = 8, .foreign = 1}, cold}), 0u);
}

TEST(PrefixLoadPolicy, IsSelectedByTheNamePrefix) {
  auto p = prefix();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->name(), "prefix");
}

TEST(PrefixLoadPolicy, PicksTheEngineHoldingTheLongestPrefixWhenLoadsAreEqual) {
  auto p = prefix();
  auto d = p->decide(chat(), fleet({{.overlap = 2}, {.overlap = 9}, {.overlap = 0}}));
  EXPECT_EQ(d.ranked[0].ordinal, 1u);
  EXPECT_EQ(d.ranked[1].ordinal, 0u);
  EXPECT_EQ(d.outcome, Outcome::kOverlap);
}

TEST(PrefixLoadPolicy, ScoreIsCappedAffinityMinusAlphaTimesLoad) {
  auto p = prefix({.alpha = 2.5, .max_overlap_blocks = 10});
  auto d = p->decide(chat(), fleet({{.overlap = 40, .load = 3}}));
  const CandidateTerms& t = d.ranked[0];
  EXPECT_EQ(t.overlap, 40u);
  EXPECT_EQ(t.affinity, 10u);
  EXPECT_DOUBLE_EQ(t.score, 10 - 2.5 * 3);
  EXPECT_EQ(t.load_units, 3);
}

TEST(PrefixLoadPolicy, RelativeAffinityLowersEveryOverlapByWhatTheWarmestExceedsTheCapBy) {
  struct Row {
    uint32_t overlap, warmest, cap, affinity;
  };
  for (const Row& r : {Row{0, 0, 32, 0}, Row{44, 44, 32, 32}, Row{40, 44, 32, 28}, Row{0, 44, 32, 0},
                       Row{5, 9, 32, 5}, Row{9, 5, 32, 9}, Row{32, 32, 32, 32}, Row{3, 3, 0, 0},
                       Row{50, 44, 32, 32}}) {
    EXPECT_EQ(relative_affinity(r.overlap, r.warmest, r.cap), r.affinity) << r.overlap << " below " << r.warmest;
  }
}

TEST(PrefixLoadPolicy, RelativeCreditLetsTheConversationsEngineWinPastASharedPromptLongerThanTheCap) {
  // Every engine holds a 40-block shared system prompt, engine 2 also the conversation's 6 blocks
  // after it; the cap is 32. Absolute: every engine earns the cap, so load decides (engine 2 is a
  // unit busier: it loses). Relative: engine 2 earns the cap, the others 6 less: 32 - 4 > 26.
  const std::vector<Engine> engines{{.overlap = 40}, {.overlap = 40}, {.overlap = 46, .load = 1}};
  RouteConfig absolute{.max_overlap_blocks = 32};
  RouteConfig relative{.max_overlap_blocks = 32, .relative_credit = true};
  EXPECT_NE(winner(*prefix(absolute), chat(), engines), 2u);
  Decision d = prefix(relative)->decide(chat(), fleet(engines));
  EXPECT_EQ(d.ranked.front().ordinal, 2u);
  EXPECT_EQ(d.ranked.front().affinity, 32u);
  EXPECT_EQ(d.ranked.front().overlap, 46u) << "the raw overlap is kept (journal, replay)";
  EXPECT_EQ(d.ranked[1].affinity, 26u);
  // Two units busier, load wins: 32 - 8 < 26.
  EXPECT_NE(winner(*prefix(relative), chat(), {{.overlap = 40}, {.overlap = 40}, {.overlap = 46, .load = 2}}), 2u);
}

TEST(PrefixLoadPolicy, RelativeCreditIsAbsoluteWhileNoOverlapPassesTheCap) {
  RouteConfig absolute{.max_overlap_blocks = 32};
  RouteConfig relative{.max_overlap_blocks = 32, .relative_credit = true};
  std::mt19937 rng(11);
  for (int round = 0; round < 500; ++round) {
    std::vector<Engine> engines(1 + rng() % 6);
    for (Engine& e : engines) {
      e.overlap = rng() % 33;  // <= the cap
      e.load = rng() % 4;
      e.eligible = rng() % 5 != 0;
    }
    const RouteRequest rr = RouteRequest::of(chat(), absolute);
    const Decision a = prefix(absolute)->decide(rr, fleet(engines), static_cast<uint64_t>(round));
    const Decision r = prefix(relative)->decide(rr, fleet(engines), static_cast<uint64_t>(round));
    ASSERT_EQ(a.ranked.size(), r.ranked.size());
    for (size_t k = 0; k < a.ranked.size(); ++k) {
      ASSERT_EQ(a.ranked[k].ordinal, r.ranked[k].ordinal) << round;
      ASSERT_EQ(a.ranked[k].affinity, r.ranked[k].affinity) << round;
    }
  }
}

TEST(PrefixLoadPolicy, RelativeCreditMeasuresFromTheWarmestEligibleCandidate) {
  RouteConfig relative{.max_overlap_blocks = 32, .relative_credit = true};
  // The warmest engine is fenced: the eligible ones' 40 and 46 are measured from 46, not its 90.
  Decision d = prefix(relative)->decide(chat(), fleet({{.overlap = 90, .eligible = false}, {.overlap = 40}, {.overlap = 46}}));
  EXPECT_EQ(d.ranked[0].ordinal, 2u);
  EXPECT_EQ(d.ranked[0].affinity, 32u);
  EXPECT_EQ(d.ranked[1].affinity, 26u);
  EXPECT_EQ(d.ranked[2].affinity, 32u) << "the fenced one, from the warmest of all";
}

TEST(PrefixLoadPolicy, LoadSpikeOverridesAffinityOnceAlphaTimesDeltaExceedsCap) {
  // Warm engine holds more than the cap (affinity 32); alpha 4. At load 8 its score 32 - 32 = 0
  // ties the idle cold engine and raw overlap keeps it; at load 9 the cold engine wins.
  auto p = prefix();
  auto at8 = p->decide(chat(), fleet({{.overlap = 50, .load = 8}, {.overlap = 0, .load = 0}}));
  EXPECT_EQ(at8.ranked[0].ordinal, 0u);
  EXPECT_EQ(at8.outcome, Outcome::kOverlap);
  auto at9 = p->decide(chat(), fleet({{.overlap = 50, .load = 9}, {.overlap = 0, .load = 0}}));
  EXPECT_EQ(at9.ranked[0].ordinal, 1u);
  EXPECT_EQ(at9.outcome, Outcome::kLoad);
}

TEST(PrefixLoadPolicy, ModestLoadDoesNotPullARequestOffItsWarmEngine) {
  auto p = prefix();
  EXPECT_EQ(winner(*p, chat(), {{.overlap = 12, .load = 2}, {.overlap = 0, .load = 0}}), 0u);
}

TEST(PrefixLoadPolicy, WarmTieBreaksOnRawOverlap) {
  // Both above the cap: equal affinity and score; the longer raw overlap wins, whatever the
  // rotation.
  auto p = prefix({.max_overlap_blocks = 4});
  for (int i = 0; i < 10; ++i) {
    auto d = p->decide(chat(), fleet({{.overlap = 5}, {.overlap = 30}, {.overlap = 6}}));
    EXPECT_EQ(d.ranked[0].ordinal, 1u);
    EXPECT_EQ(d.ranked[1].ordinal, 2u);
    EXPECT_EQ(d.ranked[0].score, d.ranked[2].score);
  }
}

TEST(PrefixLoadPolicy, AlphaZeroIgnoresLoadEntirely) {
  auto p = prefix({.alpha = 0});
  EXPECT_EQ(winner(*p, chat(), {{.overlap = 1, .load = 1000}, {.overlap = 0, .load = 0}}), 0u);
}

TEST(PrefixLoadPolicy, ABigColdPrefillRepelsSmallRequests) {
  // A 1 MiB cold request reserves 8 units on the engine it lands on; the next small request
  // (1 unit anywhere) goes elsewhere.
  auto p = prefix();
  auto big = p->decide(chat(1 << 20), fleet({{}, {}}));
  EXPECT_EQ(big.ranked[0].request_load_units, 8u);
  std::vector<Engine> after(2);
  after[big.ranked[0].ordinal].load = big.ranked[0].request_load_units;
  EXPECT_NE(winner(*p, chat(100), after), big.ranked[0].ordinal);
}

// ---- single-flight ----

TEST(PrefixLoadPolicy, AColdRequestFollowsTheEngineWhereItsPrefixIsBeingPrefilled) {
  auto p = prefix();
  for (int i = 0; i < 6; ++i) {
    auto d = p->decide(RouteRequest{request::Endpoint::kChat, 1000, Profile::kStandard, 12},
                       fleet({{}, {.load = 1, .single_flight = 12}, {}}), i);
    EXPECT_EQ(d.ranked[0].ordinal, 1u);
    EXPECT_EQ(d.ranked[0].affinity, 32u);  // its whole prompt is being prefilled there: the cap
    EXPECT_EQ(d.outcome, Outcome::kSingleFlight);
  }
}

TEST(SingleFlightAffinity, IsTheCapScaledByTheShareOfTheFollowersLeadingBlocksBeingPrefilled) {
  EXPECT_EQ(single_flight_affinity(0, 10, 32), 0u);
  EXPECT_EQ(single_flight_affinity(8, 8, 32), 32u);    // identical 16 KiB prompts
  EXPECT_EQ(single_flight_affinity(12, 13, 32), 30u);  // same system prompt, own last turn
  EXPECT_EQ(single_flight_affinity(1, 13, 32), 3u);    // a shared 2 KiB preamble earns little
  EXPECT_EQ(single_flight_affinity(32, 500, 32), 32u); // a leader registers at most the cap
  EXPECT_EQ(single_flight_affinity(5, 0, 32), 32u);    // unknown length: the pending blocks
  EXPECT_EQ(single_flight_affinity(5, 10, 0), 0u);     // cap 0: no affinity at all
}

TEST(PrefixLoadPolicy, AFollowerReservesOnlyWhatItsLeaderIsNotAlreadyPrefilling) {
  auto p = prefix();
  const RouteRequest r{request::Endpoint::kChat, 100 * 1024, Profile::kStandard, 50};
  auto d = p->decide(r, fleet({{.single_flight = 40}, {}}), 0);
  std::map<size_t, uint32_t> units;
  for (const auto& t : d.ranked) units[t.ordinal] = t.request_load_units;
  EXPECT_EQ(units[0], 1u);  // 100 KiB - 40 blocks of 2 KiB pending = 20 KiB uncached
  EXPECT_EQ(units[1], 4u);
}

TEST(PrefixLoadPolicy, ABurstOfIdenticalNewPrefixesFollowsItsLeaderUntilItFallsBehindByTheCap) {
  // Defaults: cap 32, alpha 4. Each follower reserves 1 unit on the leader's engine; the k-th
  // follower sees k units there (leader included): it follows while 32 - 4k >= 0.
  auto p = prefix();
  const RouteRequest r{request::Endpoint::kChat, 16 * 1024, Profile::kStandard, 8};
  for (int64_t k = 1; k <= 9; ++k) {
    auto d = p->decide(r, fleet({{.load = k, .single_flight = 8}, {}, {}, {}}), 0);
    EXPECT_EQ(d.ranked[0].ordinal == 0, k <= 8) << k;
  }
}

TEST(PrefixLoadPolicy, LoadWinsOverSingleFlightOnceTheLeadersEngineFallsBehindByMoreThanTheCap) {
  auto p = prefix();
  const RouteRequest r{request::Endpoint::kChat, 1000, Profile::kStandard, 40};
  EXPECT_EQ(p->decide(r, fleet({{.load = 8, .single_flight = 40}, {}}), 0).ranked[0].ordinal, 0u);
  auto d = p->decide(r, fleet({{.load = 9, .single_flight = 40}, {}}), 0);
  EXPECT_EQ(d.ranked[0].ordinal, 1u);
  EXPECT_EQ(d.outcome, Outcome::kLoad);
}

TEST(PrefixLoadPolicy, CachedBlocksAndPendingBlocksCountAlikeAndTheOutcomeSaysWhich) {
  auto p = prefix();
  const RouteRequest r{request::Endpoint::kChat, 1000, Profile::kStandard, 40};
  auto cached = p->decide(r, fleet({{.overlap = 40}, {.single_flight = 6}}), 0);
  EXPECT_EQ(cached.ranked[0].ordinal, 0u);
  EXPECT_EQ(cached.outcome, Outcome::kOverlap);
  auto pending = p->decide(r, fleet({{.overlap = 4}, {.single_flight = 40}}), 0);
  EXPECT_EQ(pending.ranked[0].ordinal, 1u);
  EXPECT_EQ(pending.outcome, Outcome::kSingleFlight);
}

TEST(PrefixLoadPolicy, TheOutcomeIsProfileEvenWhenTwoEnginesOfThePreferredProfileTie) {
  auto p = prefix();
  const RouteRequest r{request::Endpoint::kChat, 1000, Profile::kMtp, 1};
  auto d = p->decide(r, fleet({{.profile = Profile::kMtp}, {.profile = Profile::kMtp},
                               {.profile = Profile::kStandard}, {.profile = Profile::kStandard}}), 0);
  EXPECT_EQ(d.ranked[0].profile, Profile::kMtp);
  EXPECT_EQ(d.outcome, Outcome::kProfile);
}

TEST(PrefixLoadPolicy, TheDecisionRecordsTheRotationItUsed) {
  auto p = prefix();
  const RouteRequest r = RouteRequest::of(chat(), p->config());
  auto d = p->decide(r, fleet({{}, {}, {}}), 7);
  EXPECT_EQ(d.rotation, 7u);
  // Pure: the same inputs give the same ranking.
  auto again = p->decide(r, fleet({{}, {}, {}}), 7);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(d.ranked[i].ordinal, again.ranked[i].ordinal);
}

// ---- per-candidate request load units ----

TEST(PrefixLoadPolicy, RequestLoadUnitsCountOnlyEachCandidatesUncachedBytes) {
  auto p = prefix();  // chunk 2048, unit 32768, max 8
  auto d = p->decide(chat(100 * 1024), fleet({{.overlap = 0}, {.overlap = 16}, {.overlap = 100}}));
  std::map<size_t, uint32_t> units;
  for (const auto& t : d.ranked) units[t.ordinal] = t.request_load_units;
  EXPECT_EQ(units[0], 4u);  // ceil(102400 / 32768)
  EXPECT_EQ(units[1], 3u);  // ceil((102400 - 32768) / 32768)
  EXPECT_EQ(units[2], 1u);  // fully cached: saturates at 0, clamped to 1
}

TEST(PrefixLoadPolicy, RequestLoadUnitsAreClampedToTheMaximum) {
  auto p = prefix({.max_load_units = 5});
  EXPECT_EQ(p->decide(chat(50 << 20), fleet({{}})).ranked[0].request_load_units, 5u);
}

TEST(RequestLoadUnitsWithOverlap, SaturateInsteadOfOverflowing) {
  RouteConfig c;
  c.chunk_bytes = UINT64_MAX / 2;
  EXPECT_EQ(request_load_units_with_overlap(1 << 20, 3, c), 1u);
  c.chunk_bytes = 0;
  EXPECT_EQ(request_load_units_with_overlap(1 << 20, 3, c), 8u);
}

// ---- eligibility and fail-open ----

TEST(PrefixLoadPolicy, ServingEligibleEnginesComeFirstEvenWhenAFencedOneIsWarmer) {
  auto p = prefix();
  auto d =
      p->decide(chat(), fleet({{.overlap = 30, .eligible = false}, {.overlap = 0, .load = 5}}));
  EXPECT_EQ(d.ranked[0].ordinal, 1u);
  EXPECT_FALSE(d.fail_open);
  ASSERT_EQ(d.dispatch_order().size(), 1u);
  EXPECT_EQ(d.outcome, Outcome::kRoundRobin);  // the fenced engine's score decided nothing
}

TEST(PrefixLoadPolicy, NothingEligibleFailsOpenToTheTwoBestScores) {
  auto p = prefix();
  auto d = p->decide(chat(), fleet({{.overlap = 0, .eligible = false},
                                    {.overlap = 3, .eligible = false},
                                    {.overlap = 7, .eligible = false}}));
  EXPECT_TRUE(d.fail_open);
  auto order = d.dispatch_order();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0].ordinal, 2u);
  EXPECT_EQ(order[1].ordinal, 1u);
}

TEST(PrefixLoadPolicy, EmptyFleetDecidesNothing) {
  auto p = prefix();
  auto d = p->decide(chat(), FleetSnapshot{});
  EXPECT_TRUE(d.ranked.empty());
  EXPECT_FALSE(d.fail_open);
  EXPECT_EQ(d.outcome, Outcome::kSingle);
}

// ---- decode profiles ----

TEST(PrefixLoadPolicy, ShortOutputsPreferMtpWhenScoresTie) {
  auto p = prefix();
  for (uint64_t tokens : {1u, 64u, 256u}) {
    for (int i = 0; i < 6; ++i) {
      auto d = p->decide(chat(1000, tokens), fleet({{.profile = Profile::kStandard},
                                                    {.profile = Profile::kMtp},
                                                    {.profile = Profile::kStandard}}));
      EXPECT_EQ(d.ranked[0].ordinal, 1u) << tokens;
      EXPECT_EQ(d.outcome, Outcome::kProfile);
    }
  }
}

TEST(PrefixLoadPolicy, LongOrUnsetOutputsPreferStandardWhenScoresTie) {
  auto p = prefix();
  for (std::optional<uint64_t> tokens :
       {std::optional<uint64_t>(257), std::optional<uint64_t>(), std::optional<uint64_t>(0)}) {
    for (int i = 0; i < 6; ++i) {
      auto d = p->decide(chat(1000, tokens),
                         fleet({{.profile = Profile::kMtp}, {.profile = Profile::kStandard}}));
      EXPECT_EQ(d.ranked[0].ordinal, 1u);
      EXPECT_EQ(d.outcome, Outcome::kProfile);
    }
  }
}

TEST(PrefixLoadPolicy, ShortMaxTokensIsConfigurable) {
  auto p = prefix({.short_max_tokens = 1024});
  EXPECT_EQ(
      winner(*p, chat(1000, 1000), {{.profile = Profile::kStandard}, {.profile = Profile::kMtp}}),
      1u);
}

TEST(PrefixLoadPolicy, ProfileNeverOverridesCacheOrLoad) {
  auto p = prefix();
  // Warmer standard engine beats an idle cold MTP engine for a short request...
  EXPECT_EQ(winner(*p, chat(1000, 16),
                   {{.overlap = 1, .profile = Profile::kStandard}, {.profile = Profile::kMtp}}),
            0u);
  // ...and so does a less loaded one.
  EXPECT_EQ(
      winner(*p, chat(1000, 16),
             {{.load = 0, .profile = Profile::kStandard}, {.load = 1, .profile = Profile::kMtp}}),
      0u);
  // Equal score but more raw overlap also comes before the profile.
  EXPECT_EQ(winner(*p, chat(1000, 16),
                   {{.overlap = 40, .profile = Profile::kStandard},
                    {.overlap = 35, .profile = Profile::kMtp}}),
            0u);
}

TEST(PrefixLoadPolicy, EnginesWithoutADeclaredProfileSitBetweenPreferredAndOther) {
  auto p = prefix();
  auto d = p->decide(chat(1000, 16), fleet({{.profile = Profile::kStandard},
                                            {.profile = Profile::kNone},
                                            {.profile = Profile::kMtp}}));
  EXPECT_EQ(d.ranked[0].ordinal, 2u);
  EXPECT_EQ(d.ranked[1].ordinal, 1u);
  EXPECT_EQ(d.ranked[2].ordinal, 0u);
}

TEST(PrefixLoadPolicy, OtherEndpointsHaveNoProfilePreference) {
  auto p = prefix();
  request::PreparedRequest other;
  other.max_output_tokens = 10;
  std::map<size_t, int> picks;
  for (int i = 0; i < 100; ++i) {
    auto d = p->decide(other, fleet({{.profile = Profile::kStandard}, {.profile = Profile::kMtp}}));
    picks[d.ranked[0].ordinal]++;
    EXPECT_EQ(d.outcome, Outcome::kRoundRobin);
  }
  EXPECT_EQ(picks[0], 50);
  EXPECT_EQ(picks[1], 50);
}

TEST(PreferredProfile, FollowsTheOutputLimitAndEndpoint) {
  RouteConfig c;
  EXPECT_EQ(preferred_profile(chat(1, 256), c), Profile::kMtp);
  EXPECT_EQ(preferred_profile(chat(1, 257), c), Profile::kStandard);
  EXPECT_EQ(preferred_profile(chat(1, 0), c), Profile::kStandard);
  EXPECT_EQ(preferred_profile(chat(1), c), Profile::kStandard);
  request::PreparedRequest other;
  other.max_output_tokens = 5;
  EXPECT_EQ(preferred_profile(other, c), Profile::kNone);
  EXPECT_EQ(profile_label(Profile::kMtp), "mtp");
  EXPECT_EQ(profile_label(Profile::kStandard), "standard");
  EXPECT_EQ(profile_label(Profile::kNone), "none");
}

// ---- outcome labels ----

TEST(PrefixLoadPolicy, OutcomeIsSingleWithOneEngine) {
  EXPECT_EQ(prefix()->decide(chat(), fleet({{.overlap = 3}})).outcome, Outcome::kSingle);
}

TEST(PrefixLoadPolicy, OutcomeIsLoadWhenColdScoresDiffer) {
  auto d = prefix()->decide(chat(), fleet({{.load = 2}, {.load = 1}}));
  EXPECT_EQ(d.ranked[0].ordinal, 1u);
  EXPECT_EQ(d.outcome, Outcome::kLoad);
  EXPECT_EQ(outcome_label(d.outcome), "load");
}

TEST(PrefixLoadPolicy, OutcomeIsRoundRobinWhenEverythingTies) {
  auto d = prefix()->decide(chat(), fleet({{}, {}, {}}));
  EXPECT_EQ(d.outcome, Outcome::kRoundRobin);
  EXPECT_EQ(outcome_label(d.outcome), "rr");
}

TEST(PrefixLoadPolicy, OutcomeIsOverlapWhenTheWinnerHoldsAPrefixEvenIfTiedWithAnother) {
  auto d = prefix()->decide(chat(), fleet({{.overlap = 3}, {.overlap = 3}}));
  EXPECT_EQ(d.outcome, Outcome::kOverlap);
  EXPECT_EQ(outcome_label(d.outcome), "overlap");
}

TEST(PrefixLoadPolicy, OutcomeIsProfileOnlyWhenTheProfileSeparatedTheWinnerFromATiedCandidate) {
  auto p = prefix();
  // Profile separated two equally warm engines: `profile`, not `overlap`.
  auto warm = p->decide(chat(1000, 16), fleet({{.overlap = 3, .profile = Profile::kStandard},
                                               {.overlap = 3, .profile = Profile::kMtp}}));
  EXPECT_EQ(warm.ranked[0].ordinal, 1u);
  EXPECT_EQ(warm.outcome, Outcome::kProfile);
  EXPECT_EQ(outcome_label(warm.outcome), "profile");
  // Two MTP engines tie and rotation picks between them, but the profile decided against the
  // standard engine that tied on everything else: still `profile`.
  auto tie = p->decide(chat(1000, 16), fleet({{.profile = Profile::kMtp},
                                              {.profile = Profile::kMtp},
                                              {.profile = Profile::kStandard}}));
  EXPECT_EQ(tie.outcome, Outcome::kProfile);
  // Only engines of one profile: rotation decided.
  auto same = p->decide(chat(1000, 16), fleet({{.profile = Profile::kMtp}, {.profile = Profile::kMtp}}));
  EXPECT_EQ(same.outcome, Outcome::kRoundRobin);
  // Load decided before the profile could.
  auto load =
      p->decide(chat(1000, 16),
                fleet({{.load = 1, .profile = Profile::kMtp}, {.profile = Profile::kStandard}}));
  EXPECT_EQ(load.outcome, Outcome::kLoad);
}

TEST(PrefixLoadPolicy, DecisionCarriesEveryCandidatesTerms) {
  auto d =
      prefix()->decide(chat(70000, 8), fleet({{.overlap = 40, .load = 2, .profile = Profile::kMtp},
                                              {.overlap = 0, .load = 0, .eligible = false}}));
  ASSERT_EQ(d.ranked.size(), 2u);
  const CandidateTerms& a = d.ranked[0];
  EXPECT_EQ(a.ordinal, 0u);
  EXPECT_TRUE(a.eligible);
  EXPECT_EQ(a.overlap, 40u);
  EXPECT_EQ(a.affinity, 32u);
  EXPECT_EQ(a.load_units, 2);
  EXPECT_DOUBLE_EQ(a.score, 24.0);
  EXPECT_EQ(a.profile, Profile::kMtp);
  EXPECT_EQ(a.request_load_units, 1u);
  const CandidateTerms& b = d.ranked[1];
  EXPECT_FALSE(b.eligible);
  EXPECT_EQ(b.request_load_units, 3u);  // ceil(70000 / 32768)
  EXPECT_EQ(b.profile, Profile::kNone);
}

// ---- statistical simulations (Envoy style: many decisions, shares within tolerance) ----

constexpr int kPicks = 30000;

std::map<size_t, int> shares(Policy& p, const request::PreparedRequest& r,
                             const std::vector<Engine>& engines, int picks = kPicks) {
  std::map<size_t, int> out;
  const FleetSnapshot s = fleet(engines);
  for (int i = 0; i < picks; ++i) out[p.decide(r, s).ranked[0].ordinal]++;
  return out;
}

TEST(PrefixLoadSimulation, EqualEnginesEachGetOneNthWithinOnePercent) {
  for (size_t n : {2u, 3u, 7u, 16u}) {
    auto p = prefix();
    auto got = shares(*p, chat(), std::vector<Engine>(n));
    ASSERT_EQ(got.size(), n);
    for (auto& [ordinal, count] : got)
      EXPECT_NEAR(count, kPicks / static_cast<double>(n), kPicks / 100.0) << n << " " << ordinal;
  }
}

TEST(PrefixLoadSimulation, TiedWarmEnginesSplitEvenlyWhereverTheySitInTheFleet) {
  // Adjacent (1,2) and spread (0,3) warm pairs among five engines, and a warm trio.
  for (std::set<size_t> warm :
       {std::set<size_t>{1, 2}, std::set<size_t>{0, 3}, std::set<size_t>{0, 1, 4}}) {
    std::vector<Engine> engines(5);
    for (size_t w : warm) engines[w].overlap = 6;
    auto p = prefix();
    auto got = shares(*p, chat(), engines);
    for (size_t i = 0; i < engines.size(); ++i) {
      if (warm.count(i)) {
        EXPECT_NEAR(got[i], kPicks / static_cast<double>(warm.size()), kPicks / 100.0) << i;
      } else {
        EXPECT_EQ(got[i], 0) << i;
      }
    }
  }
}

TEST(PrefixLoadSimulation, FencedEnginesGetNothingAndTheRestShareEvenly) {
  auto p = prefix();
  auto got = shares(*p, chat(), {{}, {.eligible = false}, {}, {.eligible = false}, {}});
  EXPECT_EQ(got[1], 0);
  EXPECT_EQ(got[3], 0);
  for (size_t i : {0u, 2u, 4u}) EXPECT_NEAR(got[i], kPicks / 3.0, kPicks / 100.0) << i;
}

// The lexicographic order the policy promises, stated independently of its implementation.
auto promised_key(const CandidateTerms& t, Profile wanted) {
  int rank = 0;
  if (wanted != Profile::kNone && t.profile != wanted) rank = t.profile == Profile::kNone ? 1 : 2;
  return std::make_tuple(t.eligible, t.score, t.overlap, -rank);
}

TEST(PrefixLoadSimulation, RandomFleetsAreAlwaysRankedByThePromisedOrder) {
  std::mt19937_64 rng(7);
  RouteConfig c;
  auto p = prefix(c);
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<Engine> engines(1 + rng() % 8);
    for (auto& e : engines) {
      e.overlap = rng() % 3 == 0 ? 0 : static_cast<uint32_t>(rng() % 48);
      e.load = static_cast<int64_t>(rng() % 12);
      e.eligible = rng() % 5 != 0;
      e.profile = static_cast<Profile>(rng() % 3);
    }
    std::optional<uint64_t> tokens;
    if (rng() % 4 != 0) tokens = rng() % 600;
    const auto req = chat(1 + rng() % 300000, tokens);
    const Profile wanted = preferred_profile(req, c);
    const Decision d = p->decide(req, fleet(engines));
    ASSERT_EQ(d.ranked.size(), engines.size());
    std::set<size_t> seen;
    for (size_t i = 0; i < d.ranked.size(); ++i) {
      const CandidateTerms& t = d.ranked[i];
      seen.insert(t.ordinal);
      const Engine& e = engines[t.ordinal];
      ASSERT_EQ(t.affinity, std::min(e.overlap, c.max_overlap_blocks));
      ASSERT_EQ(t.score, static_cast<double>(t.affinity) - c.alpha * static_cast<double>(e.load));
      ASSERT_EQ(t.request_load_units,
                request_load_units_with_overlap(req.body.size(), e.overlap, c));
      if (i > 0) {
        ASSERT_GE(promised_key(d.ranked[i - 1], wanted), promised_key(t, wanted)) << trial;
      }
    }
    ASSERT_EQ(seen.size(), engines.size());
    ASSERT_EQ(d.fail_open, !d.ranked[0].eligible);
  }
}

TEST(PrefixLoadSimulation, InRandomFleetsEnginesTiedForTheLeadShareItEvenly) {
  std::mt19937_64 rng(11);
  RouteConfig c;
  for (int fleet_no = 0; fleet_no < 100; ++fleet_no) {
    std::vector<Engine> engines(2 + rng() % 10);
    for (auto& e : engines) {  // coarse values so that ties at the top are common
      e.overlap = static_cast<uint32_t>(rng() % 3) * 8;
      e.load = static_cast<int64_t>(rng() % 3);
      e.eligible = rng() % 6 != 0;
      e.profile = static_cast<Profile>(rng() % 3);
    }
    const auto req = chat(4096, rng() % 2 ? std::optional<uint64_t>(100) : std::nullopt);
    const Profile wanted = preferred_profile(req, c);
    auto p = prefix(c);
    const Decision first = p->decide(req, fleet(engines));
    std::set<size_t> tied;
    for (const auto& t : first.ranked) {
      if (promised_key(t, wanted) == promised_key(first.ranked[0], wanted)) tied.insert(t.ordinal);
    }
    const int picks = 1000 * static_cast<int>(tied.size());
    auto got = shares(*p, req, engines, picks);
    for (auto& [ordinal, count] : got) {
      ASSERT_TRUE(tied.count(ordinal)) << fleet_no;
      EXPECT_NEAR(count, picks / static_cast<double>(tied.size()), picks / 100.0)
          << fleet_no << " " << ordinal;
    }
    EXPECT_EQ(got.size(), tied.size());
  }
}

// Closed loop: requests reserve their units on the winner and release them `window` decisions
// later; a completed request teaches its engine the app's prefix (as cache/index would).
struct LoopResult {
  std::map<size_t, int> per_engine;
  int warm_hits = 0;  // requests placed on an engine that already held their app's prefix
};

LoopResult closed_loop(int apps, size_t engines, size_t window, int requests,
                       uint32_t prefix_blocks, size_t body_bytes) {
  auto p = prefix();
  std::vector<std::set<int>> learned(engines);
  std::vector<int64_t> load(engines, 0);
  struct InFlight {
    size_t engine;
    uint32_t units;
    int app;
  };
  std::deque<InFlight> inflight;
  LoopResult out;
  for (int i = 0; i < requests; ++i) {
    const int app = i % apps;
    FleetSnapshot s;
    for (size_t e = 0; e < engines; ++e) {
      CandidateState c;
      c.ordinal = e;
      c.load_units = load[e];
      c.overlap = learned[e].count(app) ? prefix_blocks : 0;
      s.candidates.push_back(c);
    }
    const Decision d = p->decide(chat(body_bytes, 128), s);
    const CandidateTerms& w = d.ranked.front();
    load[w.ordinal] += w.request_load_units;
    inflight.push_back({w.ordinal, w.request_load_units, app});
    out.per_engine[w.ordinal]++;
    out.warm_hits += w.overlap > 0;
    if (inflight.size() > window) {
      const InFlight done = inflight.front();
      inflight.pop_front();
      load[done.engine] -= done.units;
      learned[done.engine].insert(done.app);
    }
  }
  return out;
}

TEST(PrefixLoadSimulation, FourAppsStayOnWarmEnginesAndShareTheFleetEvenly) {
  // 4 apps x 24 KiB shared prefix (12 blocks) on 4 engines, 8 requests in flight. The first
  // cold requests of one app may scatter, so an app can end up warm on several engines
  // (single-flight, elsewhere, prevents that); after them every request lands where its prefix
  // is cached, and the fleet stays balanced.
  const LoopResult r = closed_loop(4, 4, 8, 40000, 12, 26 * 1024);
  for (auto& [engine, count] : r.per_engine) EXPECT_NEAR(count, 10000, 400) << engine;
  EXPECT_GE(r.warm_hits, 40000 - 16);
}

TEST(PrefixLoadSimulation, OneHotAppSpreadsOverTheFleetInsteadOfPinningOneEngine) {
  // Same-app concurrency: one app, 32 requests in flight. Load must override affinity.
  const LoopResult r = closed_loop(1, 4, 32, 40000, 12, 26 * 1024);
  ASSERT_EQ(r.per_engine.size(), 4u);
  for (auto& [engine, count] : r.per_engine) EXPECT_NEAR(count, 10000, 1000) << engine;
}

// ---- several routers: a simultaneous burst ----

FleetSnapshot among(std::vector<Engine> engines, uint32_t routers, uint32_t place, uint32_t tie = 0) {
  FleetSnapshot s = fleet(engines);
  s.routers = routers;
  s.spread_place = place;
  s.spread_tie = tie;
  return s;
}

TEST(PrefixLoadSpread, OneRouterDecidesAsAlwaysWhateverThePlace) {
  auto p = prefix();
  const std::vector<Engine> idle(4);
  for (uint32_t place : {0u, 1u, 3u, 100u}) {
    Decision d = p->decide(RouteRequest::of(chat(), p->config()), among(idle, 1, place), 2);
    EXPECT_EQ(d.ranked.front().ordinal, 2u);  // the rotation's
    EXPECT_NE(d.outcome, Outcome::kSpread);
  }
}

TEST(PrefixLoadSpread, RoutersDecidingAtOnceTakeTheEnginesOneRouterWouldGiveTheBurst) {
  auto p = prefix();
  const RouteRequest req = RouteRequest::of(chat(100'000), p->config());  // 4 units: 16 score each
  // Four idle engines, three routers: places 0, 1, 2 are three different engines, whatever each
  // router's own rotation (equal engines go in the order every replica shares, turned by `tie`).
  std::set<size_t> taken;
  for (uint32_t place = 0; place < 3; ++place) {
    Decision d = p->decide(req, among(std::vector<Engine>(4), 3, place, 5), 7 * place + 1);
    taken.insert(d.ranked.front().ordinal);
    EXPECT_NE(d.outcome, Outcome::kSpread) << place;  // equal engines: a tie, not a move
    EXPECT_EQ(d.routers, 3u);
    EXPECT_EQ(d.spread_place, place);
    EXPECT_EQ(d.ranked.size(), 4u);  // the rest keep their order as fallbacks
  }
  EXPECT_EQ(taken, (std::set<size_t>{1, 2, 3}));  // turned by 5 % 4: engine 1 first
  // An engine already busier than the others by a request's load comes last, as one router's
  // fourth request would take it; the second and third places move off the best-scored engine.
  std::vector<Engine> busy(4);
  busy[1].foreign = 4;
  taken.clear();
  for (uint32_t place = 0; place < 3; ++place) {
    Decision d = p->decide(req, among(busy, 3, place), 0);
    taken.insert(d.ranked.front().ordinal);
  }
  EXPECT_EQ(taken, (std::set<size_t>{0, 2, 3}));
  busy[0].load = 1;  // now engine 0 scores below 2 and 3: place 2 takes it, a move
  Decision d = p->decide(req, among(busy, 3, 2), 0);
  EXPECT_EQ(d.ranked.front().ordinal, 0u);
  EXPECT_EQ(d.outcome, Outcome::kSpread);
}

TEST(PrefixLoadSpread, WhatTheCacheDecidedIsNotSpread) {
  auto p = prefix();
  const RouteRequest req = RouteRequest::of(chat(40'000), p->config());  // 2 units: 8 score each
  // 32 blocks cached on engine 2 outweigh three such requests' load (3 x 8 < 32).
  std::vector<Engine> engines(4);
  engines[2].overlap = 32;
  for (uint32_t place = 0; place < 3; ++place) {
    Decision d = p->decide(req, among(engines, 3, place), 0);
    EXPECT_EQ(d.ranked.front().ordinal, 2u) << place;
    EXPECT_EQ(d.outcome, Outcome::kOverlap);
  }
  // Even a small cached prefix (2 blocks, a quarter of one request's load): what the cache decided
  // is not spread (the burst's other requests have no reason to go there).
  engines[2].overlap = 2;
  for (uint32_t place = 0; place < 3; ++place) {
    EXPECT_EQ(p->decide(req, among(engines, 3, place), 0).ranked.front().ordinal, 2u);
  }
  // The cache engine loaded past its affinity: load decides, and the burst spreads over the rest.
  engines[2].load = 3;
  std::vector<size_t> taken;
  for (uint32_t place = 0; place < 3; ++place) {
    taken.push_back(p->decide(req, among(engines, 3, place), 0).ranked.front().ordinal);
  }
  EXPECT_EQ(taken, (std::vector<size_t>{0, 1, 3}));
}

TEST(PrefixLoadSpread, NeverPlacesOnAnIneligibleOrFailingEngine) {
  auto p = prefix();
  const RouteRequest req = RouteRequest::of(chat(), p->config());
  std::vector<Engine> engines(3);
  engines[1].eligible = false;
  FleetSnapshot s = among(engines, 8, 0);
  s.candidates[2].failing = true;
  for (uint32_t place : {0u, 1u, 2u, 7u, 255u, UINT32_MAX}) {  // past 255: counted as 255
    s.spread_place = place;
    EXPECT_EQ(p->decide(req, s, 0).ranked.front().ordinal, 0u) << place;
  }
  // Alpha 0 (load never matters): every place is the best-scored engine.
  RouteConfig c;
  c.alpha = 0;
  auto cache_only = prefix(c);
  std::vector<Engine> warm(3);
  warm[1].overlap = 3;
  for (uint32_t place = 0; place < 3; ++place) {
    EXPECT_EQ(cache_only->decide(req, among(warm, 3, place), 0).ranked.front().ordinal, 1u);
  }
}

// Three routers, four engines, bursts of nine requests (three per router, as a round-robin front
// hands them out), every router deciding on the same view: its own requests of the burst, none of
// the others'. What a burst costs is the requests that queue behind another one of it on the same
// engine: pairs on one engine, sum of n(n-1)/2. One router spreads nine over four as 3/2/2/2
// (6 pairs). Without places every router walks the engines in the same order, 3/3/3/0 (9 pairs).
// With them (replica k's j-th decision at place k + 2j, upstream::EngineLoadBoard::spread) the
// burst lands as one router would have placed it, whatever the engines' loads before it.
TEST(PrefixLoadSpread, ABurstOverThreeRoutersLandsAsOneRouterWouldPlaceIt) {
  auto p = prefix();
  std::mt19937 rng(7);
  auto burst = [&](bool spread, const std::vector<Engine>& before, size_t bytes) {
    std::vector<int64_t> placed(4, 0);  // the burst's requests per engine
    std::vector<std::vector<Engine>> view(3, before);
    const RouteRequest req = RouteRequest::of(chat(bytes), p->config());
    for (uint32_t j = 0; j < 3; ++j) {
      for (uint32_t k = 0; k < 3; ++k) {
        Decision d = p->decide(req, among(view[k], spread ? 3 : 1, k + j * 2, 9), 0);
        const size_t e = d.ranked.front().ordinal;
        view[k][e].load += d.ranked.front().request_load_units;  // its own reservation
        ++placed[e];
      }
    }
    // One router: the nine in a row, each seeing all before it.
    std::vector<Engine> one = before;
    std::vector<int64_t> alone(4, 0);
    for (int i = 0; i < 9; ++i) {
      Decision d = p->decide(req, fleet(one), 9);
      one[d.ranked.front().ordinal].load += d.ranked.front().request_load_units;
      ++alone[d.ranked.front().ordinal];
    }
    auto pairs = [](const std::vector<int64_t>& v) {
      int64_t n = 0;
      for (int64_t x : v) n += x * (x - 1) / 2;
      return n;
    };
    return std::pair{pairs(placed), pairs(alone)};
  };
  int64_t herd = 0, spread = 0, alone = 0;
  for (int i = 0; i < 500; ++i) {
    std::vector<Engine> before(4);
    for (Engine& e : before) e.load = static_cast<int64_t>(rng() % 6);
    const size_t bytes = 20'000 + rng() % 200'000;
    herd += burst(false, before, bytes).first;
    const auto [s, a] = burst(true, before, bytes);
    spread += s;
    alone += a;
  }
  // Within 1 %: one router breaks ties by its rotation, the replicas by the order they share.
  EXPECT_LE(spread, alone + alone / 100) << spread << " vs " << alone;
  EXPECT_GT(herd, alone + alone / 5) << herd << " vs " << alone;
}
}  // namespace
}  // namespace ramjet::route
