#include "sim/engine/timing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "sim/engine/calibration.h"

namespace ramjet::sim {
namespace {

TEST(TimingModel, StepDurationAddsEveryTermOfTheEquation) {
  TimingModel t;
  t.step_base = 1.0;
  t.per_seq = 0.1;
  t.per_kv_token = 0.001;
  t.per_prefill_token = 0.01;
  t.spec_overhead_per_draft = 0.2;
  t.spec_step_overhead_per_draft = 0.5;
  StepShape s{.seqs = 3, .context_tokens = 1000, .prefill_tokens = 10, .draft_tokens = 0, .max_drafts = 0};
  EXPECT_DOUBLE_EQ(step_duration(t, s), 1.0 + 0.3 + 1.0 + 0.1);
  s.draft_tokens = 4;
  s.max_drafts = 2;
  EXPECT_DOUBLE_EQ(step_duration(t, s), 1.0 + 0.3 + 1.0 + 0.1 + 0.8 + 1.0);
  EXPECT_DOUBLE_EQ(step_duration(t, StepShape{}), 0.0) << "an empty step takes no time";
}

TEST(TimingModel, AcceptanceDrawsFollowThePerPositionRates) {
  TimingModel t;
  t.speculative_tokens = 2;
  t.acceptance = {0.769, 0.458 / 0.769};
  Rng rng(42);
  constexpr int kDraws = 200000;
  int pos1 = 0, pos2 = 0;
  for (int i = 0; i < kDraws; ++i) {
    const uint32_t a = sample_accepted(t, 2, rng);
    pos1 += a >= 1;
    pos2 += a >= 2;
  }
  EXPECT_NEAR(static_cast<double>(pos1) / kDraws, 0.769, 0.005);
  EXPECT_NEAR(static_cast<double>(pos2) / kDraws, 0.458, 0.005);
  EXPECT_NEAR(expected_tokens_per_step(t), 1 + 0.769 + 0.458, 1e-9);
}

TEST(Presets, EveryNamedPresetResolvesAndUnknownNamesDoNot) {
  for (const std::string& name : preset_names()) {
    auto cfg = preset(name);
    ASSERT_TRUE(cfg.has_value()) << name;
    EXPECT_EQ(cfg->preset, name);
    EXPECT_EQ(cfg->timing.acceptance.size(), cfg->timing.speculative_tokens) << name;
    EXPECT_LE(cfg->max_model_len, (cfg->num_gpu_blocks - 1) * cfg->block_size) << name;
  }
  EXPECT_FALSE(preset("qwen").has_value());
}

double box(const std::string& name, uint32_t c, uint32_t out) {
  ClosedLoopSpec spec;
  spec.concurrency = c;
  spec.output_tokens = out;
  spec.warmup_requests_per_client = 1;
  spec.measured_requests_per_client = c >= 64 ? 2 : 4;
  return run_closed_loop(*preset(name), spec).output_tok_s;
}

constexpr const char* kStd = "qwen3.8-27b-tp4";
constexpr const char* kMtp = "qwen3.8-27b-tp4-mtp";
constexpr const char* kMtp3 = "qwen3.8-27b-tp4-mtp3";

TEST(PresetShape, QwenSingleStreamIsAbout77AndAbout121WithMtp) {
  EXPECT_NEAR(box(kStd, 1, 256), 77, 7.7);
  EXPECT_NEAR(box(kMtp, 1, 256), 121, 12.1);
}

TEST(PresetShape, MtpAdvantageShrinksWithConcurrencyAndTurnsNegativeAtC256) {
  const double c32 = box(kMtp, 32, 256) / box(kStd, 32, 256);
  const double c128 = box(kMtp, 128, 256) / box(kStd, 128, 256);
  const double c256 = box(kMtp, 256, 256) / box(kStd, 256, 256);
  EXPECT_GT(c32, 1.15);
  EXPECT_GT(c32, c128);
  EXPECT_GT(c128, c256);
  EXPECT_LT(c256, 0.95);
  EXPECT_NEAR(box(kStd, 256, 256), 7890.9, 789.1);
}

TEST(PresetShape, Mtp3WinsShortOutputsAtLowConcurrencyAndStandardWinsLongOutputsAtC32) {
  EXPECT_GT(box(kMtp3, 1, 256), 1.5 * box(kStd, 1, 256));
  EXPECT_GT(box(kMtp3, 8, 256), 1.2 * box(kStd, 8, 256));
  EXPECT_GT(box(kMtp3, 16, 256), 1.1 * box(kStd, 16, 256));
  const double std512 = box(kStd, 32, 512);
  const double mtp3_512 = box(kMtp3, 32, 512);
  EXPECT_GT(std512, mtp3_512);
  EXPECT_LT(std512, 1.10 * mtp3_512) << "by a few percent, not a landslide";
}

TEST(PresetShape, DeepSeekIsFastForOneStreamAndSaturatesAroundC24) {
  EXPECT_NEAR(box("deepseek-v4-flash-tp4", 1, 256), 245, 24.5);
  const double c24 = box("deepseek-v4-flash-tp4", 24, 256);
  EXPECT_NEAR(c24, 1891, 189);
  EXPECT_LT(box("deepseek-v4-flash-tp4", 48, 256), 1.25 * c24);
}

}  // namespace
}  // namespace ramjet::sim
