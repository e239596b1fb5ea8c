#include "request/route/prediction_check.h"

#include <gtest/gtest.h>

namespace ramjet::route {
namespace {

TEST(PredictionCheck, AgreementIsWithinTwoBlocksOfTheEnginesCachedTokens) {
  ManualClock clock;
  PredictionCheck c(2, PredictionCheckConfig{}, clock);
  EXPECT_EQ(c.record(0, 4096, 4080, 16, 0), PredictionResult::kAgree) << "a fully cached prompt recomputes a block";
  EXPECT_EQ(c.record(0, 4096, 4064, 16, 0), PredictionResult::kAgree);
  EXPECT_EQ(c.record(0, 4096, 4000, 16, 0), PredictionResult::kMiss);
  EXPECT_EQ(c.record(0, 0, 512, 16, 0), PredictionResult::kMiss) << "the engine held what the index did not know";
  EXPECT_EQ(c.record(0, 784 * 3, 784 * 2, 784, 0), PredictionResult::kAgree) << "tolerance is in the engine's blocks";
}

TEST(PredictionCheck, AnEngineThatNeverReportsIsUncheckedAndOneThatDidReportsZeroByOmission) {
  ManualClock clock;
  PredictionCheck c(2, PredictionCheckConfig{}, clock);
  EXPECT_EQ(c.record(0, 4096, std::nullopt, 16, 0), PredictionResult::kUnreported);
  EXPECT_EQ(c.record(1, 0, 32, 16, 0), PredictionResult::kAgree);
  // vLLM leaves cached_tokens out when it is 0.
  EXPECT_EQ(c.record(1, 4096, std::nullopt, 16, 0), PredictionResult::kMiss);
  EXPECT_EQ(c.record(1, 16, std::nullopt, 16, 0), PredictionResult::kAgree);
  // An API whose usage never carries the count (vLLM's Anthropic Messages): unreported, however
  // often, and the engine is never withdrawn for it.
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(c.record(1, 4096, std::nullopt, 16, 0, /*api_reports_cached=*/false), PredictionResult::kUnreported);
  EXPECT_FALSE(c.withdrawn(1));
}

TEST(PredictionCheck, MissesInARowWithdrawTheEngineForTheCooldownThenItIsOnProbation) {
  ManualClock clock;
  PredictionCheck c(2, PredictionCheckConfig{.miss_limit = 3, .cooldown_ms = 1000}, clock);
  c.record(0, 4096, 0, 16, 0);
  c.record(0, 4096, 0, 16, 0);
  c.record(0, 4096, 4096, 16, 0);  // an agreement resets the run
  c.record(0, 4096, 0, 16, 0);
  c.record(0, 4096, 0, 16, 0);
  EXPECT_FALSE(c.withdrawn(0));
  c.record(0, 4096, 0, 16, 0);
  EXPECT_TRUE(c.withdrawn(0));
  EXPECT_FALSE(c.withdrawn(1)) << "per engine";
  clock.advance_ms(999);
  EXPECT_TRUE(c.withdrawn(0));
  clock.advance_ms(1);
  EXPECT_FALSE(c.withdrawn(0));
  metrics::Exposition x;
  c.write_metrics(x);
  const std::string text = x.take();
  EXPECT_NE(text.find("ramjet_exact_withdrawals_total{upstream=\"0\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_exact_predictions_total{upstream=\"0\",result=\"miss\"} 5"), std::string::npos) << text;
}

// Late events (an under-prediction the index has since caught up with) are neither misses nor
// agreements: they never withdraw an engine, and they do not break a run of real misses.
TEST(PredictionCheck, LateEventsAreCountedApartAndNeverWithdraw) {
  ManualClock clock;
  PredictionCheck c(1, PredictionCheckConfig{.miss_limit = 3}, clock);
  EXPECT_EQ(c.tolerance_tokens(32), 64u);
  for (int i = 0; i < 10; ++i) c.record_late(0, 0);
  EXPECT_FALSE(c.withdrawn(0));
  c.record(0, 4096, 0, 16, 0);
  c.record(0, 4096, 0, 16, 0);
  c.record_late(0, 0);
  c.record(0, 4096, 0, 16, 0);
  EXPECT_TRUE(c.withdrawn(0));
  metrics::Exposition x;
  c.write_metrics(x);
  const std::string text = x.take();
  EXPECT_NE(text.find("ramjet_exact_predictions_total{upstream=\"0\",result=\"late\"} 11"), std::string::npos) << text;
}

TEST(PredictionCheck, ZeroMissLimitNeverWithdraws) {
  ManualClock clock;
  PredictionCheck c(1, PredictionCheckConfig{.miss_limit = 0}, clock);
  for (int i = 0; i < 100; ++i) c.record(0, 4096, 0, 16, 0);
  EXPECT_FALSE(c.withdrawn(0));
}

}  // namespace
}  // namespace ramjet::route
