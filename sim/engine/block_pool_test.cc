#include "sim/engine/block_pool.h"

#include <gtest/gtest.h>

#include <array>
#include <variant>
#include <vector>

namespace ramjet::sim {
namespace {

BlockHash digest(uint8_t seed) {
  std::array<uint8_t, 32> d{};
  d.fill(seed);
  return BlockHash::from_bytes(d);
}

std::vector<uint32_t> tokens(size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>(i);
  return t;
}

TEST(BlockPool, FreshPoolKeepsTheNullBlockOutOfTheFreeQueue) {
  BlockPool pool(8, 4, true);
  EXPECT_EQ(pool.usable_blocks(), 7u);
  EXPECT_EQ(pool.num_free(), 7u);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPool, AllocationTakesNeverUsedBlocksBeforeFreedCachedOnes) {
  BlockPool pool(8, 4, true);
  std::vector<KvEvent> ev;
  std::vector<uint32_t> a;
  pool.get_new_blocks(2, a, ev);
  EXPECT_EQ(a, (std::vector<uint32_t>{1, 2}));
  const std::vector<BlockHash> hashes = {digest(1), digest(2)};
  pool.cache_full_blocks(a, hashes, 0, 2, tokens(8), ev);
  pool.free_reversed(a);
  ev.clear();
  std::vector<uint32_t> b;
  pool.get_new_blocks(5, b, ev);
  EXPECT_EQ(b, (std::vector<uint32_t>{3, 4, 5, 6, 7}));
  EXPECT_TRUE(ev.empty()) << "no cached block had to be evicted";
  EXPECT_EQ(pool.num_cached(), 2u);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPool, UncachedFreedBlocksAreReusedFirstSoAllocationEvictsLess) {
  // vLLM 0.32 free_blocks: blocks without a hash are prepended (LIFO), cached ones appended.
  BlockPool pool(6, 4, true);  // 5 usable
  std::vector<KvEvent> ev;
  std::vector<uint32_t> a;
  pool.get_new_blocks(5, a, ev);  // 1..5
  const std::vector<BlockHash> hashes = {digest(1), digest(2), digest(3)};
  pool.cache_full_blocks(a, hashes, 0, 3, tokens(20), ev);  // 1..3 full and cached, 4 and 5 not
  pool.free_reversed(a);
  ev.clear();
  std::vector<uint32_t> b;
  pool.get_new_blocks(3, b, ev);
  // Free queue: 5, 4 (reversed, at the head), then 3, 2, 1 (reversed, at the tail).
  EXPECT_EQ(b, (std::vector<uint32_t>{5, 4, 3}));
  ASSERT_EQ(ev.size(), 1u) << "only the third block evicts a cached one";
  EXPECT_EQ(std::get<BlockRemoved>(ev[0]).block_hashes[0], digest(3));
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPool, WithoutCachingEveryFreedBlockIsReusedFirst) {
  BlockPool pool(5, 4, false);  // 4 usable
  std::vector<KvEvent> ev;
  std::vector<uint32_t> a, b;
  pool.get_new_blocks(2, a, ev);  // 1, 2
  pool.free_reversed(a);
  pool.get_new_blocks(4, b, ev);
  EXPECT_EQ(b, (std::vector<uint32_t>{2, 1, 3, 4}));
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPool, FreeingInReverseOrderMakesTailBlocksTheFirstEvicted) {
  BlockPool pool(4, 4, true);  // 3 usable
  std::vector<KvEvent> ev;
  std::vector<uint32_t> a;
  pool.get_new_blocks(3, a, ev);
  const std::vector<BlockHash> hashes = {digest(1), digest(2), digest(3)};
  pool.cache_full_blocks(a, hashes, 0, 3, tokens(12), ev);
  pool.free_reversed(a);
  ev.clear();
  std::vector<uint32_t> b;
  pool.get_new_blocks(1, b, ev);
  EXPECT_EQ(b, (std::vector<uint32_t>{3}));
  ASSERT_EQ(ev.size(), 1u);
  const auto* removed = std::get_if<BlockRemoved>(&ev[0]);
  ASSERT_NE(removed, nullptr);
  EXPECT_EQ(removed->block_hashes, (std::vector<BlockHash>{digest(3)}));
  EXPECT_EQ(pool.cached_block(digest(1)), 1);
  EXPECT_EQ(pool.cached_block(digest(3)), -1);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPool, CachingEmitsOneBlockStoredWithParentAndExactlyThoseTokens) {
  BlockPool pool(8, 4, true);
  std::vector<KvEvent> ev;
  std::vector<uint32_t> a;
  pool.get_new_blocks(3, a, ev);
  const std::vector<BlockHash> hashes = {digest(1), digest(2), digest(3)};
  const auto t = tokens(12);
  pool.cache_full_blocks(a, hashes, 0, 1, t, ev);
  pool.cache_full_blocks(a, hashes, 1, 3, t, ev);
  ASSERT_EQ(ev.size(), 2u);
  const auto& first = std::get<BlockStored>(ev[0]);
  EXPECT_FALSE(first.parent_block_hash.has_value());
  EXPECT_EQ(first.token_ids, (std::vector<uint32_t>{0, 1, 2, 3}));
  const auto& second = std::get<BlockStored>(ev[1]);
  EXPECT_EQ(second.parent_block_hash, digest(1));
  EXPECT_EQ(second.block_hashes, (std::vector<BlockHash>{digest(2), digest(3)}));
  EXPECT_EQ(second.token_ids.size(), 8u);
  EXPECT_EQ(second.token_ids.front(), 4u);
  EXPECT_EQ(second.block_size, 4u);
}

TEST(BlockPool, DuplicateContentIsCachedAsASecondCopyAndEachCopyIsRemovedSeparately) {
  BlockPool pool(4, 4, true);  // 3 usable
  std::vector<KvEvent> ev;
  std::vector<uint32_t> a, b;
  pool.get_new_blocks(1, a, ev);
  pool.get_new_blocks(1, b, ev);
  const std::vector<BlockHash> h = {digest(9)};
  pool.cache_full_blocks(a, h, 0, 1, tokens(4), ev);
  pool.cache_full_blocks(b, h, 0, 1, tokens(4), ev);
  EXPECT_EQ(ev.size(), 2u) << "vLLM does not de-duplicate: two BlockStored for one hash";
  EXPECT_EQ(pool.num_cached(), 2u);
  EXPECT_EQ(pool.cached_block(digest(9)), a[0]) << "lookups return the oldest copy";
  pool.free_reversed(a);
  pool.free_reversed(b);
  ev.clear();
  std::vector<uint32_t> c;
  pool.get_new_blocks(2, c, ev);  // block 3 (never used), then block a[0]
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(pool.cached_block(digest(9)), b[0]) << "the other copy stays cached";
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPool, TouchTakesAFreeCachedBlockOffTheFreeQueue) {
  BlockPool pool(4, 4, true);
  std::vector<KvEvent> ev;
  std::vector<uint32_t> a;
  pool.get_new_blocks(1, a, ev);
  pool.cache_full_blocks(a, std::vector<BlockHash>{digest(5)}, 0, 1, tokens(4), ev);
  pool.free_reversed(a);
  EXPECT_TRUE(pool.is_free(a[0]));
  pool.touch(a);
  EXPECT_FALSE(pool.is_free(a[0]));
  EXPECT_EQ(pool.ref_count(a[0]), 1u);
  pool.touch(a);
  EXPECT_EQ(pool.ref_count(a[0]), 2u);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPool, ResetRefusesWhileBlocksAreReferencedAndClearsOtherwise) {
  BlockPool pool(4, 4, true);
  std::vector<KvEvent> ev;
  std::vector<uint32_t> a;
  pool.get_new_blocks(1, a, ev);
  pool.cache_full_blocks(a, std::vector<BlockHash>{digest(5)}, 0, 1, tokens(4), ev);
  ev.clear();
  EXPECT_FALSE(pool.reset_prefix_cache(ev));
  EXPECT_TRUE(ev.empty());
  pool.free_reversed(a);
  EXPECT_TRUE(pool.reset_prefix_cache(ev));
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(ev[0]));
  EXPECT_EQ(pool.num_cached(), 0u);
  EXPECT_EQ(pool.cached_block(digest(5)), -1);
  EXPECT_EQ(pool.check_invariants(), "");
}

}  // namespace
}  // namespace ramjet::sim
