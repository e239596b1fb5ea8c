// cache/kv decoder: KVEventBatch of either layout over the bounded reader of msgpack_reader.h,
// every count checked against DecodeLimits before anything is reserved. (msgpuck's mp_check is
// not used: it keeps its element count in an int, so a 32-bit container count can wrap it and
// report a truncated payload as valid.)
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "cache/kv/codec.h"
#include "cache/kv/msgpack_reader.h"

namespace ramjet::cache::kv {

std::string_view reason(DecodeErrc code) {
  switch (code) {
    case DecodeErrc::kPayloadTooLarge: return "payload_too_large";
    case DecodeErrc::kTruncated: return "truncated";
    case DecodeErrc::kInvalidMsgpack: return "invalid_msgpack";
    case DecodeErrc::kTrailingBytes: return "trailing_bytes";
    case DecodeErrc::kBadBatch: return "bad_batch";
    case DecodeErrc::kBadTimestamp: return "bad_timestamp";
    case DecodeErrc::kTooManyEvents: return "too_many_events";
    case DecodeErrc::kBadEvent: return "bad_event";
    case DecodeErrc::kUnknownEventType: return "unknown_event_type";
    case DecodeErrc::kMissingField: return "missing_field";
    case DecodeErrc::kDuplicateField: return "duplicate_field";
    case DecodeErrc::kBadField: return "bad_field";
    case DecodeErrc::kBadBlockHash: return "bad_block_hash";
    case DecodeErrc::kTooManyBlockHashes: return "too_many_block_hashes";
    case DecodeErrc::kTooManyTokenIds: return "too_many_token_ids";
    case DecodeErrc::kTooManyExtraKeys: return "too_many_extra_keys";
    case DecodeErrc::kExtraKeyTooLarge: return "extra_key_too_large";
    case DecodeErrc::kStringTooLong: return "string_too_long";
    case DecodeErrc::kTooManyFields: return "too_many_fields";
    case DecodeErrc::kTooDeep: return "too_deep";
  }
  return "unknown";
}

namespace {

using msgpack::Int;
using msgpack::Reader;
using msgpack::T;

// Field order = vLLM's declaration order = array-layout position (after the tag).
constexpr std::array<std::string_view, 13> kStoredFields = {
    "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
    "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window",
    "locality", "ownership"};
constexpr std::array<std::string_view, 5> kRemovedFields = {"block_hashes", "medium", "group_idx",
                                                            "locality", "ownership"};

template <size_t N>
int field_index(const std::array<std::string_view, N>& fields, std::string_view key) {
  for (size_t i = 0; i < N; ++i) {
    if (fields[i] == key) return static_cast<int>(i);
  }
  return -1;
}

enum class Type { kStored, kRemoved, kCleared };

class Decoder {
 public:
  Decoder(std::span<const uint8_t> in, const DecodeLimits& limits) : r_(in), lim_(limits) {}
  const DecodeError& error() const { return r_.error(); }

  bool batch(EventBatch& out) {
    T t;
    if (!r_.peek(t)) return false;
    if (t != T::kArray) return r_.fail(DecodeErrc::kBadBatch, "the batch is not an array");
    uint32_t n;
    if (!r_.container(n)) return false;
    if (n != 2 && n != 3) {
      return r_.fail(DecodeErrc::kBadBatch, "the batch is not [ts, events(, data_parallel_rank)]");
    }
    if (!timestamp(out.ts)) return false;
    if (!r_.peek(t)) return false;
    if (t != T::kArray) return r_.fail(DecodeErrc::kBadBatch, "events is not an array");
    uint32_t events;
    if (!r_.container(events)) return false;
    if (events > lim_.max_events) {
      return r_.fail(DecodeErrc::kTooManyEvents, "more events than max_events");
    }
    out.events.reserve(events);
    for (uint32_t i = 0; i < events; ++i) {
      if (!event(out.events.emplace_back())) return false;
    }
    if (n == 3 && !opt_u32(out.data_parallel_rank, DecodeErrc::kBadBatch,
                           "data_parallel_rank is not a u32 or nil")) {
      return false;
    }
    if (r_.left() != 0) return r_.fail(DecodeErrc::kTrailingBytes, "bytes after the batch");
    return true;
  }

 private:
  bool timestamp(double& ts) {
    T t;
    if (!r_.peek(t)) return false;
    if (t == T::kFloat) {
      if (!r_.floating(ts)) return false;
    } else if (t == T::kUint || t == T::kInt) {
      Int i;
      if (!r_.integer(i)) return false;
      ts = i.negative ? static_cast<double>(i.i) : static_cast<double>(i.u);
    } else {
      return r_.fail(DecodeErrc::kBadTimestamp, "ts is not a number");
    }
    if (!std::isfinite(ts)) return r_.fail(DecodeErrc::kBadTimestamp, "ts is not finite");
    return true;
  }

  bool event(Event& out) {
    T t;
    if (!r_.peek(t)) return false;
    if (t != T::kArray && t != T::kMap) {
      return r_.fail(DecodeErrc::kBadEvent, "an event is neither an array nor a map");
    }
    uint32_t n;
    if (!r_.container(n)) return false;
    return t == T::kArray ? array_event(n, out) : map_event(n, out);
  }

  bool event_type(std::string_view tag, Type& type) {
    if (tag == "BlockStored") {
      type = Type::kStored;
    } else if (tag == "BlockRemoved") {
      type = Type::kRemoved;
    } else if (tag == "AllBlocksCleared") {
      type = Type::kCleared;
    } else {
      return r_.fail(DecodeErrc::kUnknownEventType, "an unknown event type");
    }
    return true;
  }

  bool tag(Type& type) {
    T t;
    if (!r_.peek(t)) return false;
    if (t != T::kStr) return r_.fail(DecodeErrc::kBadEvent, "an event tag is not a str");
    std::string_view s;
    if (!r_.str(s)) return false;
    return event_type(s, type);
  }

  // --- array layout: [tag, field 0, field 1, ...], as many fields as the release had ---
  bool array_event(uint32_t n, Event& out) {
    if (n == 0) return r_.fail(DecodeErrc::kBadEvent, "an event array is empty");
    Type type;
    if (!tag(type)) return false;
    switch (type) {
      case Type::kStored: {
        if (n < 6 || n > 1 + kStoredFields.size()) {
          return r_.fail(DecodeErrc::kBadEvent, "a BlockStored array has not 6 to 14 elements");
        }
        auto& e = out.emplace<BlockStored>();
        for (uint32_t i = 0; i + 1 < n; ++i) {
          if (!stored_field(static_cast<int>(i), e)) return false;
        }
        return true;
      }
      case Type::kRemoved: {
        if (n < 2 || n > 1 + kRemovedFields.size()) {
          return r_.fail(DecodeErrc::kBadEvent, "a BlockRemoved array has not 2 to 6 elements");
        }
        auto& e = out.emplace<BlockRemoved>();
        for (uint32_t i = 0; i + 1 < n; ++i) {
          if (!removed_field(static_cast<int>(i), e)) return false;
        }
        return true;
      }
      case Type::kCleared:
        if (n != 1) return r_.fail(DecodeErrc::kBadEvent, "an AllBlocksCleared array has fields");
        out.emplace<AllBlocksCleared>();
        return true;
    }
    return false;
  }

  // --- map layout: {"type": tag, name: value, ...}, any order, unknown names skipped ---
  bool key(std::string_view& k) {
    T t;
    if (!r_.peek(t)) return false;
    if (t != T::kStr) return r_.fail(DecodeErrc::kBadEvent, "an event map key is not a str");
    if (!r_.str(k)) return false;
    if (k.size() > lim_.max_string_bytes) {
      return r_.fail(DecodeErrc::kStringTooLong,
                     "an event map key is longer than max_string_bytes");
    }
    return true;
  }

  bool map_event(uint32_t n, Event& out) {
    if (n > lim_.max_event_fields) {
      return r_.fail(DecodeErrc::kTooManyFields, "an event map has more than max_event_fields");
    }
    // The tag first: msgspec writes it as the first key; any other position costs a scan.
    const uint8_t* fields = r_.pos();
    Type type{};
    bool type_first = false;
    std::string_view k;
    if (n > 0) {
      if (!key(k)) return false;
      if (k == "type") {
        if (!tag(type)) return false;
        type_first = true;
      }
    }
    if (!type_first) {
      r_.seek(fields);
      bool found = false;
      for (uint32_t i = 0; i < n; ++i) {
        if (!key(k)) return false;
        if (k != "type") {
          if (!r_.skip(lim_.max_depth)) return false;
          continue;
        }
        if (found) return r_.fail(DecodeErrc::kDuplicateField, "an event map repeats type");
        if (!tag(type)) return false;
        found = true;
      }
      if (!found) return r_.fail(DecodeErrc::kMissingField, "an event map has no type");
      r_.seek(fields);
    }
    switch (type) {
      case Type::kStored: {
        auto& e = out.emplace<BlockStored>();
        uint32_t seen = 0;
        if (!map_fields(n, type_first, kStoredFields, seen,
                        [&](int i) { return stored_field(i, e); })) {
          return false;
        }
        if ((seen & 0b1101) != 0b1101) {  // block_hashes, token_ids, block_size
          return r_.fail(DecodeErrc::kMissingField,
                         "a BlockStored map lacks block_hashes, token_ids or block_size");
        }
        return true;
      }
      case Type::kRemoved: {
        auto& e = out.emplace<BlockRemoved>();
        uint32_t seen = 0;
        if (!map_fields(n, type_first, kRemovedFields, seen,
                        [&](int i) { return removed_field(i, e); })) {
          return false;
        }
        if ((seen & 1) == 0) {
          return r_.fail(DecodeErrc::kMissingField, "a BlockRemoved map lacks block_hashes");
        }
        return true;
      }
      case Type::kCleared: {
        out.emplace<AllBlocksCleared>();
        uint32_t seen = 0;
        return map_fields(n, type_first, std::array<std::string_view, 0>{}, seen,
                          [](int) { return false; });
      }
    }
    return false;
  }

  // Reads the remaining entries of an event map (after "type" when it came first).
  template <size_t N, typename F>
  bool map_fields(uint32_t n, bool type_first, const std::array<std::string_view, N>& names,
                  uint32_t& seen, F&& field) {
    bool type_done = type_first;
    for (uint32_t i = type_first ? 1 : 0; i < n; ++i) {
      std::string_view k;
      if (!key(k)) return false;
      if (k == "type") {
        if (type_done) return r_.fail(DecodeErrc::kDuplicateField, "an event map repeats type");
        type_done = true;
        if (!r_.skip(lim_.max_depth)) return false;  // read by the scan already
        continue;
      }
      const int idx = field_index(names, k);
      if (idx < 0) {
        if (!r_.skip(lim_.max_depth)) return false;
        continue;
      }
      if (seen & (1u << idx)) {
        return r_.fail(DecodeErrc::kDuplicateField, "an event map repeats a field");
      }
      seen |= 1u << idx;
      if (!field(idx)) return false;
    }
    return true;
  }

  bool stored_field(int idx, BlockStored& e) {
    switch (idx) {
      case 0: return hashes(e.block_hashes);
      case 1: return opt_hash(e.parent_block_hash);
      case 2: return tokens(e.token_ids);
      case 3: return u32(e.block_size, "BlockStored.block_size is not a u32");
      case 4: return opt_i64(e.lora_id, "BlockStored.lora_id is not an int or nil");
      case 5: return opt_str(e.medium, "BlockStored.medium is not a str or nil",
                             "BlockStored.medium is longer than max_string_bytes");
      case 6: return opt_str(e.lora_name, "BlockStored.lora_name is not a str or nil",
                             "BlockStored.lora_name is longer than max_string_bytes");
      case 7: return extra_keys(e.extra_keys);
      case 8: return opt_u32(e.group_idx, DecodeErrc::kBadField,
                             "BlockStored.group_idx is not a u32 or nil");
      case 9: return opt_str(e.kv_cache_spec_kind,
                             "BlockStored.kv_cache_spec_kind is not a str or nil",
                             "BlockStored.kv_cache_spec_kind is longer than max_string_bytes");
      case 10: return opt_u32(e.kv_cache_spec_sliding_window, DecodeErrc::kBadField,
                              "BlockStored.kv_cache_spec_sliding_window is not a u32 or nil");
      case 11: return opt_str(e.locality, "BlockStored.locality is not a str or nil",
                              "BlockStored.locality is longer than max_string_bytes");
      default: return opt_str(e.ownership, "BlockStored.ownership is not a str or nil",
                              "BlockStored.ownership is longer than max_string_bytes");
    }
  }

  bool removed_field(int idx, BlockRemoved& e) {
    switch (idx) {
      case 0: return hashes(e.block_hashes);
      case 1: return opt_str(e.medium, "BlockRemoved.medium is not a str or nil",
                             "BlockRemoved.medium is longer than max_string_bytes");
      case 2: return opt_u32(e.group_idx, DecodeErrc::kBadField,
                             "BlockRemoved.group_idx is not a u32 or nil");
      case 3: return opt_str(e.locality, "BlockRemoved.locality is not a str or nil",
                             "BlockRemoved.locality is longer than max_string_bytes");
      default: return opt_str(e.ownership, "BlockRemoved.ownership is not a str or nil",
                              "BlockRemoved.ownership is longer than max_string_bytes");
    }
  }

  // --- field values ---
  bool nil_next(bool& is_nil) {
    T t;
    if (!r_.peek(t)) return false;
    is_nil = t == T::kNil;
    if (is_nil) r_.nil();
    return true;
  }

  bool hash(BlockHash& out) {
    T t;
    if (!r_.peek(t)) return false;
    if (t == T::kUint || t == T::kInt) {
      Int i;
      if (!r_.integer(i)) return false;
      out = i.negative ? BlockHash::from_int(i.i) : BlockHash::from_uint(i.u);
      return true;
    }
    if (t == T::kBin) {
      std::span<const uint8_t> b;
      if (!r_.bin(b)) return false;
      if (b.empty() || b.size() > BlockHash::kMaxBytes) {
        return r_.fail(DecodeErrc::kBadBlockHash, "a block hash is not 1 to 32 bytes");
      }
      out = BlockHash::from_bytes(b);
      return true;
    }
    return r_.fail(DecodeErrc::kBadBlockHash, "a block hash is neither an int nor bytes");
  }

  bool opt_hash(std::optional<BlockHash>& out) {
    bool is_nil;
    if (!nil_next(is_nil)) return false;
    if (is_nil) return true;
    return hash(out.emplace());
  }

  bool hashes(std::vector<BlockHash>& out) {
    T t;
    if (!r_.peek(t)) return false;
    if (t != T::kArray) return r_.fail(DecodeErrc::kBadField, "block_hashes is not an array");
    uint32_t n;
    if (!r_.container(n)) return false;
    if (n > lim_.max_block_hashes_per_event) {
      return r_.fail(DecodeErrc::kTooManyBlockHashes,
                     "an event has more block hashes than max_block_hashes_per_event");
    }
    batch_hashes_ += n;
    if (batch_hashes_ > lim_.max_block_hashes_per_batch) {
      return r_.fail(DecodeErrc::kTooManyBlockHashes,
                     "a batch has more block hashes than max_block_hashes_per_batch");
    }
    out.resize(n);
    for (auto& h : out) {
      if (!hash(h)) return false;
    }
    return true;
  }

  bool tokens(std::vector<uint32_t>& out) {
    T t;
    if (!r_.peek(t)) return false;
    if (t != T::kArray) return r_.fail(DecodeErrc::kBadField, "token_ids is not an array");
    uint32_t n;
    if (!r_.container(n)) return false;
    if (n > lim_.max_token_ids_per_event) {
      return r_.fail(DecodeErrc::kTooManyTokenIds,
                     "an event has more token IDs than max_token_ids_per_event");
    }
    batch_tokens_ += n;
    if (batch_tokens_ > lim_.max_token_ids_per_batch) {
      return r_.fail(DecodeErrc::kTooManyTokenIds,
                     "a batch has more token IDs than max_token_ids_per_batch");
    }
    out.resize(n);
    for (auto& v : out) {
      if (!u32(v, "a token ID is not a u32")) return false;
    }
    return true;
  }

  bool u32(uint32_t& out, std::string_view message) {
    T t;
    if (!r_.peek(t)) return false;
    if (t != T::kUint && t != T::kInt) return r_.fail(DecodeErrc::kBadField, message);
    Int i;
    if (!r_.integer(i)) return false;
    if (i.negative || i.u > std::numeric_limits<uint32_t>::max()) {
      return r_.fail(DecodeErrc::kBadField, message);
    }
    out = static_cast<uint32_t>(i.u);
    return true;
  }

  bool opt_u32(std::optional<uint32_t>& out, DecodeErrc code, std::string_view message) {
    T t;
    if (!r_.peek(t)) return false;
    if (t == T::kNil) {
      r_.nil();
      return true;
    }
    if (t != T::kUint && t != T::kInt) return r_.fail(code, message);
    Int i;
    if (!r_.integer(i)) return false;
    if (i.negative || i.u > std::numeric_limits<uint32_t>::max()) return r_.fail(code, message);
    out = static_cast<uint32_t>(i.u);
    return true;
  }

  bool opt_i64(std::optional<int64_t>& out, std::string_view message) {
    T t;
    if (!r_.peek(t)) return false;
    if (t == T::kNil) {
      r_.nil();
      return true;
    }
    if (t != T::kUint && t != T::kInt) return r_.fail(DecodeErrc::kBadField, message);
    Int i;
    if (!r_.integer(i)) return false;
    if (!i.negative && i.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return r_.fail(DecodeErrc::kBadField, message);
    }
    out = i.negative ? i.i : static_cast<int64_t>(i.u);
    return true;
  }

  bool opt_str(std::optional<std::string>& out, std::string_view bad, std::string_view too_long) {
    T t;
    if (!r_.peek(t)) return false;
    if (t == T::kNil) {
      r_.nil();
      return true;
    }
    if (t != T::kStr) return r_.fail(DecodeErrc::kBadField, bad);
    std::string_view s;
    if (!r_.str(s)) return false;
    if (s.size() > lim_.max_string_bytes) return r_.fail(DecodeErrc::kStringTooLong, too_long);
    out.emplace(s);
    return true;
  }

  bool extra_keys(std::optional<ExtraKeys>& out) {
    T t;
    if (!r_.peek(t)) return false;
    if (t == T::kNil) {
      r_.nil();
      return true;
    }
    if (t != T::kArray) return r_.fail(DecodeErrc::kBadField, "extra_keys is not an array or nil");
    uint32_t n;
    if (!r_.container(n)) return false;
    if (n > lim_.max_extra_keys_per_event) {
      return r_.fail(DecodeErrc::kTooManyExtraKeys,
                     "an event has more extra_keys entries than max_extra_keys_per_event");
    }
    batch_extra_keys_ += n;
    if (batch_extra_keys_ > lim_.max_extra_keys_per_batch) {
      return r_.fail(DecodeErrc::kTooManyExtraKeys,
                     "a batch has more extra_keys entries than max_extra_keys_per_batch");
    }
    auto& keys = out.emplace(n);
    for (auto& k : keys) {
      if (!r_.peek(t)) return false;
      if (t == T::kNil) {
        r_.nil();
        continue;
      }
      if (t != T::kArray) {
        return r_.fail(DecodeErrc::kBadField, "an extra_keys entry is not an array or nil");
      }
      const uint8_t* start = r_.pos();
      if (!r_.skip(lim_.max_depth)) return false;
      const auto size = static_cast<size_t>(r_.pos() - start);
      if (size > lim_.max_extra_key_bytes) {
        return r_.fail(DecodeErrc::kExtraKeyTooLarge,
                       "an extra_keys entry is larger than max_extra_key_bytes");
      }
      k.emplace(reinterpret_cast<const char*>(start), size);
    }
    return true;
  }

  Reader r_;
  const DecodeLimits& lim_;
  uint64_t batch_hashes_ = 0;
  uint64_t batch_tokens_ = 0;
  uint64_t batch_extra_keys_ = 0;
};

}  // namespace

Result<EventBatch, DecodeError> decode_batch(std::span<const uint8_t> payload,
                                             const DecodeLimits& limits) {
  if (payload.size() > limits.max_payload_bytes) {
    return DecodeError{DecodeErrc::kPayloadTooLarge, "the payload is larger than max_payload_bytes"};
  }
  Decoder d(payload, limits);
  EventBatch batch;
  if (!d.batch(batch)) return d.error();
  return batch;
}

}  // namespace ramjet::cache::kv
