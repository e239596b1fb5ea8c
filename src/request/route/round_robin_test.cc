#include <gtest/gtest.h>

#include <map>

#include "request/route/policy.h"

namespace ramjet::route {
namespace {

FleetSnapshot snap(std::vector<std::pair<bool, int64_t>> engines) {
  FleetSnapshot s;
  for (size_t i = 0; i < engines.size(); ++i) s.candidates.push_back(CandidateState{i, engines[i].first, engines[i].second, 0});
  return s;
}

TEST(RoundRobinPolicy, IgnoresLoadAndRotatesEvenly) {
  auto p = make_policy("round_robin", {});
  request::PreparedRequest req;
  std::map<size_t, int> picks;
  const int n = 30000;
  for (int i = 0; i < n; ++i) picks[p->decide(req, snap({{true, 100}, {true, 0}, {true, 7}})).ranked[0].ordinal]++;
  ASSERT_EQ(picks.size(), 3u);
  for (auto& [ordinal, count] : picks) EXPECT_NEAR(count, n / 3, n / 100) << ordinal;
}

TEST(RoundRobinPolicy, SkipsFencedEnginesAndFailsOpenWhenNoneIsHealthy) {
  auto p = make_policy("round_robin", {});
  request::PreparedRequest req;
  for (int i = 0; i < 10; ++i) EXPECT_EQ(p->decide(req, snap({{false, 0}, {true, 0}})).ranked[0].ordinal, 1u);
  auto d = p->decide(req, snap({{false, 0}, {false, 0}, {false, 0}}));
  EXPECT_TRUE(d.fail_open);
  EXPECT_EQ(d.dispatch_order().size(), 2u);
  EXPECT_EQ(d.outcome, Outcome::kRoundRobin);
}

TEST(RoundRobinSimulation, WithAFencedEngineTheOthersShareEvenlyWithinOnePercent) {
  // Rotation runs within the eligible group: the engine after the fenced one gets no extra turn.
  for (size_t fenced = 0; fenced < 4; ++fenced) {
    auto p = make_policy("round_robin", {});
    request::PreparedRequest req;
    std::vector<std::pair<bool, int64_t>> engines(4, {true, 0});
    engines[fenced].first = false;
    std::map<size_t, int> picks;
    const int n = 30000;
    for (int i = 0; i < n; ++i) picks[p->decide(req, snap(engines)).ranked[0].ordinal]++;
    EXPECT_EQ(picks.count(fenced), 0u);
    for (auto& [ordinal, count] : picks) EXPECT_NEAR(count, n / 3, n / 100) << "fenced " << fenced;
  }
}

}  // namespace
}  // namespace ramjet::route
