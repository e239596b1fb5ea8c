#include "sim/engine/cpu_tier.h"

#include <gtest/gtest.h>

#include <variant>

namespace ramjet::sim {
namespace {

BlockHash h(uint64_t v) { return BlockHash::from_uint(v); }

TEST(CpuTier, StoresNewBlocksAndEvictsTheLeastRecentlyUsedToMakeRoom) {
  CpuTier tier(3);
  std::vector<KvEvent> ev;
  const BlockHash first[] = {h(1), h(2)};
  tier.store(first, ev);
  ASSERT_EQ(ev.size(), 1u);
  const auto& s = std::get<BlockStored>(ev[0]);
  EXPECT_EQ(s.block_hashes, (std::vector<BlockHash>{h(1), h(2)}));
  EXPECT_EQ(s.medium, "CPU");
  EXPECT_TRUE(s.token_ids.empty()) << "the connector's default store names hashes only";
  EXPECT_EQ(s.block_size, 0u);
  EXPECT_FALSE(s.parent_block_hash);
  ev.clear();
  const BlockHash second[] = {h(2), h(3), h(4)};  // 2 is held: touched, not stored again
  tier.store(second, ev);
  ASSERT_EQ(ev.size(), 2u);
  const auto& r = std::get<BlockRemoved>(ev[0]);
  EXPECT_EQ(r.block_hashes, std::vector<BlockHash>{h(1)}) << "1 was the least recently used";
  EXPECT_EQ(r.medium, "CPU");
  EXPECT_EQ(std::get<BlockStored>(ev[1]).block_hashes, (std::vector<BlockHash>{h(3), h(4)}));
  EXPECT_EQ(tier.size(), 3u);
  EXPECT_EQ(tier.check_invariants(), "");
}

TEST(CpuTier, ALookupIsTheLeadingRunAndTouchesIt) {
  CpuTier tier(3);
  std::vector<KvEvent> ev;
  const BlockHash all[] = {h(1), h(2), h(3)};
  tier.store(all, ev);
  const BlockHash ask[] = {h(1), h(2), h(9), h(3)};
  EXPECT_EQ(tier.lookup(ask), 2u);
  ev.clear();
  const BlockHash more[] = {h(4)};
  tier.store(more, ev);  // 3 is now the least recently used
  EXPECT_EQ(std::get<BlockRemoved>(ev[0]).block_hashes, std::vector<BlockHash>{h(3)});
  EXPECT_TRUE(tier.holds(h(1)) && tier.holds(h(2)) && tier.holds(h(4)));
}

TEST(CpuTier, AStoreLargerThanTheTierIsSkippedWhole) {
  CpuTier tier(2);
  std::vector<KvEvent> ev;
  const BlockHash three[] = {h(1), h(2), h(3)};
  tier.store(three, ev);
  EXPECT_TRUE(ev.empty());
  EXPECT_EQ(tier.size(), 0u);
}

}  // namespace
}  // namespace ramjet::sim
