// sim/server/dp_balance: vLLM 0.32's data-parallel placement (DPLBAsyncMPClient +
// DPCoordinator) and its X-Data-Parallel-Rank header, restated case by case from
// v1/engine/core_client.py, v1/engine/coordinator.py and entrypoints/generate/base/serving.py.
#include "sim/server/dp_balance.h"

#include <gtest/gtest.h>

#include <map>

namespace ramjet::sim {
namespace {

std::vector<RankLoad> loads(std::initializer_list<RankLoad> l) { return l; }

TEST(DpRankHeader, ReadsWhatPythonsIntReads) {
  EXPECT_EQ(parse_dp_rank_header("2")->value, 2);
  EXPECT_EQ(parse_dp_rank_header(" 3 ")->value, 3);
  EXPECT_EQ(parse_dp_rank_header("+1")->value, 1);
  EXPECT_EQ(parse_dp_rank_header("007")->value, 7);
  EXPECT_EQ(parse_dp_rank_header("1_0")->value, 10);
  EXPECT_EQ(parse_dp_rank_header("-1")->value, -1);
  EXPECT_EQ(parse_dp_rank_header("-0")->text, "0");
  // Not an integer: vLLM ignores the header.
  for (const char* bad : {"", " ", "x", "1.0", "1e3", "0x1", "_1", "1_", "1__0", "- 1", "１"}) {
    EXPECT_FALSE(parse_dp_rank_header(bad).has_value()) << bad;
  }
}

TEST(DpRankHeader, OutOfRangeMessageIsVllmsAndKeepsHugeValuesWhole) {
  auto h = parse_dp_rank_header("7");
  EXPECT_EQ(dp_rank_out_of_range(*h, 4), "data_parallel_rank 7 is out of range [0, 4).");
  h = parse_dp_rank_header("-2");
  EXPECT_EQ(dp_rank_out_of_range(*h, 1), "data_parallel_rank -2 is out of range [0, 1).");
  h = parse_dp_rank_header("123456789012345678901234567890");
  EXPECT_FALSE(h->value.has_value());
  EXPECT_EQ(dp_rank_out_of_range(*h, 2), "data_parallel_rank 123456789012345678901234567890 is out of range [0, 2).");
}

TEST(DpClient, IdleRanksGoRoundRobinFromTheClientsOwnStart) {
  DpClient one(4, 1, 0);
  std::vector<size_t> got;
  // Each pick counts itself in flight, so the next lowest score is the next rank anyway.
  for (int i = 0; i < 8; ++i) got.push_back(one.pick());
  EXPECT_EQ(got, (std::vector<size_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  // The third of four API servers starts its scan at rank 4 * 2 / 4 = 2.
  DpClient third(4, 4, 2);
  EXPECT_EQ(third.pick(), 2u);
}

TEST(DpClient, PicksTheLeastWaitingPlusRunningFromTheSnapshot) {
  DpClient c(3, 1, 0);
  c.update(loads({{2, 3, 0.1}, {0, 1, 0.1}, {1, 1, 0.1}}));
  EXPECT_EQ(c.pick(), 1u);  // scores 5, 1, 2
  // Its local waiting count grew by one (client_count) and it is in flight there: 2 vs 2 → the
  // scan (now starting at rank 1) keeps the first of equal scores.
  EXPECT_EQ(c.loads()[1].waiting, 1);
  EXPECT_EQ(c.pick(), 1u);
  EXPECT_EQ(c.pick(), 2u);  // rank 1 scores 3 now, rank 2 still 2
}

TEST(DpClient, WaitingIsPenalisedOnlyAboveHalfKvUsage) {
  DpClient c(2, 1, 0);
  // Rank 0: 1 waiting + 1 running at 90 % KV = 2 + 1 * 6 * 0.4 = 4.4; rank 1: 4 running = 4.
  c.update(loads({{1, 1, 0.9}, {0, 4, 0.9}}));
  EXPECT_EQ(c.pick(), 1u);
  DpClient low(2, 1, 0);
  low.update(loads({{1, 1, 0.5}, {0, 4, 0.9}}));  // no penalty at 50 %: 2 < 4
  EXPECT_EQ(low.pick(), 0u);
}

TEST(DpClient, OwnInFlightTimesClientCountFloorsAStaleSnapshot) {
  DpClient c(2, 2, 0);  // two API servers
  c.update(loads({{0, 0, 0}, {0, 0, 0}}));
  c.pinned(0);
  c.pinned(0);  // two pinned requests on rank 0: its score is max(2 * 2, 0) = 4
  EXPECT_EQ(c.pick(), 1u);
  EXPECT_EQ(c.in_flight(1), 1u);
  c.finished(0);
  c.finished(0);
  c.finished(0);  // more finishes than in flight never go below zero
  EXPECT_EQ(c.in_flight(0), 0u);
}

TEST(DpClient, ANewSnapshotReplacesTheLocalWaitingIncrements) {
  DpClient c(2, 1, 0);
  EXPECT_EQ(c.pick(), 0u);
  EXPECT_EQ(c.loads()[0].waiting, 1);
  c.update(loads({{0, 0, 0}, {5, 0, 0}}));
  EXPECT_EQ(c.loads()[0].waiting, 0);
  EXPECT_EQ(c.pick(), 0u);  // 1 in flight vs 5 waiting
}

TEST(DpClient, SpreadsABurstBetweenSnapshotsEvenlyOverServersAndRanks) {
  // 4 API servers, 4 ranks, no snapshot between picks: 400 requests land 100 per rank.
  std::vector<DpClient> servers;
  for (size_t i = 0; i < 4; ++i) servers.emplace_back(4, 4, i);
  std::map<size_t, int> per_rank;
  for (int i = 0; i < 400; ++i) ++per_rank[servers[i % 4].pick()];
  for (size_t r = 0; r < 4; ++r) EXPECT_EQ(per_rank[r], 100) << r;
}

TEST(DpCoordinator, PublishesAtOnceAfterAQuietSpellThenAtMostEveryInterval) {
  DpCoordinator co(2, 0.1, 5.0);
  auto first = co.maybe_publish(0.0);  // the first poll publishes (zeros)
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(co.maybe_publish(1.0).has_value());  // nothing changed: next at 5 s
  EXPECT_TRUE(co.engine_counts(1, 2, 3, 0.25));
  auto snap = co.maybe_publish(1.0);  // changed, and the last publish is older than 100 ms
  ASSERT_TRUE(snap.has_value());
  EXPECT_EQ((*snap)[1].running, 2u);
  EXPECT_EQ((*snap)[1].waiting, 3);
  EXPECT_DOUBLE_EQ((*snap)[1].kv_cache_usage, 0.25);
  EXPECT_TRUE(co.engine_counts(0, 1, 0, 0.1));
  EXPECT_FALSE(co.maybe_publish(1.05).has_value());  // within 100 ms of the last
  EXPECT_DOUBLE_EQ(co.next_publish_s(), 1.1);
  EXPECT_TRUE(co.maybe_publish(1.1).has_value());
  EXPECT_FALSE(co.maybe_publish(5.0).has_value());
  EXPECT_TRUE(co.maybe_publish(6.2).has_value());  // unchanged: every 5 s all the same
}

TEST(DpCoordinator, AnEngineSendsOnlyChangedRunningAndWaiting) {
  DpCoordinator co(1);
  EXPECT_FALSE(co.engine_counts(0, 0, 0, 0.5));  // vLLM's last_counts starts at (0, 0)
  EXPECT_TRUE(co.engine_counts(0, 1, 0, 0.2));
  EXPECT_FALSE(co.engine_counts(0, 1, 0, 0.9));  // kv usage alone is not sent
  auto snap = co.maybe_publish(100);
  EXPECT_DOUBLE_EQ((*snap)[0].kv_cache_usage, 0.2);
}

}  // namespace
}  // namespace ramjet::sim
