#include "upstream/membership.h"

#include <gtest/gtest.h>

#include "common/clock.h"

namespace ramjet::upstream {
namespace {

Listed at(const std::string& host) { return Listed{config::UpstreamUrl{host, 8000, ""}}; }

struct Rig {
  ManualClock clock;
  net::Roster roster{{config::UpstreamUrl{"static", 8000, ""}}, 4};
  Fleet fleet{roster, clock, 30000};
  std::vector<size_t> joined, vacated;
  Membership m{roster, fleet, 2, {Listed{config::UpstreamUrl{"static", 8000, ""}}},
               Membership::Hooks{.joined = [this](size_t s, const Listed&) { joined.push_back(s); },
                                 .vacated = [this](size_t s) { vacated.push_back(s); }}};
};

TEST(Membership, NewEnginesJoinFencedInFreeSlots) {
  Rig r;
  r.m.update(1, {at("10.0.0.2"), at("10.0.0.3")});
  EXPECT_EQ(r.joined, (std::vector<size_t>{1, 2}));
  EXPECT_TRUE(r.roster.active(1));
  EXPECT_EQ(r.roster.member(1)->url.host, "10.0.0.2");
  EXPECT_FALSE(r.fleet.at(1).healthy());  // the readiness gate first
  EXPECT_TRUE(r.fleet.at(0).healthy());   // the static engine as ever
  r.m.update(1, {at("10.0.0.2"), at("10.0.0.3")});
  EXPECT_EQ(r.joined.size(), 2u);  // the same answer changes nothing
}

TEST(Membership, ALeavingEngineIsVacatedOnlyWhenItsRequestsAreDone) {
  Rig r;
  r.m.update(1, {at("10.0.0.2")});
  r.fleet.at(1).add_load(1, 1);  // a request in flight
  r.m.update(1, {});
  EXPECT_EQ(r.roster.state(1), net::SlotState::kLeaving);
  EXPECT_FALSE(r.fleet.at(1).member());
  r.m.sweep();
  EXPECT_TRUE(r.vacated.empty());
  r.fleet.at(1).add_load(-1, -1);
  r.m.sweep();
  EXPECT_EQ(r.vacated, (std::vector<size_t>{1}));
  EXPECT_EQ(r.roster.member(1), nullptr);
}

TEST(Membership, AnEngineBackBeforeItLeftStaysAndOneBackLaterGetsItsOrdinal) {
  Rig r;
  r.m.update(1, {at("10.0.0.2"), at("10.0.0.3")});
  r.fleet.at(1).add_load(1, 1);
  r.m.update(1, {at("10.0.0.3")});
  r.m.update(1, {at("10.0.0.2"), at("10.0.0.3")});  // back while still leaving
  EXPECT_TRUE(r.roster.active(1));
  EXPECT_EQ(r.joined.size(), 2u);
  r.fleet.at(1).add_load(-1, -1);
  r.m.update(1, {at("10.0.0.3")});
  r.m.sweep();
  r.m.update(1, {at("10.0.0.4"), at("10.0.0.3")});  // a new one: a never-used slot, not 1
  EXPECT_EQ(r.roster.member(3)->url.host, "10.0.0.4");
  r.m.update(1, {at("10.0.0.4"), at("10.0.0.3"), at("10.0.0.2")});  // .2 comes back: its old ordinal
  EXPECT_EQ(r.roster.member(1)->url.host, "10.0.0.2");
}

TEST(Membership, AStaticEngineRemovedByAReloadAndAddedAgainGetsItsOrdinal) {
  Rig r;
  r.m.update(0, {});
  r.m.sweep();
  EXPECT_EQ(r.vacated, (std::vector<size_t>{0}));
  r.m.update(1, {at("10.0.0.9")});  // a DNS engine meanwhile: a never-used slot
  EXPECT_EQ(r.roster.member(1)->url.host, "10.0.0.9");
  r.m.update(0, {Listed{config::UpstreamUrl{"static", 8000, ""}}});
  EXPECT_EQ(r.roster.member(0)->url.host, "static");
}

TEST(Membership, AReloadChangingAnEnginesProfileTellsTheOwner) {
  Rig r;
  std::vector<std::string> changed;
  Membership m{r.roster, r.fleet, 2, {Listed{config::UpstreamUrl{"static", 8000, ""}}},
               Membership::Hooks{.changed = [&](size_t, const Listed& l) { changed.push_back(l.profile); }}};
  Listed mtp{config::UpstreamUrl{"static", 8000, ""}};
  mtp.profile = "mtp";
  m.update(0, {mtp});
  m.update(0, {mtp});
  EXPECT_EQ(changed, (std::vector<std::string>{"mtp"}));
}

TEST(Membership, NoFreeOrdinalIsCountedNotForced) {
  Rig r;
  r.m.update(1, {at("a"), at("b"), at("c"), at("d")});
  EXPECT_EQ(r.m.rejected(), 1u);
  EXPECT_EQ(r.m.rejected_now(), 1u);
  EXPECT_EQ(r.roster.listed_count(), 4u);
}

// A DNS name answering more addresses than fit, lookup after lookup: the same rejections are not
// new ones (the counter and the log follow changes only); one that is no longer listed is gone,
// and a freed ordinal takes a rejected address when it is listed again.
TEST(Membership, TheSameRejectedAddressesLookupAfterLookupAreNotNewRejections) {
  Rig r;
  for (int lookup = 0; lookup < 100; ++lookup) r.m.update(1, {at("a"), at("b"), at("c"), at("d"), at("e")});
  EXPECT_EQ(r.m.rejected(), 2u);
  EXPECT_EQ(r.m.rejected_now(), 2u);
  r.m.update(1, {at("a"), at("b"), at("c"), at("d")});
  EXPECT_EQ(r.m.rejected_now(), 1u);
  EXPECT_EQ(r.m.rejected(), 2u);
  r.m.update(1, {at("a"), at("b"), at("d")});  // c leaves
  r.m.sweep();                                  // its ordinal is freed
  r.m.update(1, {at("a"), at("b"), at("d")});
  EXPECT_EQ(r.m.rejected_now(), 0u);
  EXPECT_EQ(r.m.rejected(), 2u);
}

TEST(Membership, AnEngineListedByTwoSourcesLeavesWhenNeitherListsIt) {
  Rig r;
  r.m.update(1, {at("static")});  // the DNS name also answers the static engine
  EXPECT_TRUE(r.joined.empty());
  r.m.update(0, {});  // a reload drops it from RJ_UPSTREAM: DNS still lists it
  EXPECT_TRUE(r.roster.active(0));
  r.m.update(1, {});
  EXPECT_EQ(r.roster.state(0), net::SlotState::kLeaving);
}

Listed ranked(const std::string& host, uint32_t ranks) {
  Listed l = at(host);
  l.dp_size = ranks;
  l.kv_live = "tcp://*:5557";
  return l;
}

TEST(Membership, AnEnginesKindComesWithItsRanksAndAReloadChangesItInPlace) {
  Rig r;
  Listed sgl = ranked("10.0.0.2", 2);
  sgl.engine = config::EngineKind::kSglang;
  r.m.update(1, {sgl});
  ASSERT_EQ(r.joined, (std::vector<size_t>{1, 2}));
  EXPECT_EQ(r.roster.member(0)->engine, config::EngineKind::kVllm);
  EXPECT_EQ(r.roster.member(1)->engine, config::EngineKind::kSglang);
  EXPECT_EQ(r.roster.member(2)->engine, config::EngineKind::kSglang);
  const uint64_t incarnation = r.roster.incarnation(2);
  sgl.engine = config::EngineKind::kVllm;  // the operator corrects RJ_UPSTREAM_ENGINE
  r.m.update(1, {sgl});
  EXPECT_EQ(r.joined.size(), 2u);  // the same engine and ranks: nothing joins or leaves
  EXPECT_EQ(r.roster.member(2)->engine, config::EngineKind::kVllm);
  EXPECT_EQ(r.roster.member(2)->dp_rank, std::optional<uint32_t>(1));
  EXPECT_EQ(r.roster.incarnation(2), incarnation);
}

TEST(Membership, AnEngineWithRanksTakesOneOrdinalPerRankWithItsOffsetKvPort) {
  Rig r;
  std::vector<Listed> seen;
  Membership m{r.roster, r.fleet, 2, {Listed{config::UpstreamUrl{"static", 8000, ""}}},
               Membership::Hooks{.joined = [&](size_t, const Listed& l) { seen.push_back(l); }}};
  m.update(1, {ranked("10.0.0.2", 3)});
  ASSERT_EQ(seen.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    const auto member = r.roster.member(1 + k);
    ASSERT_TRUE(member);
    EXPECT_EQ(member->url.host, "10.0.0.2");
    EXPECT_EQ(member->dp_rank, std::optional<uint32_t>(static_cast<uint32_t>(k)));
  }
  EXPECT_EQ(seen[0].kv_live, "tcp://*:5557");
  EXPECT_EQ(seen[2].kv_live, "tcp://*:5559");  // vLLM offsets each rank's port by its rank
  EXPECT_EQ(r.roster.siblings(2), (std::vector<size_t>{1, 3}));
  EXPECT_TRUE(r.roster.siblings(0).empty());  // a whole engine has no siblings
}

TEST(Membership, RanksJoinTogetherOrNotAtAll) {
  Rig r;  // 4 ordinals, the static engine in one
  r.m.update(1, {ranked("10.0.0.2", 4)});
  EXPECT_TRUE(r.joined.empty());  // 3 free ordinals for 4 ranks: none joins
  EXPECT_EQ(r.m.rejected_now(), 4u);
  r.m.update(1, {ranked("10.0.0.2", 3)});
  EXPECT_EQ(r.joined, (std::vector<size_t>{1, 2, 3}));
  EXPECT_EQ(r.m.rejected_now(), 0u);
}

TEST(Membership, RanksLeaveTogetherAndAReloadChangesTheirNumber) {
  Rig r;
  r.m.update(1, {ranked("10.0.0.2", 2)});
  EXPECT_EQ(r.joined, (std::vector<size_t>{1, 2}));
  r.m.update(1, {ranked("10.0.0.2", 3)});  // a third rank: the two stay, one joins
  EXPECT_EQ(r.joined, (std::vector<size_t>{1, 2, 3}));
  EXPECT_EQ(r.roster.member(3)->dp_rank, std::optional<uint32_t>(2));
  r.m.update(1, {ranked("10.0.0.2", 2)});  // back to two: rank 2 leaves
  EXPECT_EQ(r.roster.state(3), net::SlotState::kLeaving);
  EXPECT_TRUE(r.roster.active(1) && r.roster.active(2));
  r.m.update(1, {});  // the engine goes: every rank leaves
  EXPECT_EQ(r.roster.state(1), net::SlotState::kLeaving);
  EXPECT_EQ(r.roster.state(2), net::SlotState::kLeaving);
  r.m.sweep();
  EXPECT_EQ(r.vacated, (std::vector<size_t>{1, 2, 3}));
}

TEST(Membership, AnEngineDeclaredWithRanksIsADifferentTargetFromTheWholeEngine) {
  Rig r;
  r.m.update(1, {at("10.0.0.2")});
  EXPECT_EQ(r.joined, (std::vector<size_t>{1}));
  r.m.update(1, {ranked("10.0.0.2", 2)});  // now declared with ranks: the whole engine leaves
  EXPECT_EQ(r.roster.state(1), net::SlotState::kLeaving);
  EXPECT_EQ(r.joined, (std::vector<size_t>{1, 2, 3}));
  EXPECT_EQ(r.roster.member(2)->dp_rank, std::optional<uint32_t>(0));
}

TEST(Membership, AnEngineListedWithAutoRanksIsListedAgainWithTheRanksItReports) {
  ManualClock clock;
  Listed dp = at("static");
  dp.dp_auto = true;  // RJ_UPSTREAM_DP_SIZE=auto
  dp.kv_live = "tcp://*:5557";
  net::Roster roster{{config::UpstreamUrl{"static", 8000, ""}}, 8};
  Fleet fleet{roster, clock, 30000};
  std::vector<Listed> joined;
  std::vector<size_t> vacated;
  Membership m{roster, fleet, 2, {dp},
               Membership::Hooks{.joined = [&](size_t, const Listed& l) { joined.push_back(l); },
                                 .vacated = [&](size_t s) { vacated.push_back(s); }}};
  m.discovered_ranks(config::UpstreamUrl{"static", 8000, ""}, 1);  // one rank: as it is
  EXPECT_TRUE(joined.empty());
  m.discovered_ranks(config::UpstreamUrl{"static", 8000, ""}, 4);  // four: they join together
  ASSERT_EQ(joined.size(), 4u);
  EXPECT_EQ(roster.state(0), net::SlotState::kLeaving);  // the single target goes
  for (uint32_t k = 0; k < 4; ++k) {
    EXPECT_EQ(joined[k].dp_rank, std::optional<uint32_t>(k));
    EXPECT_EQ(joined[k].kv_live, "tcp://*:" + std::to_string(5557 + k));
  }
  m.discovered_ranks(config::UpstreamUrl{"static", 8000, ""}, 4);  // the same count: nothing
  EXPECT_EQ(joined.size(), 4u);
  m.sweep();
  EXPECT_EQ(vacated, (std::vector<size_t>{0}));
  m.discovered_ranks(config::UpstreamUrl{"static", 8000, ""}, 2);  // restarted with two: ranks 2, 3 leave
  size_t leaving = 0;
  for (size_t i = 0; i < roster.capacity(); ++i) leaving += roster.state(i) == net::SlotState::kLeaving;
  EXPECT_EQ(leaving, 2u);
  EXPECT_EQ(joined.size(), 4u);
  // A later listing of its source (a reload) keeps the reported count.
  m.update(0, {dp});
  EXPECT_EQ(joined.size(), 4u);
  // An address no source lists with auto is not changed by what it reports.
  m.update(1, {at("10.0.0.9")});
  const size_t before = joined.size();
  m.discovered_ranks(config::UpstreamUrl{"10.0.0.9", 8000, ""}, 3);
  EXPECT_EQ(joined.size(), before);
}

TEST(Membership, AutoRanksThatDoNotFitLeaveTheEngineAsItIsUntilTheyDo) {
  ManualClock clock;
  Listed dp = at("static");
  dp.dp_auto = true;
  net::Roster roster{{config::UpstreamUrl{"static", 8000, ""}}, 4};  // 3 free ordinals
  Fleet fleet{roster, clock, 30000};
  std::vector<size_t> joined;
  Membership m{roster, fleet, 1, {dp}, Membership::Hooks{.joined = [&](size_t s, const Listed&) { joined.push_back(s); }}};
  m.discovered_ranks(config::UpstreamUrl{"static", 8000, ""}, 4);  // 4 ranks, 3 free: nothing changes
  EXPECT_TRUE(joined.empty());
  EXPECT_TRUE(roster.active(0));  // the single target still serves
  m.discovered_ranks(config::UpstreamUrl{"static", 8000, ""}, 3);  // 3 fit
  EXPECT_EQ(joined, (std::vector<size_t>{1, 2, 3}));
  EXPECT_EQ(roster.state(0), net::SlotState::kLeaving);
}

TEST(Fleet, ARefusedConnectionFencesEveryRankOfTheEngine) {
  ManualClock clock;
  const config::UpstreamUrl a{"10.0.0.2", 8000, ""}, b{"10.0.0.3", 8000, ""};
  net::Roster roster{{a, a, b}, 3, {0u, 1u, std::nullopt}};
  Fleet fleet{roster, clock, 30000};
  ASSERT_TRUE(fleet.at(1).healthy() && fleet.at(2).healthy());
  fleet.fence(0, FenceReason::kConnect);
  EXPECT_EQ(fleet.at(1).state(), EngineState::kUnhealthy);  // rank 1 of the same engine
  EXPECT_TRUE(fleet.at(2).healthy());                        // another engine
  Fleet other{roster, clock, 30000};
  other.fence(1, FenceReason::kTimeout);  // a connect timeout may be one busy rank: not fanned out
  EXPECT_TRUE(other.at(0).healthy());
  clock.advance_ms(60000);  // (no recent success keeps it in service)
  other.on_probe_failure(1, ProbeFailure::kConnect);  // a refused probe of rank 1: rank 0 too
  EXPECT_EQ(other.at(0).state(), EngineState::kUnhealthy);
  EXPECT_TRUE(other.at(2).healthy());
}

TEST(Roster, VacantSlotsHaveNoSeriesInTheExposition) {
  metrics::Exposition x;
  x.set_upstream_filter([](size_t i) { return i != 1; });
  x.sample("m", "upstream=\"0\"", uint64_t{1});
  x.sample("m", "upstream=\"1\",reason=\"x\"", uint64_t{1});
  x.sample("m", "reason=\"y\",upstream=\"1\"", uint64_t{1});
  x.sample("m", "other_upstream=\"1\"", uint64_t{1});
  x.sample("m", "", uint64_t{1});
  EXPECT_EQ(x.take(), "m{upstream=\"0\"} 1\nm{other_upstream=\"1\"} 1\nm 1\n");
}

}  // namespace
}  // namespace ramjet::upstream
