// cache/index/exact_index: the exact prefix index, one ExactShard per engine. A shard holds the
// token blocks the engine's KV cache reports resident, keyed by ramjet's own chained hash of each
// block's token IDs (exact_chain below), never by vLLM's block hash, which depends on engine
// settings (hash algorithm, PYTHONHASHSEED, extra keys). vLLM's hashes are kept only as removal
// keys, counted per copy: vLLM may cache one hash in several physical blocks and reports each
// copy's store and eviction. Turning KV events into these calls (filters, groups, namespaces,
// trust) is cache/events' job; scoring a match is route's.
//
// Blocks form a trie (each block's parent is the block before it in the prompt). A block is
// usable for a prefix hit only while it and every block before it are resident, as vLLM's own
// prefix lookup stops at the first miss; the shard keeps that as a per-block `reachable` flag, so
// match() is a galloping binary search over a request's chain (about 2·log2(blocks) probes)
// instead of a probe per block.
//
// Tiers: a block may be held by the engine's GPU prefix cache and by its offload tiers (vLLM's
// OffloadingConnector: CPU memory, and "STORAGE"/"FS"/"OBJ" secondary tiers, here "disk"). Each
// copy is counted per tier (its removal key is qualified by the tier: tier_key), and the
// reachable flag is kept per level (GPU; GPU or CPU; any tier), so a lookup answers with three
// gallops how many leading blocks the engine serves from its GPU prefix cache, how many more its
// connector loads from CPU, and how many more from disk: vLLM's scheduler looks the GPU prefix
// cache up first and asks the connector for the blocks after the GPU hit
// (OffloadingConnectorScheduler.get_num_new_matched_tokens: a contiguous run from there), so a
// block counts at the nearest tier of the unbroken run it sits in.
//
// Concurrency: one writer per shard (the engine's event applier); match() runs on any thread and
// never waits for the writer. Each mutation runs inside a sequence lock; a read that overlapped
// one is retried (yielding the CPU once when the writer is mid-section), and after kReadTries
// overlapping reads match() answers "busy" (nullopt) rather
// than wait. The tables never move (their size is fixed by the limits, so a full shard fails a
// store with kCapacity instead of growing), so a racing read is always memory-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace ramjet::cache {

// The key chain. Block 0's key hashes its tokens with a seed that names the namespace (the LoRA
// adapter and the cache_salt a request was cached under) and the block size; block i's key hashes
// its tokens with block i-1's key as the seed (XXH3-64 of the little-endian uint32 token IDs).
uint64_t exact_root_seed(uint32_t block_size, std::string_view lora_name = {}, std::string_view cache_salt = {});
uint64_t exact_next(uint64_t seed, std::span<const uint32_t> block_tokens);
// Appends the key of every full block of `tokens` to `out` (the partial tail is not a block).
void exact_chain(std::span<const uint32_t> tokens, uint32_t block_size, uint64_t root_seed,
                 std::vector<uint64_t>& out);

// Where a copy of a block lives (the KV event's medium, as cache/events maps it).
enum class Tier : uint8_t { kGpu = 0, kCpu = 1, kDisk = 2 };
inline constexpr size_t kTiers = 3;
std::string_view label(Tier t);  // "gpu", "cpu", "disk": a metric label and a receipt key

// Leading blocks of a chain the engine holds, by the tier they would be served from: by_tier[0]
// from the GPU prefix cache, then by_tier[1] loaded from CPU, then by_tier[2] from disk.
struct TierBlocks {
  std::array<uint32_t, kTiers> by_tier{};
  uint32_t total() const { return by_tier[0] + by_tier[1] + by_tier[2]; }
  uint32_t operator[](Tier t) const { return by_tier[static_cast<size_t>(t)]; }
  friend bool operator==(const TierBlocks&, const TierBlocks&) = default;
};

struct ExactShardLimits {
  // Blocks one engine may hold (resident blocks plus the non-resident ones kept because a resident
  // block hangs below them), and distinct removal keys; beyond it a store fails with kCapacity.
  // Memory is about 62 bytes per block of this limit, touched as it fills.
  uint32_t max_blocks = 262144;
};

enum class ExactStoreErrc : uint8_t {
  kParentUnknown,  // the parent's removal key is not in the shard (missed event, late join)
  kConflict,       // a removal key already names a block with other tokens or another parent
  kCapacity,       // the store needs more blocks or removal keys than the limits allow
  kShape,          // tokens.size() != block_size * removal_keys.size(), or block_size 0
};
std::string_view reason(ExactStoreErrc e);

// A shard's blocks as a snapshot carries them (the wire format is companion/'s): parents before
// children; each block's removal keys follow the previous block's in one flat list.
struct ExactBlockRecord {
  static constexpr uint32_t kNoParent = 0xffffffffu;
  uint64_t key = 0;              // the chain key
  uint32_t parent = kNoParent;   // index of an earlier record; kNoParent for a first block
  uint32_t removal_keys = 0;     // 0: not resident, kept because blocks below it are
};
struct ExactRemovalRecord {
  uint64_t key = 0;
  uint32_t copies = 0;  // > 0
  Tier tier = Tier::kGpu;  // the copies' tier (companion snapshots carry GPU copies only)
};

enum class ExactImportErrc : uint8_t {
  kNotEmpty,        // import_blocks() needs an empty shard
  kParent,          // a parent index that does not name an earlier record
  kDuplicateKey,    // two records with one chain key
  kDuplicateRemovalKey,
  kZeroCopies,      // a removal record with no copies (or a block's copies overflow)
  kDangling,        // a block neither resident nor above a resident one (a shard never keeps it)
  kShape,           // the removal counts do not add up to the removal list
  kCapacity,        // more blocks or removal keys than the limits allow
};
std::string_view reason(ExactImportErrc e);

class ExactShard {
 public:
  static constexpr int kReadTries = 8;
  static constexpr size_t kWriteBatch = 64;  // blocks per write section (readers see whole sections)

  explicit ExactShard(ExactShardLimits limits = {});
  ~ExactShard();
  ExactShard(const ExactShard&) = delete;
  ExactShard& operator=(const ExactShard&) = delete;

  const ExactShardLimits& limits() const { return limits_; }

  // ---- writer side (one thread at a time) ----
  // Stores removal_keys.size() consecutive blocks of `block_size` tokens each in `tier`: the first
  // one below the block stored under `parent` (a removal key, of a copy in any tier), or at the root
  // of `root_seed` when there is no parent. A block already held gains a copy. All or nothing: on
  // an error nothing changed.
  std::optional<ExactStoreErrc> store(std::optional<uint64_t> parent, uint64_t root_seed,
                                      std::span<const uint64_t> removal_keys,
                                      std::span<const uint32_t> tokens, uint32_t block_size,
                                      Tier tier = Tier::kGpu);
  // Gives the blocks already known under `removal_keys` (a copy in any tier) a copy in `tier`,
  // each under its own removal key: an offload tier's store that names its blocks by hash only
  // (vLLM's OffloadingConnector without self-describing events: no tokens, no parent). Keys the
  // shard does not know (the block was never stored, or is gone) are skipped and counted in
  // `unknown`; an error (capacity) leaves the keys before the failing one applied.
  std::optional<ExactStoreErrc> attach(std::span<const uint64_t> removal_keys, Tier tier, uint32_t& unknown);
  // Drops one `tier` copy per removal key; returns how many keys were unknown (never stored, or
  // already gone: vLLM evicts blocks ramjet never saw stored when it joined late).
  uint32_t remove(std::span<const uint64_t> removal_keys, Tier tier = Tier::kGpu);
  void clear();
  // Drops every copy in `tier` (vLLM's AllBlocksCleared resets the GPU prefix cache only).
  void clear_tier(Tier tier);
  // Appends every block (resident, or kept for the blocks below it) and its removal keys with
  // their copy counts, parents first. Writer thread (or a shard nobody writes).
  void export_blocks(std::vector<ExactBlockRecord>& blocks, std::vector<ExactRemovalRecord>& removals) const;
  // Fills an empty shard with exported blocks, validating them (untrusted input: every record is
  // checked, nothing is assumed). On an error the shard is left empty. Writer thread.
  std::optional<ExactImportErrc> import_blocks(std::span<const ExactBlockRecord> blocks,
                                               std::span<const ExactRemovalRecord> removals);

  // ---- reader side (any thread) ----
  // How many leading blocks of `chain` (exact_chain's keys) the engine can serve from its cache,
  // any tier; nullopt when every try overlapped a write (the caller treats the engine as unknown).
  std::optional<uint32_t> match(std::span<const uint64_t> chain) const;
  // The same run, split by the tier each block would be served from (see Tiers above).
  std::optional<TierBlocks> match_tiers(std::span<const uint64_t> chain) const;
  // Bumped by every mutation: two equal revisions mean nothing changed in between.
  uint64_t revision() const { return seq_.load(std::memory_order_acquire) >> 1; }
  // Whether chain[from..] are reachable now and have been without a break since `revision` (a
  // revision() read before the lookup that found them): false when one is gone, or stopped being
  // reachable after `revision` (the engine evicted it, or a block above it) and came back. The
  // prediction check tells an eviction race from a wrong prediction by it (route/late_check.h).
  // Any tier counts (vLLM's cached_tokens counts what the connector loads). Revisions compare
  // modulo 2^29 (the question is asked within a second of the lookup);
  // nullopt when every try overlapped a write.
  std::optional<bool> held_since(std::span<const uint64_t> chain, size_t from, uint64_t revision) const;

  // Counts (any thread; exact when read by the writer).
  uint32_t blocks() const { return nodes_used_.load(std::memory_order_relaxed); }
  uint32_t resident_blocks() const { return resident_.load(std::memory_order_relaxed); }
  // Blocks with at least one copy in `tier`.
  uint32_t resident_blocks(Tier tier) const { return tier_resident_[static_cast<size_t>(tier)].load(std::memory_order_relaxed); }
  uint32_t removal_keys() const { return keys_used_.load(std::memory_order_relaxed); }
  // Bytes allocated for the tables (address space; pages are touched as the shard fills).
  size_t table_bytes() const;

  // Test hook: every invariant of the trie, the tables and the counts, checked (writer thread).
  bool check_invariants() const;

 private:
  struct Node;
  struct KeySlot;

  uint32_t find_node(uint64_t key) const;     // any thread (racy-safe for readers); kNone when absent
  bool read_reachable(uint64_t key, uint32_t level_bit) const;    // reader
  uint32_t gallop(std::span<const uint64_t> chain, uint32_t level_bit) const;
  TierBlocks gallop_tiers(std::span<const uint64_t> chain) const;
  size_t find_key_slot(uint64_t removal_key) const;  // writer; npos when absent
  size_t find_any_tier_slot(uint64_t removal_key) const;  // a copy's slot in the first tier that has one
  uint32_t new_node(uint64_t key, uint32_t parent);
  void free_node(uint32_t n);
  void table_insert(uint32_t n);
  void table_erase(uint32_t n);
  size_t key_insert(uint64_t removal_key, uint32_t n, Tier tier);  // the slot
  // The keys of `tier`'s copies (tier_key), in tier_scratch_ unless the tier is the GPU.
  std::span<const uint64_t> tiered(std::span<const uint64_t> removal_keys, Tier tier);
  void key_erase(size_t slot);
  void add_copy(uint32_t n, Tier tier);
  void drop_copy(uint32_t n, Tier tier);
  void drop_key_copy(size_t slot);  // one copy under the key of `slot`, then the node's
  uint32_t levels_of(uint32_t n) const;  // the reachable levels n should have now
  void refresh(uint32_t n);  // sets n's levels and, where they changed, its descendants'
  bool is_reachable(uint32_t n) const;
  void set_levels(uint32_t n, uint32_t levels);
  void begin_write();
  void end_write();

  static constexpr uint32_t kNone = 0xffffffffu;
  static constexpr size_t kPrefetch = 8;     // how far a long store's probes run ahead

  ExactShardLimits limits_;
  size_t table_size_ = 0;  // slots of both hash tables
  Node* nodes_ = nullptr;  // max_blocks, calloc'd
  uint64_t* table_ = nullptr;   // key -> node: (high 32 bits of key) << 32 | (node + 1); 0 = empty
  KeySlot* keys_ = nullptr;     // removal key -> node and copy count; node 0 = empty
  uint32_t free_head_ = kNone;  // free node list (through next_sibling)
  uint32_t high_water_ = 0;     // nodes [0, high_water_) have been handed out at least once
  std::vector<uint32_t> stack_;  // reused by set_reachable_below
  std::vector<uint64_t> chain_scratch_;  // store(): the blocks' keys
  std::vector<uint64_t> dup_scratch_;    // store(): its removal keys, sorted
  std::vector<uint32_t> node_scratch_;   // store(): each block's node, or "new"
  std::vector<size_t> slot_scratch_;     // store(): each removal key's slot, or none
  std::vector<uint64_t> tier_scratch_;   // tiered(), clear_tier()
  alignas(64) std::atomic<uint64_t> seq_{0};  // odd while a write is in progress
  std::atomic<uint32_t> nodes_used_{0};
  std::atomic<uint32_t> resident_{0};
  std::atomic<uint32_t> keys_used_{0};
  std::array<std::atomic<uint32_t>, kTiers> tier_resident_{};
};

// A removal key of a copy in `tier`: the GPU copy's key is the key itself; an offload tier's copy
// of the same vLLM block gets a key of its own, so each tier's copies are counted and removed apart.
uint64_t tier_key(uint64_t removal_key, Tier tier);

}  // namespace ramjet::cache
