// cache/kv codec: vLLM's KVEventBatch in MessagePack, both layouts. The batch is always an array
// [ts float64, events, data_parallel_rank] (msgspec array_like; no rank before vLLM ≈0.10). Events
// are tagged structs: before vLLM 0.26 arrays (tag first, then every field in declaration order,
// None as nil; the arrays grew a field at a time per release), from 0.26 maps ("type" first, then
// the fields in declaration order, fields whose value is their None default left out).
//
// encode_batch() writes the bytes msgspec writes (smallest int/str/array/map forms, float64 ts,
// str strings, bin digests). decode_batch() reads untrusted bytes of either layout, and any mix
// of them in one batch, with every size bounded by DecodeLimits; map fields are matched by name,
// in any order, unknown ones skipped. It never throws on bad input and never reads outside the
// payload; its errors carry a stable reason and a static message, never payload content. What the
// events mean (fencing, filtering, indexing) is for the consumer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "cache/kv/event.h"
#include "common/result.h"

namespace ramjet::cache::kv {

enum class Layout : uint8_t { kArray, kMap };  // events as arrays (vLLM < 0.26) | maps (>= 0.26)

// The width of the array layout, by release: BlockStored (tag included) 6 (v0.9) -> 7 (+medium)
// -> 8 (+lora_name) -> 9 (+extra_keys) -> 10 (+group_idx) -> 12 (+kv_cache_spec_kind,
// +kv_cache_spec_sliding_window), and 13 (+locality), 14 (+ownership) for the fields added since;
// BlockRemoved 2 -> 3 (+medium) -> 4 (+group_idx), 5 (+locality), 6 (+ownership). vLLM <= 0.9
// had no data_parallel_rank (a 2-array batch). The default is the last array_like release.
struct ArrayLayout {
  int stored_fields = 12;  // 6..14, clamped
  int removed_fields = 4;  // 2..6, clamped
  bool with_dp_rank = true;
};

struct EncodeOptions {
  Layout layout = Layout::kMap;
  // VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1: a bytes hash goes out as its low64() (uint64);
  // otherwise every hash goes out in its own form (uint, int or bin).
  bool int_block_hashes = false;
  ArrayLayout array;  // kArray only; the map layout always writes the rank (nil when None)
};

std::string encode_batch(const EventBatch& batch, const EncodeOptions& options);

struct DecodeLimits {
  size_t max_payload_bytes = 16u << 20;
  uint32_t max_events = 4096;                      // per batch
  uint32_t max_block_hashes_per_event = 1u << 20;  // block_hashes of one event
  uint32_t max_block_hashes_per_batch = 1u << 20;
  uint32_t max_token_ids_per_event = 4u << 20;
  uint32_t max_token_ids_per_batch = 4u << 20;
  uint32_t max_extra_keys_per_event = 1u << 20;  // entries of one extra_keys list
  uint32_t max_extra_keys_per_batch = 1u << 20;
  uint32_t max_extra_key_bytes = 4096;  // the MessagePack of one extra_keys tuple
  uint32_t max_string_bytes = 1024;     // medium, lora_name, kind, locality, ownership, type, keys
  uint32_t max_event_fields = 64;       // entries of one event map (known and unknown)
  uint32_t max_depth = 16;  // nesting inside an extra_keys tuple or a skipped value (at most 64)
};

enum class DecodeErrc : uint8_t {
  kPayloadTooLarge,
  kTruncated,       // a value runs past the end of the payload
  kInvalidMsgpack,  // the reserved byte 0xc1
  kTrailingBytes,   // bytes after the batch
  kBadBatch,        // not [ts, events] / [ts, events, rank], or a rank that is not a u32/nil
  kBadTimestamp,    // ts not a number, or not finite
  kTooManyEvents,
  kBadEvent,  // an event that is not a tagged array/map, or a map key that is not a str
  kUnknownEventType,
  kMissingField,
  kDuplicateField,
  kBadField,      // a known field of the wrong type or out of range
  kBadBlockHash,  // not an int or 1..32 bytes
  kTooManyBlockHashes,
  kTooManyTokenIds,
  kTooManyExtraKeys,
  kExtraKeyTooLarge,
  kStringTooLong,
  kTooManyFields,
  kTooDeep,
};

// Stable snake_case label (for metrics), e.g. "too_many_token_ids".
std::string_view reason(DecodeErrc code);

struct DecodeError {
  DecodeErrc code;
  std::string_view message;  // static text naming the field or limit, never payload content
  std::string_view reason() const { return kv::reason(code); }
};

Result<EventBatch, DecodeError> decode_batch(std::span<const uint8_t> payload,
                                             const DecodeLimits& limits = {});
inline Result<EventBatch, DecodeError> decode_batch(std::string_view payload,
                                                    const DecodeLimits& limits = {}) {
  return decode_batch(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()),
      limits);
}

}  // namespace ramjet::cache::kv
