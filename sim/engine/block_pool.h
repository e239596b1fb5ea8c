// sim/engine block pool: vLLM v1's BlockPool (vllm/v1/core/block_pool.py), shared by every KV
// cache group of the engine (one full-attention group, plus a mamba group for a hybrid layout).
// Owns the physical blocks, their reference counts, the free queue (eviction order) and the
// prefix-cache map (hash, group) -> blocks, and produces the KV events those operations cause.
// Which blocks a request holds, and when they become full, is the scheduler's business.
//
// Choices copied from vLLM (mainline, ≈v0.10+):
// - block 0 is the "null block": never allocated, never freed; usable blocks = num_blocks - 1;
// - the free queue starts in block-id order; allocation pops from the head; a freed block that
//   carries a cached hash goes to the tail (LRU), one without (a partial or never-cached block,
//   which no lookup can hit) to the head (vLLM 0.32 `free_blocks`: LIFO reuse), so a new
//   allocation reuses those before it evicts anything; a popped block that is cached is evicted
//   (one BlockRemoved per block, `_maybe_evict_cached_block`);
// - no de-duplication: when a block with an already cached hash becomes full it is inserted as
//   a second copy (`BlockHashToBlockMap` holds several blocks per hash; lookups return the
//   oldest copy) and it gets its own BlockStored; evicting either copy emits a BlockRemoved;
// - a block list may hold the null block (id 0) where a group keeps nothing (mamba's skipped
//   states): caching skips it (no hash, no extra-keys entry; token_ids still cover the range),
//   touching and freeing ignore it;
// - reset_prefix_cache() refuses while any block is referenced.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <boost/container/small_vector.hpp>
#include <boost/unordered/unordered_flat_map.hpp>

#include "sim/engine/kv_sink.h"
#include "sim/engine/prefix_hash.h"

namespace ramjet::sim {

struct DigestHash {
  using is_avalanching = void;  // SHA-256 output is already uniformly distributed
  size_t operator()(const BlockHash& d) const noexcept {
    size_t v = 0;
    for (size_t i = 0; i < sizeof(size_t); ++i) v = (v << 8) | d.bytes()[i];
    return v;
  }
};

// Cache key: vLLM's BlockHashWithGroupId (the hash qualified by its KV cache group).
struct GroupHash {
  BlockHash hash;
  uint32_t group = 0;
  friend bool operator==(const GroupHash&, const GroupHash&) = default;
};
struct GroupHashHash {
  using is_avalanching = void;
  size_t operator()(const GroupHash& k) const noexcept { return DigestHash{}(k.hash) ^ (size_t{k.group} * 0x9e3779b97f4a7c15ull); }
};

// What a BlockStored says besides the blocks: the group (its id and kv_cache_spec_kind) and the
// request's namespace (lora_id, lora_name, extra_keys).
struct StoreInfo {
  uint32_t group = 0;
  const char* kind = "full_attention";
  const CacheNamespace* ns = nullptr;  // null: no LoRA, no extra keys
};

class BlockPool {
 public:
  BlockPool(uint32_t num_blocks, uint32_t block_size, bool enable_caching);

  uint32_t num_blocks() const { return static_cast<uint32_t>(blocks_.size()); }
  uint32_t usable_blocks() const { return num_blocks() - 1; }  // minus the null block
  uint32_t block_size() const { return block_size_; }
  uint32_t num_free() const { return num_free_; }
  uint32_t num_cached() const { return num_cached_; }  // blocks that carry a cached hash
  bool caching() const { return caching_; }
  // kv_cache_usage as vLLM reports it: 1 - free / usable.
  double usage() const;

  // The oldest cached copy of `hash` in `group`, or -1.
  int64_t cached_block(const BlockHash& hash, uint32_t group = 0) const;
  uint32_t copies(const BlockHash& hash, uint32_t group = 0) const;  // cached copies of `hash`

  uint32_t ref_count(uint32_t block) const { return blocks_[block].ref; }
  bool is_free(uint32_t block) const { return blocks_[block].in_free; }

  // Pops n blocks from the free queue (the caller checked num_free()), evicting cached ones,
  // and appends them, referenced once, to `out`.
  void get_new_blocks(uint32_t n, std::vector<uint32_t>& out, std::vector<KvEvent>& events);

  // A prefix hit: +1 reference; a free (evictable) block leaves the free queue.
  void touch(std::span<const uint32_t> blocks);

  // Frees a request's blocks in reverse order (tail blocks become eviction candidates first),
  // as KVCacheManager.free does. Blocks reaching zero references go to the free-queue tail when
  // cached, to its head (in that reverse order) when not.
  void free_reversed(std::span<const uint32_t> blocks);

  // Caches blocks[num_cached, num_full) under hashes[num_cached, num_full) in info.group and
  // appends ONE BlockStored: the hashes of the non-null blocks, parent = hashes[num_cached-1]
  // (nullopt at block 0; the logical parent even when that block is null), token_ids =
  // tokens[num_cached*block_size, num_full*block_size), extra_keys one entry per reported block
  // (None when the list is empty), lora_id/lora_name of the namespace, group_idx and kind.
  void cache_full_blocks(std::span<const uint32_t> blocks, std::span<const BlockHash> hashes,
                         uint32_t num_cached, uint32_t num_full, std::span<const uint32_t> tokens,
                         const StoreInfo& info, std::vector<KvEvent>& events);
  void cache_full_blocks(std::span<const uint32_t> blocks, std::span<const BlockHash> hashes,
                         uint32_t num_cached, uint32_t num_full, std::span<const uint32_t> tokens,
                         std::vector<KvEvent>& events) {
    cache_full_blocks(blocks, hashes, num_cached, num_full, tokens, StoreInfo{}, events);
  }

  // Drops every cached hash and appends AllBlocksCleared; false (and nothing changes) while
  // any block is referenced.
  bool reset_prefix_cache(std::vector<KvEvent>& events);

  // Checks every structural invariant (free list <-> ref counts, map <-> block hashes, counts).
  // Returns "" when consistent, else a description. O(num_blocks); for tests.
  std::string check_invariants() const;

 private:
  struct Block {
    uint32_t ref = 0;
    int32_t prev = -1, next = -1;  // free-queue links (sentinel = num_blocks)
    bool in_free = false;
    bool cached = false;
    uint32_t group = 0;  // the group of the cached hash
    BlockHash hash{};
  };
  using Copies = boost::container::small_vector<uint32_t, 2>;

  void push_back_free(uint32_t b);
  void push_front_free(uint32_t b);
  void unlink_free(uint32_t b);
  void maybe_evict(uint32_t b, std::vector<KvEvent>& events);

  uint32_t block_size_;
  bool caching_;
  std::vector<Block> blocks_;
  Block sentinel_;
  uint32_t num_free_ = 0;
  uint32_t num_cached_ = 0;
  boost::unordered_flat_map<GroupHash, Copies, GroupHashHash> cached_;
  std::vector<uint32_t> evict_first_;  // free_reversed's scratch
};

}  // namespace ramjet::sim
