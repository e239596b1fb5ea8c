#include "upstream/engine_load.h"

#include <gtest/gtest.h>

namespace ramjet::upstream {
namespace {

TEST(ForeignLoadUnits, AreWhatTheEngineReportsBeyondThisRoutersOwnInflight) {
  // 5 running, none waiting, 2 of them ours: 3 foreign decoders, one unit each.
  EXPECT_EQ(foreign_load_units(5, 0, 2, 2.0), 3);
  // Nothing beyond our own: no foreign load.
  EXPECT_EQ(foreign_load_units(2, 0, 2, 2.0), 0);
}

TEST(ForeignLoadUnits, AreNeverNegativeWhenThisRouterHasMoreInflightThanTheEngineReports) {
  // Requests dispatched but not yet seen by the engine (or ended there, still relayed here).
  EXPECT_EQ(foreign_load_units(1, 0, 4, 2.0), 0);
  EXPECT_EQ(foreign_load_units(0, 0, 0, 2.0), 0);
  EXPECT_EQ(foreign_load_units(-3, -1, 0, 2.0), 0);  // garbage from an engine reads as nothing
}

TEST(ForeignLoadUnits, WaitingRequestsWeighAsPrefillWork) {
  // 4 waiting, nothing ours: 4 x 2 units.
  EXPECT_EQ(foreign_load_units(0, 4, 0, 2.0), 8);
  // 2 running + 2 waiting, 2 ours: 2 foreign at the mix's mean weight (1 + 2) / 2 = 1.5 each.
  EXPECT_EQ(foreign_load_units(2, 2, 2, 2.0), 3);
  // A weight of 1 counts waiting like running.
  EXPECT_EQ(foreign_load_units(3, 3, 0, 1.0), 6);
}

TEST(EngineLoadBoard, ReadsTheLatestReadingPerEngine) {
  ManualClock clock;
  EngineLoadBoard board(clock, EngineLoadConfig{});
  EXPECT_EQ(board.foreign_units(0), 0);  // never read
  board.record(0, 6, 0, 1);
  board.record(1, 0, 0, 0);
  EXPECT_EQ(board.foreign_units(0), 5);
  EXPECT_EQ(board.foreign_units(1), 0);
  board.record(0, 2, 0, 1);
  EXPECT_EQ(board.foreign_units(0), 1);
}

TEST(EngineLoadBoard, ARequestOfOursThatEndsWhileTheScrapeIsUnderWayIsNotForeign) {
  ManualClock clock;
  EngineLoadBoard board(clock, EngineLoadConfig{});
  // One request of ours in flight when the scrape asks; the engine counts it; it has ended by
  // the time the answer is read: the engine's one request is ours, not another router's.
  board.fetching(0, 1);
  board.record(0, 1, 0, 0);
  EXPECT_EQ(board.foreign_units(0), 0);
  // The note is the one scrape's: the next reading without one counts as before.
  board.record(0, 1, 0, 0);
  EXPECT_EQ(board.foreign_units(0), 1);
  // One that starts meanwhile counts at record() (the larger of the two).
  board.fetching(0, 0);
  board.record(0, 3, 0, 1);
  EXPECT_EQ(board.foreign_units(0), 2);
  board.fetching(1, -4);  // (never below 0)
  board.record(1, 2, 0, 0);
  EXPECT_EQ(board.foreign_units(1), 2);
  // A scrape that failed (or a slot let go) leaves no note for a later reading.
  board.fetching(2, 3);
  board.forget(2);
  board.record(2, 3, 0, 0);
  EXPECT_EQ(board.foreign_units(2), 3);
}

TEST(EngineLoadBoard, KvUsageIsReadFreshAndOnlyWhenReported) {
  ManualClock clock;
  EngineLoadBoard board(clock, EngineLoadConfig{.stale_ms = 1500});
  EXPECT_FALSE(board.kv_usage(0, clock.now_ms()));  // never read
  board.record(0, 1, 0, 0, 0.75);
  ASSERT_TRUE(board.kv_usage(0, clock.now_ms()));
  EXPECT_DOUBLE_EQ(*board.kv_usage(0, clock.now_ms()), 0.75);
  board.record(1, 1, 0, 0);  // no kv_cache_usage_perc in its /metrics
  EXPECT_FALSE(board.kv_usage(1, clock.now_ms()));
  board.record(0, 1, 0, 0, 7.0);  // out of range: clamped
  EXPECT_DOUBLE_EQ(*board.kv_usage(0, clock.now_ms()), 1.0);
  clock.advance_ms(1501);
  EXPECT_FALSE(board.kv_usage(0, clock.now_ms()));  // stale
  board.record(0, 1, 0, 0, 0.5);
  board.forget(0);
  EXPECT_FALSE(board.kv_usage(0, clock.now_ms()));
}

TEST(EngineLoadBoard, AReadingOlderThanTheStaleWindowCountsForNothing) {
  ManualClock clock;
  EngineLoadBoard board(clock, EngineLoadConfig{.stale_ms = 1500});
  board.record(0, 10, 0, 0);
  clock.advance_ms(1500);
  EXPECT_EQ(board.foreign_units(0), 10);
  clock.advance_ms(1);
  EXPECT_EQ(board.foreign_units(0), 0);
  board.record(0, 4, 0, 0);  // a fresh reading counts again
  EXPECT_EQ(board.foreign_units(0), 4);
}

TEST(EngineLoadBoard, AFailedScrapeForgetsTheReadingAtOnce) {
  ManualClock clock;
  EngineLoadBoard board(clock, EngineLoadConfig{});
  board.record(2, 7, 0, 0);
  board.forget(2);
  EXPECT_EQ(board.foreign_units(2), 0);
  board.forget(9);  // never written: nothing to forget, nothing allocated
  EXPECT_EQ(board.foreign_units(9), 0);
}

TEST(EngineLoadBoard, OffReadsZeroEverywhere) {
  ManualClock clock;
  EngineLoadBoard board(clock, EngineLoadConfig{.enabled = false});
  board.record(0, 10, 10, 0);
  EXPECT_EQ(board.foreign_units(0), 0);
}

TEST(EngineLoadBoard, KeepsOrdinalsOfEnginesThatJoinLaterAndIgnoresOnesPastItsBound) {
  ManualClock clock;
  EngineLoadBoard board(clock, EngineLoadConfig{});
  board.record(EngineLoadBoard::kChunk * 3 + 5, 3, 0, 0);
  EXPECT_EQ(board.foreign_units(EngineLoadBoard::kChunk * 3 + 5), 3);
  EXPECT_EQ(board.foreign_units(EngineLoadBoard::kChunk * 3 + 6), 0);
  board.record(EngineLoadBoard::kMaxEngines, 3, 0, 0);
  EXPECT_EQ(board.foreign_units(EngineLoadBoard::kMaxEngines), 0);
}

}  // namespace
}  // namespace ramjet::upstream
