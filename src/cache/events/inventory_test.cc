#include "cache/events/inventory.h"

#include <gtest/gtest.h>

#include <numeric>

namespace ramjet::cache::events {
namespace {

using kv::BlockHash;
using kv::BlockRemoved;
using kv::BlockStored;
using kv::EventBatch;

constexpr uint32_t kBs = 16;

std::vector<uint32_t> prompt(size_t tokens, uint32_t start = 100) {
  std::vector<uint32_t> t(tokens);
  std::iota(t.begin(), t.end(), start);
  return t;
}

std::vector<BlockHash> hashes(uint64_t from, uint64_t to) {
  std::vector<BlockHash> h;
  for (uint64_t i = from; i < to; ++i) h.push_back(BlockHash::from_uint(0xf000000000000000ull + i));
  return h;
}

// A BlockStored as vLLM >= 0.26 sends it for blocks [from, to) of `t`.
BlockStored stored(const std::vector<uint32_t>& t, uint64_t from, uint64_t to, uint64_t hash_base = 0) {
  BlockStored e;
  e.block_hashes = hashes(hash_base + from, hash_base + to);
  if (from > 0) e.parent_block_hash = BlockHash::from_uint(0xf000000000000000ull + hash_base + from - 1);
  e.token_ids.assign(t.begin() + static_cast<long>(from * kBs), t.begin() + static_cast<long>(to * kBs));
  e.block_size = kBs;
  e.medium = "GPU";
  e.group_idx = 0;
  e.kv_cache_spec_kind = "full_attention";
  return e;
}

EventBatch batch(std::vector<kv::Event> events, uint32_t rank = 0) {
  EventBatch b;
  b.ts = 1.0;
  b.events = std::move(events);
  b.data_parallel_rank = rank;
  return b;
}

std::optional<uint32_t> resident(const Inventory& inv, const std::vector<uint32_t>& t, std::string_view model = {},
                                 std::string_view salt = {}) {
  const Inventory* one[] = {&inv};
  std::optional<uint32_t> out[1];
  lookup(one, ExactRequest{t, model, salt}, out);
  return out[0];
}

// One extra_keys entry: a MessagePack array of short strings.
std::string extra_key(std::initializer_list<std::string_view> parts) {
  std::string s(1, static_cast<char>(0x90 | parts.size()));
  for (auto p : parts) {
    s.push_back(static_cast<char>(0xa0 | p.size()));
    s.append(p);
  }
  return s;
}

TEST(Inventory, StoredBlocksAnswerForTheRequestsWholeBlocks) {
  Inventory inv;
  const auto t = prompt(5 * kBs + 7);
  EXPECT_EQ(resident(inv, t), 0u) << "nothing stored yet";
  ASSERT_FALSE(inv.apply(batch({stored(t, 0, 3)})));
  EXPECT_EQ(inv.block_size(), kBs);
  EXPECT_EQ(resident(inv, t), 3 * kBs);
  ASSERT_FALSE(inv.apply(batch({stored(t, 3, 5)})));
  EXPECT_EQ(resident(inv, t), 5 * kBs);
  BlockRemoved r;
  r.block_hashes = hashes(4, 5);
  r.medium = "GPU";
  r.group_idx = 0;
  ApplyCounts c;
  ASSERT_FALSE(inv.apply(batch({r}), &c));
  EXPECT_EQ(c.removed, 1u);
  EXPECT_EQ(resident(inv, t), 4 * kBs);
  ASSERT_FALSE(inv.apply(batch({kv::AllBlocksCleared{}})));
  EXPECT_EQ(resident(inv, t), 0u);
}

TEST(Inventory, ARankInventorySkipsAndCountsAnotherRanksBatches) {
  Inventory inv;
  inv.set_rank(2);
  const auto t = prompt(4 * kBs);
  ASSERT_FALSE(inv.apply(batch({stored(t, 0, 3)}, 1)));  // rank 1's blocks are not in rank 2's cache
  EXPECT_EQ(resident(inv, t), 0u);
  EXPECT_EQ(inv.skipped(Skip::kOtherRank), 3u);
  ASSERT_FALSE(inv.apply(batch({stored(t, 0, 3)}, 2)));
  EXPECT_EQ(resident(inv, t), 3 * kBs);
  inv.set_rank(std::nullopt);  // a whole engine takes any rank's batches
  ASSERT_FALSE(inv.apply(batch({stored(t, 3, 4)}, 0)));
  EXPECT_EQ(inv.skipped(Skip::kOtherRank), 3u);
}

TEST(Inventory, DuplicatePhysicalCopiesAreCountedPerCopy) {
  Inventory inv;
  const auto t = prompt(2 * kBs);
  ASSERT_FALSE(inv.apply(batch({stored(t, 0, 2), stored(t, 0, 2)})));
  BlockRemoved r;
  r.block_hashes = hashes(1, 2);
  ASSERT_FALSE(inv.apply(batch({r})));
  EXPECT_EQ(resident(inv, t), 2 * kBs) << "the other copy of block 1 is still cached";
  ASSERT_FALSE(inv.apply(batch({r})));
  EXPECT_EQ(resident(inv, t), kBs);
}

TEST(Inventory, OnlyLocalGpuMainAttentionBlocksCount) {
  Inventory inv;
  const auto t = prompt(2 * kBs);
  auto cpu = stored(t, 0, 2);
  cpu.medium = "CPU";
  auto remote = stored(t, 0, 2);
  remote.locality = "REMOTE";
  auto swa = stored(t, 0, 2);
  swa.group_idx = 1;
  swa.kv_cache_spec_kind = "sliding_window";
  auto weird = stored(t, 0, 2);
  weird.group_idx = 2;
  weird.kv_cache_spec_kind = "quantum_attention";
  auto unknown_group = stored(t, 0, 2);
  unknown_group.group_idx = 3;
  unknown_group.kv_cache_spec_kind.reset();
  ASSERT_FALSE(inv.apply(batch({cpu, remote, swa, weird, unknown_group})));
  EXPECT_EQ(resident(inv, t), 0u);
  EXPECT_EQ(inv.block_size(), 0u) << "nothing was stored";
  EXPECT_EQ(inv.skipped(Skip::kUnsupportedMedium), 2u);
  EXPECT_EQ(inv.skipped(Skip::kNonLocal), 2u);
  EXPECT_EQ(inv.skipped(Skip::kNonMainAttention), 2u);
  EXPECT_EQ(inv.skipped(Skip::kUnknownKind), 2u);
  EXPECT_EQ(inv.skipped(Skip::kUnknownGroup), 2u);
  // A removal from the sliding-window group is that group's business.
  BlockRemoved r;
  r.block_hashes = hashes(0, 1);
  r.group_idx = 1;
  ASSERT_FALSE(inv.apply(batch({r})));
  EXPECT_EQ(inv.skipped(Skip::kNonMainAttention), 3u);
}

TEST(Inventory, AHybridModelIsIndexedOnItsFullAttentionGroupAtItsBlockSize) {
  // Qwen3.8's hybrid layout: one full-attention group with 784-token blocks beside a mamba group.
  Inventory inv;
  const uint32_t bs = 784;
  const auto t = prompt(3 * bs + 100);
  BlockStored full;
  full.block_hashes = hashes(0, 3);
  full.token_ids.assign(t.begin(), t.begin() + 3 * bs);
  full.block_size = bs;
  full.group_idx = 0;
  full.kv_cache_spec_kind = "full_attention";
  BlockStored mamba = full;
  mamba.group_idx = 1;
  mamba.kv_cache_spec_kind = "mamba";
  mamba.block_hashes = hashes(100, 103);
  ASSERT_FALSE(inv.apply(batch({mamba, full})));
  EXPECT_EQ(inv.block_size(), bs);
  EXPECT_EQ(resident(inv, t), 3 * bs);
  EXPECT_EQ(inv.skipped(Skip::kNonMainAttention), 3u);
}

TEST(Inventory, LoraAndCacheSaltBlocksMatchOnlyRequestsOfTheirNamespace) {
  Inventory inv;
  const auto t = prompt(2 * kBs);
  auto lora = stored(t, 0, 2, 100);
  lora.lora_name = "sql-adapter";
  lora.lora_id = 1;
  lora.extra_keys = kv::ExtraKeys{extra_key({"sql-adapter"}), extra_key({"sql-adapter"})};
  auto salted = stored(t, 0, 2, 200);
  salted.extra_keys = kv::ExtraKeys{extra_key({"tenant-7"}), std::nullopt};
  ASSERT_FALSE(inv.apply(batch({lora, salted})));
  EXPECT_EQ(resident(inv, t), 0u) << "the base model's namespace is empty";
  EXPECT_EQ(resident(inv, t, "sql-adapter"), 2 * kBs);
  EXPECT_EQ(resident(inv, t, "other-model"), 0u);
  EXPECT_EQ(resident(inv, t, {}, "tenant-7"), 2 * kBs);
  EXPECT_EQ(resident(inv, t, {}, "tenant-8"), 0u);
  // Both at once: the adapter's name, then the salt.
  auto both = stored(t, 0, 1, 300);
  both.lora_name = "sql-adapter";
  both.extra_keys = kv::ExtraKeys{extra_key({"sql-adapter", "tenant-7"})};
  ASSERT_FALSE(inv.apply(batch({both})));
  EXPECT_EQ(resident(inv, t, "sql-adapter", "tenant-7"), kBs);
}

TEST(Inventory, MultimodalAndUnnamedAdapterBlocksAreSkipped) {
  Inventory inv;
  const auto t = prompt(2 * kBs);
  auto mm = stored(t, 0, 1);
  mm.extra_keys = kv::ExtraKeys{std::string("\x91\x92\xa3img\x00", 7)};  // [("img", 0)]
  auto unnamed = stored(t, 0, 1, 50);
  unnamed.lora_id = 3;
  ASSERT_FALSE(inv.apply(batch({mm, unnamed})));
  EXPECT_EQ(inv.skipped(Skip::kExtraKeys), 2u);
  // Its child cannot be placed either.
  ASSERT_FALSE(inv.apply(batch({stored(t, 1, 2)})));
  EXPECT_EQ(inv.skipped(Skip::kOrphanedParent), 1u);
  EXPECT_EQ(resident(inv, t).value_or(0), 0u);
}

TEST(Inventory, ABlockSizeOtherThanTheFirstIsSkipped) {
  Inventory inv;
  const auto t = prompt(4 * kBs);
  ASSERT_FALSE(inv.apply(batch({stored(t, 0, 1)})));
  BlockStored big;
  big.block_hashes = hashes(50, 51);
  big.token_ids.assign(t.begin(), t.begin() + 2 * kBs);
  big.block_size = 2 * kBs;
  ASSERT_FALSE(inv.apply(batch({big})));
  EXPECT_EQ(inv.skipped(Skip::kBlockSizeMismatch), 1u);
  auto bad = stored(t, 1, 3);
  bad.token_ids.pop_back();
  ASSERT_FALSE(inv.apply(batch({bad})));
  EXPECT_EQ(inv.skipped(Skip::kShape), 2u);
}

TEST(Inventory, RanksKeepTheirOwnRemovalKeys) {
  Inventory inv;
  const auto t = prompt(kBs);
  ASSERT_FALSE(inv.apply(batch({stored(t, 0, 1)}, 0)));
  ASSERT_FALSE(inv.apply(batch({stored(t, 0, 1)}, 1)));  // same hash on DP rank 1
  BlockRemoved r;
  r.block_hashes = hashes(0, 1);
  ASSERT_FALSE(inv.apply(batch({r}, 0)));
  EXPECT_EQ(resident(inv, t), kBs) << "rank 1 still holds it";
  ASSERT_FALSE(inv.apply(batch({r}, 1)));
  EXPECT_EQ(resident(inv, t), 0u);
}

TEST(Inventory, AConflictingStoreIsAnErrorForTheCaller) {
  Inventory inv;
  const auto t = prompt(2 * kBs);
  ASSERT_FALSE(inv.apply(batch({stored(t, 0, 2)})));
  const auto other = prompt(2 * kBs, 9000);
  EXPECT_EQ(inv.apply(batch({stored(other, 0, 2)})), ExactStoreErrc::kConflict);
}

// ------------------------------------------------------------------------------ offload tiers

// vLLM's OffloadingConnector store without self-describing events (offloading/events.py
// _placeholder_stored): the hashes only, no parent, no tokens, block_size 0, medium CPU.
BlockStored placeholder(uint64_t from, uint64_t to, std::string medium = "CPU", uint32_t block_size = 0) {
  BlockStored e;
  e.block_hashes = hashes(from, to);
  e.block_size = block_size;
  e.medium = std::move(medium);
  e.group_idx = 0;
  return e;
}

BlockRemoved removed(uint64_t from, uint64_t to, std::optional<std::string> medium) {
  BlockRemoved r;
  r.block_hashes = hashes(from, to);
  r.medium = std::move(medium);
  r.group_idx = 0;
  return r;
}

std::optional<TierBlocks> tiered(const Inventory& inv, const std::vector<uint32_t>& t) {
  const Inventory* one[] = {&inv};
  std::optional<TierBlocks> out[1];
  RequestChains chains(ExactRequest{t, {}, {}});
  lookup_tiers(one, chains, out);
  return out[0];
}

TEST(InventoryTiers, AHashOnlyCpuStoreChainsToTheGpuBlockOfTheSameHash) {
  Inventory inv({.shard = {}, .tiers = true});
  const auto t = prompt(4 * kBs + 3);
  ApplyCounts counts;
  ASSERT_FALSE(inv.apply(batch({stored(t, 0, 4)}), &counts));
  ASSERT_FALSE(inv.apply(batch({placeholder(0, 4)}), &counts));  // the connector stored all four
  EXPECT_EQ(counts.stored_by_tier, (std::array<uint64_t, kTiers>{4, 4, 0}));
  EXPECT_EQ(tiered(inv, t), (TierBlocks{{4 * kBs, 0, 0}}));
  // The GPU evicts blocks 2..3: the CPU copies carry the run on.
  ASSERT_FALSE(inv.apply(batch({removed(2, 4, "GPU")}), &counts));
  EXPECT_EQ(tiered(inv, t), (TierBlocks{{2 * kBs, 2 * kBs, 0}}));
  EXPECT_EQ(resident(inv, t), 4 * kBs) << "the plain lookup counts every tier";
  // A CPU removal drops the CPU copy only.
  ASSERT_FALSE(inv.apply(batch({removed(3, 4, "CPU")}), &counts));
  EXPECT_EQ(tiered(inv, t), (TierBlocks{{2 * kBs, kBs, 0}}));
  EXPECT_EQ(counts.removed_by_tier, (std::array<uint64_t, kTiers>{2, 1, 0}));
  // AllBlocksCleared resets the GPU prefix cache; the connector's copies stay.
  ASSERT_FALSE(inv.apply(batch({kv::AllBlocksCleared{}})));
  EXPECT_EQ(tiered(inv, t), (TierBlocks{{0, 3 * kBs, 0}}));
  EXPECT_EQ(inv.skipped(Skip::kUnknownBlock) + inv.skipped(Skip::kUnsupportedMedium), 0u);
}

TEST(InventoryTiers, StorageMediaAreTheDiskTierAndUnknownOnesAreSkipped) {
  Inventory inv({.shard = {}, .tiers = true});
  const auto t = prompt(3 * kBs);
  ASSERT_FALSE(inv.apply(batch({stored(t, 0, 3), placeholder(0, 1, "STORAGE"), placeholder(1, 2, "FS"),
                                placeholder(2, 3, "OBJ"), placeholder(0, 3, "TAPE")})));
  ASSERT_FALSE(inv.apply(batch({removed(0, 3, "GPU")})));
  EXPECT_EQ(tiered(inv, t), (TierBlocks{{0, 0, 3 * kBs}}));
  EXPECT_EQ(inv.skipped(Skip::kUnsupportedMedium), 3u);
  EXPECT_EQ(inv.shard().resident_blocks(Tier::kDisk), 3u);
}

TEST(InventoryTiers, HashOnlyStoresOfUnknownBlocksOrOfMultiBlockChunksAreSkipped) {
  Inventory inv({.shard = {}, .tiers = true});
  const auto t = prompt(2 * kBs);
  ASSERT_FALSE(inv.apply(batch({placeholder(0, 2)})));  // before any GPU store: nothing to chain to
  EXPECT_EQ(inv.skipped(Skip::kUnknownBlock), 2u);
  ASSERT_FALSE(inv.apply(batch({stored(t, 0, 2)})));
  ASSERT_FALSE(inv.apply(batch({placeholder(1, 2, "CPU", 2 * kBs)})));  // a chunk of two GPU blocks
  EXPECT_EQ(inv.skipped(Skip::kBlockSizeMismatch), 1u);
  ASSERT_FALSE(inv.apply(batch({placeholder(1, 2, "CPU", kBs)})));  // older vLLM: the block size
  ASSERT_FALSE(inv.apply(batch({removed(1, 2, "GPU")})));
  EXPECT_EQ(tiered(inv, t), (TierBlocks{{kBs, kBs, 0}}));
  // A CPU removal of a block the tier never reported is counted, not applied.
  ASSERT_FALSE(inv.apply(batch({removed(0, 1, "CPU")})));
  EXPECT_EQ(inv.skipped(Skip::kUnknownRemoval), 1u);
}

TEST(InventoryTiers, ASelfDescribingCpuStoreIsAppliedLikeAGpuStoreInItsTier) {
  Inventory inv({.shard = {}, .tiers = true});
  const auto t = prompt(4 * kBs);
  ASSERT_FALSE(inv.apply(batch({stored(t, 0, 2)})));
  auto cpu = stored(t, 1, 4);  // tokens, parent and the GPU block size: as vLLM's events tracker sends
  cpu.medium = "CPU";
  ASSERT_FALSE(inv.apply(batch({cpu, removed(1, 2, "GPU")})));
  EXPECT_EQ(tiered(inv, t), (TierBlocks{{kBs, 3 * kBs, 0}}));
}

TEST(InventoryTiers, WithTiersOffOffloadEventsAreSkippedAsBefore) {
  Inventory inv;
  const auto t = prompt(2 * kBs);
  ASSERT_FALSE(inv.apply(batch({stored(t, 0, 2), placeholder(0, 2), removed(0, 1, "CPU")})));
  EXPECT_EQ(inv.skipped(Skip::kUnsupportedMedium), 3u);
  EXPECT_EQ(tiered(inv, t), (TierBlocks{{2 * kBs, 0, 0}}));
}

}  // namespace
}  // namespace ramjet::cache::events
