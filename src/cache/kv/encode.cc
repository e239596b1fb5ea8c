// cache/kv encoder: KVEventBatch byte-for-byte as msgspec.msgpack.Encoder writes it. The batch is
// array_like ([ts float64, events, data_parallel_rank]); events are tagged structs, either
// msgpack maps ("type" first, declaration order, omit_defaults) on vLLM >= 0.26 or arrays (tag
// first, every field, None as nil) before. Ints and containers use the smallest msgpack form
// (msgpuck does the same as msgspec), strings are str, digests are bin.
#include <msgpuck.h>

#include <algorithm>
#include <string_view>
#include <type_traits>

#include "cache/kv/codec.h"

namespace ramjet::cache::kv {
namespace {

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  void nil() { put(mp_encode_nil(tmp_)); }
  void uint(uint64_t v) { put(mp_encode_uint(tmp_, v)); }
  void integer(int64_t v) {
    if (v < 0) {
      put(mp_encode_int(tmp_, v));
    } else {
      uint(static_cast<uint64_t>(v));
    }
  }
  void dbl(double v) { put(mp_encode_double(tmp_, v)); }
  void array(uint32_t n) { put(mp_encode_array(tmp_, n)); }
  void map(uint32_t n) { put(mp_encode_map(tmp_, n)); }
  void str(std::string_view s) {
    put(mp_encode_strl(tmp_, static_cast<uint32_t>(s.size())));
    out_.append(s);
  }
  void bin(std::span<const uint8_t> b) {
    put(mp_encode_binl(tmp_, static_cast<uint32_t>(b.size())));
    out_.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  void raw(std::string_view bytes) { out_.append(bytes); }

  template <typename T, typename F>
  void opt(const std::optional<T>& v, F&& write) {
    if (v) {
      write(*v);
    } else {
      nil();
    }
  }
  void opt_str(const std::optional<std::string>& s) {
    opt(s, [&](const std::string& v) { str(v); });
  }
  void opt_uint(const std::optional<uint32_t>& v) {
    opt(v, [&](uint32_t x) { uint(x); });
  }
  // A map entry that omit_defaults leaves out when the field is None.
  void entry_if(std::string_view key, const std::optional<uint32_t>& v) {
    if (!v) return;
    str(key);
    uint(*v);
  }
  void entry_if(std::string_view key, const std::optional<std::string>& v) {
    if (!v) return;
    str(key);
    str(*v);
  }

 private:
  void put(const char* end) { out_.append(tmp_, static_cast<size_t>(end - tmp_)); }
  std::string& out_;
  char tmp_[16];
};

struct Encoder {
  Writer& w;
  bool int_block_hashes;

  void hash(const BlockHash& h) {
    switch (h.form()) {
      case BlockHash::Form::kBytes:
        if (int_block_hashes) {
          w.uint(h.low64());
        } else {
          w.bin(h.bytes());
        }
        break;
      case BlockHash::Form::kUint:
        w.uint(h.low64());
        break;
      case BlockHash::Form::kNegativeInt:
        w.integer(h.as_int64());
        break;
    }
  }
  void hashes(const std::vector<BlockHash>& hs) {
    w.array(static_cast<uint32_t>(hs.size()));
    for (const auto& h : hs) hash(h);
  }
  void parent(const std::optional<BlockHash>& p) {
    w.opt(p, [&](const BlockHash& h) { hash(h); });
  }
  void tokens(const std::vector<uint32_t>& t) {
    w.array(static_cast<uint32_t>(t.size()));
    for (uint32_t v : t) w.uint(v);
  }
  void lora_id(const std::optional<int64_t>& v) {
    w.opt(v, [&](int64_t x) { w.integer(x); });
  }
  // [None | tuple, ...]; a tuple is kept as its own MessagePack (an array).
  void extra_keys(const std::optional<ExtraKeys>& keys) {
    w.opt(keys, [&](const ExtraKeys& ks) {
      w.array(static_cast<uint32_t>(ks.size()));
      for (const auto& k : ks) w.opt(k, [&](const std::string& bytes) { w.raw(bytes); });
    });
  }

  // --- map layout (vLLM >= 0.26, omit_defaults: a None-default field is left out when None) ---
  void map_event(const BlockStored& e) {
    const uint32_t n = 8 + e.extra_keys.has_value() + e.group_idx.has_value() +
                       e.kv_cache_spec_kind.has_value() +
                       e.kv_cache_spec_sliding_window.has_value() + e.locality.has_value() +
                       e.ownership.has_value();
    w.map(n);
    w.str("type");
    w.str("BlockStored");
    w.str("block_hashes");
    hashes(e.block_hashes);
    w.str("parent_block_hash");
    parent(e.parent_block_hash);
    w.str("token_ids");
    tokens(e.token_ids);
    w.str("block_size");
    w.uint(e.block_size);
    w.str("lora_id");
    lora_id(e.lora_id);
    w.str("medium");
    w.opt_str(e.medium);
    w.str("lora_name");
    w.opt_str(e.lora_name);
    if (e.extra_keys) {
      w.str("extra_keys");
      extra_keys(e.extra_keys);
    }
    w.entry_if("group_idx", e.group_idx);
    w.entry_if("kv_cache_spec_kind", e.kv_cache_spec_kind);
    w.entry_if("kv_cache_spec_sliding_window", e.kv_cache_spec_sliding_window);
    w.entry_if("locality", e.locality);
    w.entry_if("ownership", e.ownership);
  }
  void map_event(const BlockRemoved& e) {
    w.map(3 + e.group_idx.has_value() + e.locality.has_value() + e.ownership.has_value());
    w.str("type");
    w.str("BlockRemoved");
    w.str("block_hashes");
    hashes(e.block_hashes);
    w.str("medium");
    w.opt_str(e.medium);
    w.entry_if("group_idx", e.group_idx);
    w.entry_if("locality", e.locality);
    w.entry_if("ownership", e.ownership);
  }
  void map_event(const AllBlocksCleared&) {
    w.map(1);
    w.str("type");
    w.str("AllBlocksCleared");
  }

  // --- array layout (vLLM < 0.26: every field, None as nil; width per release) ---
  void array_event(const BlockStored& e, int n) {
    n = std::clamp(n, 6, 14);
    w.array(static_cast<uint32_t>(n));
    w.str("BlockStored");
    hashes(e.block_hashes);
    parent(e.parent_block_hash);
    tokens(e.token_ids);
    w.uint(e.block_size);
    lora_id(e.lora_id);
    if (n >= 7) w.opt_str(e.medium);
    if (n >= 8) w.opt_str(e.lora_name);
    if (n >= 9) extra_keys(e.extra_keys);
    if (n >= 10) w.opt_uint(e.group_idx);
    if (n >= 11) w.opt_str(e.kv_cache_spec_kind);
    if (n >= 12) w.opt_uint(e.kv_cache_spec_sliding_window);
    if (n >= 13) w.opt_str(e.locality);
    if (n >= 14) w.opt_str(e.ownership);
  }
  void array_event(const BlockRemoved& e, int n) {
    n = std::clamp(n, 2, 6);
    w.array(static_cast<uint32_t>(n));
    w.str("BlockRemoved");
    hashes(e.block_hashes);
    if (n >= 3) w.opt_str(e.medium);
    if (n >= 4) w.opt_uint(e.group_idx);
    if (n >= 5) w.opt_str(e.locality);
    if (n >= 6) w.opt_str(e.ownership);
  }
  void array_event(const AllBlocksCleared&, int) {
    w.array(1);
    w.str("AllBlocksCleared");
  }
};

}  // namespace

std::string encode_batch(const EventBatch& batch, const EncodeOptions& options) {
  std::string out;
  out.reserve(64 + batch.events.size() * 96);
  Writer w(out);
  Encoder enc{w, options.int_block_hashes};
  const bool map = options.layout == Layout::kMap;
  const bool rank = map || options.array.with_dp_rank;
  w.array(rank ? 3 : 2);
  w.dbl(batch.ts);
  w.array(static_cast<uint32_t>(batch.events.size()));
  for (const auto& ev : batch.events) {
    std::visit(
        [&](const auto& e) {
          if (map) {
            enc.map_event(e);
          } else if constexpr (std::is_same_v<std::decay_t<decltype(e)>, BlockStored>) {
            enc.array_event(e, options.array.stored_fields);
          } else {
            enc.array_event(e, options.array.removed_fields);
          }
        },
        ev);
  }
  if (rank) w.opt_uint(batch.data_parallel_rank);
  return out;
}

}  // namespace ramjet::cache::kv
