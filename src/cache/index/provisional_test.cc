#include "cache/index/provisional.h"

#include <gtest/gtest.h>

#include <vector>

namespace ramjet::cache {
namespace {

std::vector<uint64_t> keys(uint64_t first, size_t n) {
  std::vector<uint64_t> k(n);
  for (size_t i = 0; i < n; ++i) k[i] = first + i * 7919;
  return k;
}

TEST(ProvisionalBlocks, EnteredBlocksContinueAMatchUntilTheyLapse) {
  ProvisionalBlocks p(ProvisionalLimits{.max_keys = 1000, .ttl_ms = 100});
  const auto c = keys(1, 50);
  EXPECT_EQ(p.match(c, 0, 0), 0u);
  EXPECT_EQ(p.enter(c, 10, 0), 40u);  // blocks 0..9 are the engine's already
  EXPECT_EQ(p.match(c, 10, 50), 40u);
  EXPECT_EQ(p.match(c, 0, 50), 0u);   // not a prefix by itself: the exact index's part is missing
  EXPECT_EQ(p.match(c, 20, 50), 30u);
  EXPECT_EQ(p.match(c, 10, 99), 40u);
  EXPECT_EQ(p.match(c, 10, 100), 0u);  // lapsed
  // A longer prompt of the same prefix matches as far as the entered blocks go.
  auto longer = c;
  for (uint64_t x : keys(999999, 30)) longer.push_back(x);
  p.enter(c, 10, 200);
  EXPECT_EQ(p.match(longer, 10, 250), 40u);
  // Every length of run is found (the galloping search's edges).
  for (size_t n = 1; n < 50; ++n) {
    ProvisionalBlocks q(ProvisionalLimits{.max_keys = 1000, .ttl_ms = 100});
    q.enter(std::span(c).first(n), 0, 0);
    EXPECT_EQ(q.match(c, 0, 1), n) << n;
  }
}

TEST(ProvisionalBlocks, EnteringAgainExtendsTheDeadline) {
  ProvisionalBlocks p(ProvisionalLimits{.max_keys = 1000, .ttl_ms = 100});
  const auto c = keys(1, 20);
  p.enter(c, 0, 0);
  p.enter(c, 0, 80);
  EXPECT_EQ(p.match(c, 0, 150), 20u);
  EXPECT_EQ(p.match(c, 0, 180), 0u);
  p.enter(c, 0, 500);  // purges the lapsed records on the way
  EXPECT_EQ(p.size(), 20u);
}

TEST(ProvisionalBlocks, AFullTableDropsItsOldestEntries) {
  ProvisionalBlocks p(ProvisionalLimits{.max_keys = 64, .ttl_ms = 1000});
  const auto a = keys(1, 40), b = keys(100000, 40);
  p.enter(a, 0, 0);
  p.enter(b, 0, 1);
  EXPECT_LE(p.size(), 64u);
  EXPECT_EQ(p.match(b, 0, 2), 40u);  // the newest placement is whole
  EXPECT_EQ(p.match(a, 0, 2), 0u);   // the oldest lost its first blocks
  // A prompt longer than the table keeps its leading blocks.
  const auto big = keys(7, 200);
  EXPECT_EQ(p.enter(big, 0, 3), 64u);
  EXPECT_EQ(p.match(big, 0, 4), 64u);
}

TEST(ProvisionalBlocks, OffEntersNothing) {
  ProvisionalBlocks p(ProvisionalLimits{.max_keys = 64, .ttl_ms = 0});
  const auto c = keys(1, 10);
  EXPECT_EQ(p.enter(c, 0, 0), 0u);
  EXPECT_EQ(p.match(c, 0, 0), 0u);
}

}  // namespace
}  // namespace ramjet::cache
