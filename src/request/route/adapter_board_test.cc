// The adapter term: route/adapter_board (which adapters each engine has active) and the charge
// the prefix and load policies apply (policy.h adapter_charge).
#include "request/route/adapter_board.h"

#include <gtest/gtest.h>

#include <vector>

#include "request/route/policy.h"

namespace ramjet::route {
namespace {

TEST(AdapterBoard, ActiveFreeFullFromTheEnginesReading) {
  AdapterBoard b(3, 6000);
  b.record(0, 2, {"sql", "chat"}, 1000);
  b.record(1, 2, {"chat"}, 1000);
  b.record(2, 1, {"chat", "chat"}, 1000);  // (a name twice counts once)
  EXPECT_EQ(b.slot(0, "sql", 1000), AdapterSlot::kActive);
  EXPECT_EQ(b.slot(1, "sql", 1000), AdapterSlot::kFree);
  EXPECT_EQ(b.slot(2, "sql", 1000), AdapterSlot::kFull);
  EXPECT_EQ(b.slot(2, "chat", 1000), AdapterSlot::kActive);
  EXPECT_EQ(b.slot(0, "", 1000), AdapterSlot::kNone);  // the base model
  EXPECT_EQ(b.slot(7, "sql", 1000), AdapterSlot::kNone);  // no such slot
}

TEST(AdapterBoard, AStaleOrForgottenReadingSaysNothing) {
  AdapterBoard b(2, 6000);
  b.record(0, 1, {"chat"}, 1000);
  EXPECT_EQ(b.slot(0, "sql", 7000), AdapterSlot::kFull);
  EXPECT_EQ(b.slot(0, "sql", 7001), AdapterSlot::kNone);
  b.record(0, 1, {}, 7001);
  EXPECT_EQ(b.slot(0, "sql", 7001), AdapterSlot::kFree);
  b.forget(0);
  EXPECT_EQ(b.slot(0, "sql", 7001), AdapterSlot::kNone);
  EXPECT_EQ(b.slot(1, "sql", 7001), AdapterSlot::kNone);  // never reported
}

TEST(AdapterCharge, NothingWhereActiveOrUnknownUnitsForAFreeSlotTwiceWhenFull) {
  EXPECT_EQ(adapter_charge(AdapterSlot::kNone, 3), 0u);
  EXPECT_EQ(adapter_charge(AdapterSlot::kActive, 3), 0u);
  EXPECT_EQ(adapter_charge(AdapterSlot::kFree, 3), 3u);
  EXPECT_EQ(adapter_charge(AdapterSlot::kFull, 3), 6u);
  EXPECT_EQ(adapter_charge(AdapterSlot::kFull, 0), 0u);
  EXPECT_EQ(adapter_charge(AdapterSlot::kUnknown, 3), 3u);  // not assumed to hold it
  EXPECT_EQ(adapter_slot_label(AdapterSlot::kUnknown), "unknown");
}

FleetSnapshot fleet(const std::vector<std::pair<int64_t, AdapterSlot>>& engines, uint32_t overlap0 = 0) {
  FleetSnapshot s;
  for (size_t i = 0; i < engines.size(); ++i) {
    CandidateState c;
    c.ordinal = i;
    c.load_units = engines[i].first;
    c.adapter = engines[i].second;
    c.overlap = i == 0 ? overlap0 : 0;
    s.candidates.push_back(c);
  }
  return s;
}

RouteConfig config(uint32_t adapter_units) {
  RouteConfig c;
  c.adapter_load_units = adapter_units;
  return c;
}

TEST(AdapterTerm, PrefixPolicyPrefersTheEngineWithTheAdapterActiveUntilLoadOutweighsIt) {
  auto policy = make_policy("prefix", config(2));
  RouteRequest req;
  req.endpoint = request::Endpoint::kChat;
  // Engine 1 has the adapter active and one unit more load: the charge (2 units) outweighs it.
  Decision d = policy->decide(req, fleet({{0, AdapterSlot::kFree}, {1, AdapterSlot::kActive}}), 0);
  EXPECT_EQ(d.ranked.front().ordinal, 1u);
  EXPECT_EQ(d.outcome, Outcome::kAdapter);
  EXPECT_EQ(d.ranked.front().adapter, AdapterSlot::kActive);
  EXPECT_DOUBLE_EQ(d.ranked.back().score, -4.0 * 2);  // alpha 4 x (0 load + 2 charged)
  // Three units more: load wins, the adapter loads on the idle engine.
  d = policy->decide(req, fleet({{0, AdapterSlot::kFree}, {3, AdapterSlot::kActive}}), 0);
  EXPECT_EQ(d.ranked.front().ordinal, 0u);
  EXPECT_EQ(d.outcome, Outcome::kLoad);
  // A full engine is charged twice: a free slot wins over it at up to 2 units more load.
  d = policy->decide(req, fleet({{0, AdapterSlot::kFull}, {1, AdapterSlot::kFree}}), 0);
  EXPECT_EQ(d.ranked.front().ordinal, 1u);
  EXPECT_EQ(d.outcome, Outcome::kAdapter);
  // Equal standing everywhere: the term decides nothing.
  d = policy->decide(req, fleet({{0, AdapterSlot::kActive}, {0, AdapterSlot::kActive}}), 0);
  EXPECT_EQ(d.outcome, Outcome::kRoundRobin);
  // Equal load, and only the charge tells the engines apart: the engine with the adapter wins; the
  // prefix policy labels a tie the charge broke as the load's (several routers spread what load
  // decided), the load policy as the adapter's.
  d = policy->decide(req, fleet({{0, AdapterSlot::kFree}, {0, AdapterSlot::kActive}}), 0);
  EXPECT_EQ(d.ranked.front().ordinal, 1u);
  EXPECT_EQ(d.outcome, Outcome::kLoad);
  d = make_policy("load", config(2))->decide(req, fleet({{0, AdapterSlot::kFree}, {0, AdapterSlot::kActive}}), 0);
  EXPECT_EQ(d.ranked.front().ordinal, 1u);
  EXPECT_EQ(d.outcome, Outcome::kAdapter);
  // 0 units: adapter-blind.
  auto blind = make_policy("prefix", config(0));
  d = blind->decide(req, fleet({{0, AdapterSlot::kFree}, {1, AdapterSlot::kActive}}), 0);
  EXPECT_EQ(d.ranked.front().ordinal, 0u);
  EXPECT_EQ(d.outcome, Outcome::kLoad);
}

TEST(AdapterTerm, ACachedPrefixStillCountsWithTheCharge) {
  auto policy = make_policy("prefix", config(2));
  RouteRequest req;
  req.endpoint = request::Endpoint::kChat;
  // Engine 0 holds 12 blocks of the prompt but must load the adapter (2 units = 8 score):
  // 12 - 8 = 4 beats 0 on engine 1.
  Decision d = policy->decide(req, fleet({{0, AdapterSlot::kFree}, {0, AdapterSlot::kActive}}, 12), 0);
  EXPECT_EQ(d.ranked.front().ordinal, 0u);
  EXPECT_EQ(d.outcome, Outcome::kOverlap);
}

TEST(AdapterTerm, LoadPolicyRanksByLoadPlusTheCharge) {
  auto policy = make_policy("load", config(2));
  RouteRequest req;
  req.endpoint = request::Endpoint::kChat;
  Decision d = policy->decide(req, fleet({{0, AdapterSlot::kFull}, {1, AdapterSlot::kActive}, {1, AdapterSlot::kFree}}), 0);
  EXPECT_EQ(d.ranked.front().ordinal, 1u);
  EXPECT_EQ(d.outcome, Outcome::kAdapter);
  EXPECT_EQ(d.ranked[1].ordinal, 2u);  // 1 + 2
  EXPECT_EQ(d.ranked[2].ordinal, 0u);  // 0 + 4
}

}  // namespace
}  // namespace ramjet::route
