// cache/kv events: vLLM's KV-cache event vocabulary (vllm/distributed/kv_events.py), as plain
// values. A batch is what one engine step publishes; its events are BlockStored (newly full
// blocks entered the prefix cache), BlockRemoved (cached blocks were evicted) and
// AllBlocksCleared (the prefix cache was reset). Every field vLLM has ever put on the wire is
// here; the wire encoding lives in codec.h, the hash that fills block_hashes in block_hash.h.
// What an event means for routing (filters by medium, group, namespace) is the index's business.
#pragma once

#include <algorithm>
#include <array>
#include <cassert>
#include <compare>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace ramjet::cache::kv {

// vLLM's ExternalBlockHash (bytes | int). With VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1 (the default)
// vLLM publishes the low 64 bits of the internal digest (its last 8 bytes read big-endian) as an
// unsigned int; with 0, the raw digest (32 bytes for sha256*, 16 for xxhash*). vLLM before the
// bytes/int union used a plain Python int, which can be negative. A value type of fixed size:
// the digest is held inline (at most 32 bytes, the longest vLLM digest).
class BlockHash {
 public:
  static constexpr size_t kMaxBytes = 32;
  enum class Form : uint8_t { kUint, kNegativeInt, kBytes };

  BlockHash() = default;  // the unsigned int 0
  static BlockHash from_uint(uint64_t v) { return BlockHash(Form::kUint, v); }
  // A negative value keeps its sign on the wire; a non-negative one is the same as from_uint.
  static BlockHash from_int(int64_t v) {
    return v < 0 ? BlockHash(Form::kNegativeInt, static_cast<uint64_t>(v))
                 : BlockHash(Form::kUint, static_cast<uint64_t>(v));
  }
  // 1..kMaxBytes bytes (a digest); the caller checks the size.
  static BlockHash from_bytes(std::span<const uint8_t> bytes) {
    assert(!bytes.empty() && bytes.size() <= kMaxBytes);
    BlockHash h;
    h.form_ = Form::kBytes;
    h.size_ = static_cast<uint8_t>(std::min(bytes.size(), kMaxBytes));
    std::copy_n(bytes.begin(), h.size_, h.bytes_.begin());
    return h;
  }

  Form form() const { return form_; }
  bool is_bytes() const { return form_ == Form::kBytes; }
  // The digest (kBytes), or the 8 big-endian bytes of the int (two's complement when negative).
  std::span<const uint8_t> bytes() const { return {bytes_.data(), size_}; }
  // vLLM's int form: the last 8 bytes read big-endian (all of them when shorter); for the int
  // forms the value's 64 bits.
  uint64_t low64() const {
    uint64_t v = 0;
    for (size_t i = size_ > 8 ? size_ - 8u : 0u; i < size_; ++i) v = (v << 8) | bytes_[i];
    return v;
  }
  int64_t as_int64() const { return static_cast<int64_t>(low64()); }  // kNegativeInt's value

  friend bool operator==(const BlockHash&, const BlockHash&) = default;
  friend auto operator<=>(const BlockHash&, const BlockHash&) = default;

 private:
  BlockHash(Form form, uint64_t v) : form_(form) {
    for (int i = 7; i >= 0; --i, v >>= 8) bytes_[static_cast<size_t>(i)] = static_cast<uint8_t>(v);
  }
  std::array<uint8_t, kMaxBytes> bytes_{};  // unused bytes stay zero (defaulted comparisons)
  uint8_t size_ = 8;
  Form form_ = Form::kUint;
};

// extra_keys: one entry per reported block, None when that block has no extra keys (text-only
// requests give [None, None, …]); otherwise a tuple (LoRA name, multimodal (identifier, offset)
// pairs, cache_salt, prompt-embeds digest). The tuple is kept as its MessagePack encoding (an
// array), opaque: any non-None entry means the block's hash depends on more than its tokens.
using ExtraKeys = std::vector<std::optional<std::string>>;

// Fields in vLLM's declaration (= wire) order. Required on the wire: block_hashes,
// parent_block_hash, token_ids, block_size, lora_id, medium, lora_name (nil when None); the rest
// default to None and are left out of maps when None.
struct BlockStored {
  std::vector<BlockHash> block_hashes;         // the newly full blocks, in order
  std::optional<BlockHash> parent_block_hash;  // None when the first block is block 0
  std::vector<uint32_t> token_ids;             // block_size * block_hashes.size() tokens
  uint32_t block_size = 0;                     // 0 (with no tokens) from some offloading connectors
  std::optional<int64_t> lora_id;              // deprecated numeric adapter id
  std::optional<std::string> medium;           // "GPU", "CPU", "STORAGE" (older "FS"/"OBJ")
  std::optional<std::string> lora_name;
  std::optional<ExtraKeys> extra_keys;
  std::optional<uint32_t> group_idx;              // KV cache group (0 for plain models)
  std::optional<std::string> kv_cache_spec_kind;  // full_attention, mla_attention, sliding_window…
  std::optional<uint32_t> kv_cache_spec_sliding_window;
  std::optional<std::string> locality;   // "LOCAL" | "REMOTE"
  std::optional<std::string> ownership;  // secondary-tier id
  friend bool operator==(const BlockStored&, const BlockStored&) = default;
};

struct BlockRemoved {
  std::vector<BlockHash> block_hashes;
  std::optional<std::string> medium;
  std::optional<uint32_t> group_idx;
  std::optional<std::string> locality;
  std::optional<std::string> ownership;
  friend bool operator==(const BlockRemoved&, const BlockRemoved&) = default;
};

struct AllBlocksCleared {
  friend bool operator==(const AllBlocksCleared&, const AllBlocksCleared&) = default;
};

using Event = std::variant<BlockStored, BlockRemoved, AllBlocksCleared>;

// KVEventBatch: one per engine step that produced events, in occurrence order. `ts` is the
// publisher's time.time(); data_parallel_rank is set by every vLLM that has the field (None in
// the batch only from vLLM <= 0.9, which had no such field).
struct EventBatch {
  double ts = 0;
  std::vector<Event> events;
  std::optional<uint32_t> data_parallel_rank;
  friend bool operator==(const EventBatch&, const EventBatch&) = default;
};

// Whether the batch reports the engine's whole cache cleared (the sequence fence's "clear the
// index, then apply").
inline bool clears_all(const EventBatch& b) {
  return std::any_of(b.events.begin(), b.events.end(),
                     [](const Event& e) { return std::holds_alternative<AllBlocksCleared>(e); });
}

}  // namespace ramjet::cache::kv
