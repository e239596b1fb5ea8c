#include "request/route/exact_overlap.h"

#include <gtest/gtest.h>

namespace ramjet::route {
namespace {

// What an engine's resident tokens are worth to the prefix score, by tier: each row is a lookup's
// answer (tokens the GPU serves, then what the connector would load from CPU, then from disk),
// the weights, and the weighted tokens (rounded down) and affinity units of a 1,000-token prompt
// of 62 fingerprint blocks.
TEST(TierWeights, EachTierIsCreditedWithItsWeight) {
  struct Row {
    cache::TierBlocks tokens;
    TierWeights weights;
    uint64_t weighted;
    uint32_t units;
  };
  const Row rows[] = {
      {{{800, 0, 0}}, {}, 800, 50},                      // GPU only: weights do not matter
      {{{800, 0, 0}}, {.cpu = 0, .disk = 0}, 800, 50},
      {{{0, 800, 0}}, {}, 640, 40},                      // the defaults: CPU 0.8 (llm-d, vLLM Router)
      {{{0, 0, 800}}, {}, 240, 15},                      // disk 0.3 (vLLM Router)
      {{{400, 320, 80}}, {}, 400 + 256 + 24, 43},
      {{{0, 800, 0}}, {.cpu = 0, .disk = 0.3}, 0, 0},    // weight 0: no affinity at all
      {{{0, 800, 0}}, {.cpu = 1, .disk = 1}, 800, 50},   // weight 1: as good as the GPU
      {{{16, 16, 16}}, {.cpu = 0.75, .disk = 0.25}, 16 + 12 + 4, 2},  // Dynamo's host / disk weights
      {{{0, 3, 0}}, {.cpu = 0.5, .disk = 0}, 1, 1},      // rounded down, then a hit of any size counts
  };
  for (const Row& r : rows) {
    const uint64_t w = r.weights.weigh(r.tokens);
    EXPECT_EQ(w, r.weighted) << r.tokens.by_tier[0] << "/" << r.tokens.by_tier[1] << "/" << r.tokens.by_tier[2];
    EXPECT_EQ(ExactOverlap::units(w, 1000, 62), r.units) << w;
  }
}

TEST(TierWeights, ACpuHolderOutranksAColdEngineOnlyWhileItsWeightIsAboveZero) {
  const cache::TierBlocks cpu_holder{{0, 960, 0}}, cold{};
  EXPECT_GT(ExactOverlap::units(TierWeights{}.weigh(cpu_holder), 1000, 62),
            ExactOverlap::units(TierWeights{}.weigh(cold), 1000, 62));
  EXPECT_EQ(ExactOverlap::units(TierWeights{.cpu = 0, .disk = 0}.weigh(cpu_holder), 1000, 62),
            ExactOverlap::units(TierWeights{.cpu = 0, .disk = 0}.weigh(cold), 1000, 62));
}

}  // namespace
}  // namespace ramjet::route
