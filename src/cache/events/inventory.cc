#include "cache/events/inventory.h"

#include <algorithm>
#include <mutex>

#include <xxhash.h>

#include "cache/kv/extra_keys.h"

namespace ramjet::cache::events {

std::string_view label(Skip s) {
  switch (s) {
    case Skip::kUnsupportedMedium: return "unsupported_medium";
    case Skip::kNonLocal: return "non_local";
    case Skip::kNonMainAttention: return "non_main_attention";
    case Skip::kUnknownKind: return "unknown_kind";
    case Skip::kUnknownGroup: return "unknown_group";
    case Skip::kExtraKeys: return "extra_keys";
    case Skip::kBlockSizeMismatch: return "block_size_mismatch";
    case Skip::kShape: return "shape";
    case Skip::kOrphanedParent: return "orphaned_parent";
    case Skip::kUnknownRemoval: return "unknown_removal";
    case Skip::kOtherRank: return "other_rank";
    case Skip::kUnknownBlock: return "unknown_block";
    case Skip::kCount_: break;
  }
  return "unknown";
}

bool is_main_attention(std::string_view kind) {
  return kind == "full_attention" || kind == "mla_attention" || kind == "sink_full_attention";
}

namespace {

// The other kinds vLLM reports (vllm/v1/kv_cache_interface.py): cached, but not the prefix a
// request's hit is counted on.
bool is_other_attention(std::string_view kind) {
  return kind == "sliding_window" || kind == "sliding_window_mla" || kind == "chunked_local_attention" ||
         kind == "mamba" || kind == "encoder_only_attention" || kind == "cross_attention";
}

bool is_local(const std::optional<std::string>& locality) { return !locality || *locality == "LOCAL"; }
uint64_t group_key(uint32_t dp_rank, uint32_t group) { return (static_cast<uint64_t>(dp_rank) << 32) | group; }

}  // namespace

std::optional<Tier> tier_of(const std::optional<std::string>& medium) {
  if (!medium || *medium == "GPU") return Tier::kGpu;
  if (*medium == "CPU") return Tier::kCpu;
  // vLLM main's MEDIUM_STORAGE, and the two it replaced (0.26: file system, object store).
  if (*medium == "STORAGE" || *medium == "FS" || *medium == "OBJ") return Tier::kDisk;
  return std::nullopt;
}

Inventory::Inventory(InventoryLimits limits, std::shared_ptr<const DigestKey> digest)
    : shard_(limits.shard), tiers_(limits.tiers), digest_(std::move(digest)) {}

uint64_t Inventory::removal_key(const kv::BlockHash& h, uint32_t dp_rank, uint32_t group) {
  const auto bytes = h.bytes();
  const uint64_t v = h.is_bytes() ? XXH3_64bits(bytes.data(), bytes.size()) : h.low64();
  // The hash and its (rank, group) hashed together: as a seed of an 8-byte input XXH3 only XORs
  // the seed in, so hash h of one group would share a key with h ^ delta of another.
  const uint64_t in[2] = {v, group_key(dp_rank, group)};
  return XXH3_64bits(in, sizeof in);
}

bool Inventory::knows_lora(std::string_view name) const {
  if (name.empty()) return false;
  std::shared_lock lock(lora_mu_);
  return std::find(loras_.begin(), loras_.end(), name) != loras_.end();
}

std::optional<Inventory::GroupKind> Inventory::group_kind(uint32_t dp_rank, const kv::BlockStored& e) {
  const uint64_t key = group_key(dp_rank, e.group_idx.value_or(0));
  if (e.kv_cache_spec_kind) {
    GroupKind kind;
    if (is_main_attention(*e.kv_cache_spec_kind)) kind = GroupKind::kMain;
    else if (is_other_attention(*e.kv_cache_spec_kind)) kind = GroupKind::kOther;
    else return std::nullopt;
    kinds_[key] = kind;
    return kind;
  }
  // Releases before kv_cache_spec_kind: what a store of this group said before, or group 0 of a
  // model with one group.
  if (auto it = kinds_.find(key); it != kinds_.end()) return it->second;
  if (e.group_idx.value_or(0) == 0) return GroupKind::kMain;
  return std::nullopt;
}

std::optional<ExactStoreErrc> Inventory::apply_stored(const kv::BlockStored& e, uint32_t dp_rank, ApplyCounts& counts) {
  const uint64_t n = e.block_hashes.size();
  const std::optional<Tier> tier = tier_of(e.medium);
  if (!tier || (*tier != Tier::kGpu && !tiers_)) return skip(Skip::kUnsupportedMedium, n), std::nullopt;
  if (!is_local(e.locality)) return skip(Skip::kNonLocal, n), std::nullopt;
  // A hash-only offload store carries no kind: its group's kind is the GPU stores'.
  if (*tier != Tier::kGpu && e.token_ids.empty()) return attach_stored(e, dp_rank, *tier, counts);
  const auto kind = group_kind(dp_rank, e);
  if (!kind) {
    skip(e.kv_cache_spec_kind ? Skip::kUnknownKind : Skip::kUnknownGroup, n);
    return std::nullopt;
  }
  if (*kind == GroupKind::kOther) return skip(Skip::kNonMainAttention, n), std::nullopt;
  if (n == 0) return std::nullopt;
  if (e.block_size == 0 || e.token_ids.size() != static_cast<uint64_t>(e.block_size) * n) {
    return skip(Skip::kShape, n), std::nullopt;
  }
  const uint32_t bs = block_size();
  if (bs == 0) block_size_.store(e.block_size, std::memory_order_release);
  else if (bs != e.block_size) return skip(Skip::kBlockSizeMismatch, n), std::nullopt;

  // The namespace: the adapter's name, and the cache_salt that vLLM puts in block 0's extra keys
  // after it. A block below a parent inherits the parent's namespace through its chain key.
  const std::string_view lora = e.lora_name ? std::string_view(*e.lora_name) : std::string_view();
  if (e.lora_id && lora.empty()) return skip(Skip::kExtraKeys, n), std::nullopt;  // an unnamed adapter
  std::string_view salt;
  if (e.extra_keys) {
    for (size_t i = 0; i < e.extra_keys->size(); ++i) {
      const auto& entry = (*e.extra_keys)[i];
      if (!entry) continue;
      auto parts = kv::parse_extra_key(*entry);
      if (!parts || parts->multimodal || parts->other) return skip(Skip::kExtraKeys, n), std::nullopt;
      std::span<const std::string_view> strings = parts->strings;
      if (!lora.empty() && !strings.empty() && strings.front() == lora) strings = strings.subspan(1);
      if (strings.empty()) continue;
      if (i == 0 && !e.parent_block_hash && strings.size() == 1) {
        salt = strings.front();  // a view into the event, alive until the store below
        continue;
      }
      return skip(Skip::kExtraKeys, n), std::nullopt;
    }
  }
  if (!lora.empty() && !knows_lora(lora)) {
    std::unique_lock lock(lora_mu_);
    // Bounded: an engine naming more adapters than any fleet serves loses exactness for the rest.
    if (loras_.size() >= kMaxLoras) return skip(Skip::kExtraKeys, n), std::nullopt;
    loras_.emplace_back(lora);
  }

  const uint32_t group = e.group_idx.value_or(0);
  keys_.clear();
  for (const auto& h : e.block_hashes) keys_.push_back(removal_key(h, dp_rank, group));
  std::optional<uint64_t> parent;
  if (e.parent_block_hash) parent = removal_key(*e.parent_block_hash, dp_rank, group);
  const uint64_t seed = parent ? 0 : exact_root_seed(e.block_size, lora, salt);
  std::optional<ExactStoreErrc> err;
  if (digest_) {  // the same store over the blocks' digests: kDigestWords "tokens" per block
    // The raw shard refuses a token count that is not block_size per hash; so does this, before
    // digesting (a digest of a partial block would be stored as a whole one).
    if (e.block_size == 0 || e.token_ids.size() != size_t{e.block_size} * e.block_hashes.size()) {
      return skip(Skip::kShape, n), std::nullopt;
    }
    words_.clear();
    digest_->digest_words(e.token_ids, e.block_size, words_);
    err = shard_.store(parent, seed, keys_, words_, kDigestWords, *tier);
  } else {
    err = shard_.store(parent, seed, keys_, e.token_ids, e.block_size, *tier);
  }
  if (!err) {
    counts.stored += n;
    counts.stored_by_tier[static_cast<size_t>(*tier)] += n;
    return std::nullopt;
  }
  switch (*err) {
    case ExactStoreErrc::kParentUnknown: skip(Skip::kOrphanedParent, n); return std::nullopt;
    case ExactStoreErrc::kShape: skip(Skip::kShape, n); return std::nullopt;
    default: return err;  // the index cannot mirror the engine any more
  }
}

// A hash-only store of an offload tier (see inventory.h): each hash names a block a GPU store made.
std::optional<ExactStoreErrc> Inventory::attach_stored(const kv::BlockStored& e, uint32_t dp_rank, Tier tier,
                                                       ApplyCounts& counts) {
  const uint64_t n = e.block_hashes.size();
  const uint32_t group = e.group_idx.value_or(0);
  if (auto it = kinds_.find(group_key(dp_rank, group)); it != kinds_.end() && it->second == GroupKind::kOther) {
    return skip(Skip::kNonMainAttention, n), std::nullopt;
  }
  // block_size 0 (vLLM main) or one GPU block (older releases sent the offloaded block size): one
  // hash per GPU block. A larger offloaded block names a chunk of GPU blocks by its last hash only.
  const uint32_t bs = block_size();
  if (e.block_size != 0 && e.block_size != bs) return skip(Skip::kBlockSizeMismatch, n), std::nullopt;
  keys_.clear();
  for (const auto& h : e.block_hashes) keys_.push_back(removal_key(h, dp_rank, group));
  uint32_t unknown = 0;
  const auto err = shard_.attach(keys_, tier, unknown);
  if (unknown != 0) skip(Skip::kUnknownBlock, unknown);
  if (err) return err;  // the index cannot mirror the engine any more
  counts.stored += n - unknown;
  counts.stored_by_tier[static_cast<size_t>(tier)] += n - unknown;
  return std::nullopt;
}

// Queues the event's removal keys; flush_removed() hands a run of them to the shard at once (vLLM
// sends one BlockRemoved per evicted block, many per batch), so its probes can overlap. A run is
// of one tier: a removal of another tier flushes the run first.
void Inventory::apply_removed(const kv::BlockRemoved& e, uint32_t dp_rank, ApplyCounts& counts) {
  const uint64_t n = e.block_hashes.size();
  const std::optional<Tier> tier = tier_of(e.medium);
  if (!tier || (*tier != Tier::kGpu && !tiers_)) return skip(Skip::kUnsupportedMedium, n);
  if (!is_local(e.locality)) return skip(Skip::kNonLocal, n);
  const uint32_t group = e.group_idx.value_or(0);
  if (auto it = kinds_.find(group_key(dp_rank, group)); it != kinds_.end() && it->second == GroupKind::kOther) {
    return skip(Skip::kNonMainAttention, n);
  }
  if (*tier != removals_tier_) {
    flush_removed(counts);
    removals_tier_ = *tier;
  }
  for (const auto& h : e.block_hashes) removals_.push_back(removal_key(h, dp_rank, group));
}

void Inventory::flush_removed(ApplyCounts& counts) {
  if (removals_.empty()) return;
  const uint32_t unknown = shard_.remove(removals_, removals_tier_);
  if (unknown != 0) skip(Skip::kUnknownRemoval, unknown);
  counts.removed += removals_.size() - unknown;
  counts.removed_by_tier[static_cast<size_t>(removals_tier_)] += removals_.size() - unknown;
  removals_.clear();
}

std::optional<ExactStoreErrc> Inventory::apply(const kv::EventBatch& batch, ApplyCounts* counts) {
  ApplyCounts local;
  ApplyCounts& c = counts ? *counts : local;
  const uint32_t rank = batch.data_parallel_rank.value_or(0);
  if (const int64_t want = rank_.load(std::memory_order_relaxed); want >= 0 && batch.data_parallel_rank && rank != want) {
    uint64_t blocks = 0;
    for (const auto& ev : batch.events) {
      if (const auto* st = std::get_if<kv::BlockStored>(&ev)) blocks += st->block_hashes.size();
      else if (const auto* rm = std::get_if<kv::BlockRemoved>(&ev)) blocks += rm->block_hashes.size();
      else blocks += 1;
    }
    skip(Skip::kOtherRank, blocks);
    return std::nullopt;
  }
  for (const auto& ev : batch.events) {
    if (const auto* removed = std::get_if<kv::BlockRemoved>(&ev)) {
      apply_removed(*removed, rank, c);
      continue;
    }
    flush_removed(c);  // events apply in order
    if (const auto* stored = std::get_if<kv::BlockStored>(&ev)) {
      if (auto err = apply_stored(*stored, rank, c)) return err;
    } else {
      // AllBlocksCleared comes from the GPU BlockPool (reset_prefix_cache) only. vLLM's
      // Scheduler.reset_prefix_cache resets the connector's tiers only when asked
      // (reset_connector=True: reset_connector_cache), and that reset publishes no event: the
      // offload tiers' copies stay. (The subscriber's sequence fence treats this batch as a resync
      // point and clears the whole index first: a CPU copy it forgets is under-predicted, never
      // over-predicted, until the tier stores or removes it again.)
      if (tiers_) shard_.clear_tier(Tier::kGpu);
      else shard_.clear();
      ++c.cleared;
    }
  }
  flush_removed(c);
  return std::nullopt;
}

void Inventory::clear() { shard_.clear(); }

void Inventory::export_state(InventoryState& out) const {
  out.block_size = block_size();
  out.groups.clear();
  for (const auto& [key, kind] : kinds_) {
    out.groups.push_back(InventoryGroup{static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(key), kind == GroupKind::kMain});
  }
  std::sort(out.groups.begin(), out.groups.end(), [](const InventoryGroup& a, const InventoryGroup& b) {
    return std::pair(a.dp_rank, a.group) < std::pair(b.dp_rank, b.group);
  });
  {
    std::shared_lock lock(lora_mu_);
    out.loras = loras_;
  }
  out.blocks.clear();
  out.removals.clear();
  shard_.export_blocks(out.blocks, out.removals);
}

std::optional<ExactImportErrc> Inventory::import_state(const InventoryState& state) {
  shard_.clear();
  kinds_.clear();
  {
    std::unique_lock lock(lora_mu_);
    loras_.clear();
  }
  block_size_.store(0, std::memory_order_release);
  if (state.block_size == 0 && !state.blocks.empty()) return ExactImportErrc::kShape;  // blocks of no size
  if (auto err = shard_.import_blocks(state.blocks, state.removals)) return err;
  for (const auto& g : state.groups) kinds_[group_key(g.dp_rank, g.group)] = g.main ? GroupKind::kMain : GroupKind::kOther;
  {
    std::unique_lock lock(lora_mu_);
    loras_ = state.loras;
  }
  block_size_.store(state.block_size, std::memory_order_release);
  return std::nullopt;
}

std::span<const uint64_t> RequestChains::of(const Inventory& inv) {
  const uint32_t bs = inv.block_size();
  if (bs == 0) return {};
  const bool lora = request_.adapter.value_or(inv.knows_lora(request_.model));
  const DigestKey* digest = inv.digest_key();
  for (const Chain& c : chains_) {
    const bool same_key = c.digest == digest || (c.digest && digest && c.digest->key_id() == digest->key_id());
    if (c.block_size == bs && c.lora == lora && same_key) return c.keys;
  }
  Chain& c = chains_.emplace_back(Chain{bs, lora, digest, {}});
  const uint64_t root = exact_root_seed(bs, lora ? request_.model : std::string_view(), request_.cache_salt);
  if (digest) digest_chain(*digest, request_.tokens, bs, root, c.keys);
  else exact_chain(request_.tokens, bs, root, c.keys);
  return c.keys;
}

namespace {

// Each inventory's answer for the request into out[i]: none without an inventory, `empty` for one
// that never stored a block, else what `match(inventory, chain, block_size)` says.
template <class T, class Match>
void lookup_each(std::span<const Inventory* const> inventories, RequestChains& chains, std::span<std::optional<T>> out,
                 Match match) {
  for (size_t i = 0; i < inventories.size() && i < out.size(); ++i) {
    out[i].reset();
    const Inventory* inv = inventories[i];
    if (inv == nullptr) continue;
    const uint32_t bs = inv->block_size();
    if (bs == 0) {  // it never stored a block
      out[i] = T{};
      continue;
    }
    out[i] = match(*inv, chains.of(*inv), bs);
  }
}

}  // namespace

void lookup(std::span<const Inventory* const> inventories, RequestChains& chains,
            std::span<std::optional<uint32_t>> out) {
  lookup_each(inventories, chains, out,
              [](const Inventory& inv, std::span<const uint64_t> chain, uint32_t bs) -> std::optional<uint32_t> {
                const std::optional<uint32_t> m = inv.match(chain);
                if (!m) return std::nullopt;
                return *m * bs;
              });
}

void lookup_tiers(std::span<const Inventory* const> inventories, RequestChains& chains,
                  std::span<std::optional<TierBlocks>> out) {
  lookup_each(inventories, chains, out,
              [](const Inventory& inv, std::span<const uint64_t> chain, uint32_t bs) -> std::optional<TierBlocks> {
                const std::optional<TierBlocks> m = inv.match_tiers(chain);
                if (!m) return std::nullopt;
                TierBlocks tokens;
                for (size_t t = 0; t < kTiers; ++t) tokens.by_tier[t] = m->by_tier[t] * bs;
                return tokens;
              });
}

void lookup(std::span<const Inventory* const> inventories, const ExactRequest& request,
            std::span<std::optional<uint32_t>> out) {
  RequestChains chains(request);
  lookup(inventories, chains, out);
}

}  // namespace ramjet::cache::events
