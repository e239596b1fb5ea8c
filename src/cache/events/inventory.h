// cache/events/inventory: one engine's exact inventory. It applies decoded KV-event batches
// (cache/kv) to the engine's ExactShard (cache/index): which events describe the GPU prefix cache a
// request can hit (medium, locality, attention kind of the block's group), which namespace a block
// lives in (LoRA adapter, cache_salt), and the removal key of each vLLM block hash (per data
// parallel rank and group, so copies in two groups or ranks count apart). Events that say nothing
// about that cache are skipped and counted by reason. Whether the inventory may be trusted (the
// sequence fence) is the subscriber's; what an overlap is worth is route's.
//
// A digest inventory (constructed with a DigestKey) applies the same batches with every rule
// above unchanged, but stores each block's keyed digest (cache/index/block_digest) in place of its
// token IDs: its shard's chain keys run over digests, so it holds no token IDs, and lookups digest
// the request's blocks first. The companion keeps one; ramjet imports its snapshot into one.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <cstdint>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/index/block_digest.h"
#include "cache/index/exact_index.h"
#include "cache/kv/event.h"

namespace ramjet::cache::events {

// Offload tiers (InventoryLimits::tiers): vLLM's OffloadingConnector publishes the blocks it keeps
// in CPU memory (medium "CPU") and in secondary tiers ("STORAGE" on vLLM main, "FS"/"OBJ" in
// 0.26) through the same event stream (Scheduler: connector.take_events()). Each is a tier of the
// shard (exact_index.h): a BlockRemoved of medium CPU drops the CPU copy only. Two shapes of store:
//  - self-describing (kv_connector_extra_config self_describing_kv_events; vLLM's
//    offloading/events.py OffloadingEventsTracker): block hashes, parent, token ids and the GPU
//    block size, as a GPU store: applied the same way, in its tier;
//  - the placeholder (the default): the hash of each offloaded block, no parent, token_ids [] and
//    block_size 0 (offloading/events.py _placeholder_stored; older OffloadingConnectorScheduler.
//    take_events sent the offloaded block size instead of 0). The hash is the GPU block's (the
//    offloaded block is one GPU block unless the CPU spec's block_size is a multiple of it; then
//    it names the chunk by its last GPU block's hash): such a store is attached to the block the
//    GPU store of that hash made (ExactShard::attach). A chunk of several GPU blocks is skipped as
//    block_size_mismatch; a hash the shard does not know as kUnknownBlock.
// Medium "GPU" or none is the GPU prefix cache; an unknown medium is skipped.
//
// Why an event (or its blocks) was not applied (label of ramjet_kv_events_skipped_total{reason}).
enum class Skip : uint8_t {
  kUnsupportedMedium,  // a medium this build does not know, or any offload tier with tiers off
  kNonLocal,           // locality REMOTE
  kNonMainAttention,   // a sliding-window, mamba, chunked-local, encoder or cross-attention group
  kUnknownKind,        // a kv_cache_spec_kind this build does not know
  kUnknownGroup,       // a non-zero group whose kind was never reported
  kExtraKeys,          // multimodal items, prompt embeds or extra keys of unknown shape
  kBlockSizeMismatch,  // a main-group block size other than the one learned first
  kShape,              // token_ids != block_size * block_hashes, or block_size 0
  kOrphanedParent,     // the parent block was never applied (skipped, or missed before a join)
  kUnknownRemoval,     // a removed hash that was never applied
  kOtherRank,          // a batch of another data-parallel rank than the one this inventory follows
  kUnknownBlock,       // an offload tier's hash-only store of a block the shard does not hold
  kCount_,
};
std::string_view label(Skip s);

// vLLM's kv_cache_spec_kind strings that make a prefix hit: full attention and its variants.
bool is_main_attention(std::string_view kind);

struct InventoryLimits {
  ExactShardLimits shard;
  // Apply offload tiers' events (above); false: skip them (kUnsupportedMedium), as a companion's
  // inventory does (its snapshot carries GPU copies only).
  bool tiers = false;
};

// The tier a KV event's medium names; nullopt for a medium this build does not know.
std::optional<Tier> tier_of(const std::optional<std::string>& medium);

// Adapter names one inventory learns (a store naming another one is skipped as extra_keys); a
// snapshot carries at most this many (companion/snapshot).
inline constexpr size_t kMaxLoras = 4096;

// An inventory's state as a snapshot carries it (companion/snapshot): what apply() learned (the
// main block size, each group's kind, the adapter names) and the shard's blocks.
struct InventoryGroup {
  uint32_t dp_rank = 0;
  uint32_t group = 0;
  bool main = false;  // a main attention group (else one whose events are skipped)
};
struct InventoryState {
  uint32_t block_size = 0;
  std::vector<InventoryGroup> groups;
  std::vector<std::string> loras;
  std::vector<ExactBlockRecord> blocks;
  std::vector<ExactRemovalRecord> removals;
};

struct ApplyCounts {
  uint64_t stored = 0;   // blocks
  uint64_t removed = 0;  // block copies
  uint64_t cleared = 0;  // AllBlocksCleared events
  std::array<uint64_t, kTiers> stored_by_tier{};   // the same, by tier
  std::array<uint64_t, kTiers> removed_by_tier{};
};

class Inventory {
 public:
  // `digest`: a digest inventory keyed by it (see above); null: raw token blocks.
  explicit Inventory(InventoryLimits limits = {}, std::shared_ptr<const DigestKey> digest = nullptr);

  // ---- writer (the engine's subscriber thread) ----
  // Applies one batch's events in order. An error means the index no longer mirrors the engine
  // (a conflicting path, or capacity): the caller fences and clears.
  // With a rank set (the engine slot is one data-parallel rank), a batch tagged with another rank
  // is skipped whole (Skip::kOtherRank): that rank's blocks are not in this slot's cache. Each
  // rank's publisher sends only its own batches, so this counts a misconfiguration, not traffic.
  std::optional<ExactStoreErrc> apply(const kv::EventBatch& batch, ApplyCounts* counts = nullptr);
  // The data-parallel rank this inventory follows (nullopt: any). Any thread.
  void set_rank(std::optional<uint32_t> rank) { rank_.store(rank ? int64_t{*rank} : -1, std::memory_order_relaxed); }
  void clear();
  // The whole state, for a snapshot (writer thread).
  void export_state(InventoryState& out) const;
  // Replaces the whole state with an exported one (validated by the shard); on an error the
  // inventory is left empty, as new. Writer thread; readers see the shard empty meanwhile, so
  // import into a private inventory and publish it when done.
  std::optional<ExactImportErrc> import_state(const InventoryState& state);

  // ---- readers (any thread) ----
  // Block size of the main attention group, 0 until the first store taught it.
  uint32_t block_size() const { return block_size_.load(std::memory_order_acquire); }
  // Whether `name` was seen as a LoRA adapter name in this engine's events.
  bool knows_lora(std::string_view name) const;
  std::optional<uint32_t> match(std::span<const uint64_t> chain) const { return shard_.match(chain); }
  std::optional<TierBlocks> match_tiers(std::span<const uint64_t> chain) const { return shard_.match_tiers(chain); }
  bool tiers() const { return tiers_; }
  const ExactShard& shard() const { return shard_; }
  // The digest key of a digest inventory, null for a raw one.
  const DigestKey* digest_key() const { return digest_.get(); }
  uint64_t skipped(Skip s) const { return skipped_[static_cast<size_t>(s)].load(std::memory_order_relaxed); }

  // A removal key: vLLM's block hash, qualified by data parallel rank and KV-cache group.
  static uint64_t removal_key(const kv::BlockHash& h, uint32_t dp_rank, uint32_t group);

 private:
  enum class GroupKind : uint8_t { kMain, kOther };
  std::optional<GroupKind> group_kind(uint32_t dp_rank, const kv::BlockStored& e);
  void apply_removed(const kv::BlockRemoved& e, uint32_t dp_rank, ApplyCounts& counts);
  void flush_removed(ApplyCounts& counts);
  std::optional<ExactStoreErrc> attach_stored(const kv::BlockStored& e, uint32_t dp_rank, Tier tier, ApplyCounts& counts);
  std::optional<ExactStoreErrc> apply_stored(const kv::BlockStored& e, uint32_t dp_rank, ApplyCounts& counts);
  std::atomic<int64_t> rank_{-1};  // set_rank(): the rank followed, -1: any
  void skip(Skip s, uint64_t n = 1) { skipped_[static_cast<size_t>(s)].fetch_add(n, std::memory_order_relaxed); }

  ExactShard shard_;
  bool tiers_ = false;
  Tier removals_tier_ = Tier::kGpu;  // the tier of the queued removals_
  std::shared_ptr<const DigestKey> digest_;
  std::vector<uint32_t> words_;  // scratch: a digest inventory's digest words of one store
  std::atomic<uint32_t> block_size_{0};
  std::unordered_map<uint64_t, GroupKind> kinds_;  // (dp rank << 32 | group) -> kind
  mutable std::shared_mutex lora_mu_;
  std::vector<std::string> loras_;  // adapter names seen (few)
  std::vector<uint64_t> keys_;      // scratch: removal keys of one store
  std::vector<uint64_t> removals_;  // removal keys of a run of BlockRemoved events
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Skip::kCount_)> skipped_{};
};

// One request, as the lookup needs it: its prompt token IDs and the namespace it was cached in.
struct ExactRequest {
  std::span<const uint32_t> tokens;
  std::string_view model;       // a LoRA adapter's name when the request names one
  std::string_view cache_salt;  // empty when none
  // Whether `model` is a LoRA adapter (its own namespace on every engine), as the engines' model
  // lists say; nullopt: each inventory decides by the adapter names its events carried.
  std::optional<bool> adapter = std::nullopt;
};

// A request's key chains (exact_chain), computed on first use per (block size, namespace) and
// kept, so the lookup and speculative residency hash the prompt once. Holds `request`'s spans.
class RequestChains {
 public:
  explicit RequestChains(const ExactRequest& request) : request_(request) {}
  // The chain in `inv`'s block size and namespace (empty while `inv` knows no block size), over
  // token blocks or, for a digest inventory, over the blocks' digests under its key.
  std::span<const uint64_t> of(const Inventory& inv);
  const ExactRequest& request() const { return request_; }

 private:
  struct Chain {
    uint32_t block_size;
    bool lora;
    const DigestKey* digest;  // null: raw tokens
    std::vector<uint64_t> keys;
  };
  ExactRequest request_;
  std::vector<Chain> chains_;  // few: one per (block size, namespace) among the engines
};

// Resident prompt tokens of the request in each inventory (out[i] for inventories[i]; 0 for one
// that never stored a block; nullopt for a null entry or a read that kept racing its writer).
void lookup(std::span<const Inventory* const> inventories, RequestChains& chains,
            std::span<std::optional<uint32_t>> out);
// Resident prompt tokens by tier (TierBlocks counted in tokens: the GPU run, then what the
// engine's connector would load from CPU, then from disk).
void lookup_tiers(std::span<const Inventory* const> inventories, RequestChains& chains,
                  std::span<std::optional<TierBlocks>> out);
void lookup(std::span<const Inventory* const> inventories, const ExactRequest& request,
            std::span<std::optional<uint32_t>> out);

}  // namespace ramjet::cache::events
