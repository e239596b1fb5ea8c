// KVEventBatch encoding, byte-for-byte as msgspec.msgpack.Encoder (vllm-contracts.md §1.1–1.2):
// the batch is array_like ([ts float64, events, data_parallel_rank]); events are tagged structs,
// either msgpack maps ("type" first, declaration order, omit_defaults) on vLLM >= 0.26 or
// arrays (tag first, every field, None as nil) before. Ints and containers use the smallest
// msgpack form (msgpuck does the same as msgspec), strings are str, digests are bin.
#include <msgpuck.h>

#include <algorithm>
#include <string_view>
#include <type_traits>

#include "sim/kv/kv_internal.h"
#include "sim/kv/publisher.h"

namespace ramjet::sim {
namespace {

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  void nil() { put(mp_encode_nil(tmp_)); }
  void uint(uint64_t v) { put(mp_encode_uint(tmp_, v)); }
  void dbl(double v) { put(mp_encode_double(tmp_, v)); }
  void array(uint32_t n) { put(mp_encode_array(tmp_, n)); }
  void map(uint32_t n) { put(mp_encode_map(tmp_, n)); }
  void str(std::string_view s) {
    put(mp_encode_strl(tmp_, static_cast<uint32_t>(s.size())));
    out_.append(s);
  }
  // None for an empty string (medium, kv_cache_spec_kind).
  void opt_str(std::string_view s) {
    if (s.empty()) {
      nil();
    } else {
      str(s);
    }
  }
  void bin(const uint8_t* p, size_t n) {
    put(mp_encode_binl(tmp_, static_cast<uint32_t>(n)));
    out_.append(reinterpret_cast<const char*>(p), n);
  }

 private:
  void put(const char* end) { out_.append(tmp_, static_cast<size_t>(end - tmp_)); }
  std::string& out_;
  char tmp_[16];
};

struct Encoder {
  Writer& w;
  BlockHashType hash_type;

  void hash(const Digest& d) {
    if (hash_type == BlockHashType::kU64) {
      w.uint(kv_internal::low64(d));
    } else {
      w.bin(d.data(), d.size());
    }
  }
  void hashes(const std::vector<Digest>& hs) {
    w.array(static_cast<uint32_t>(hs.size()));
    for (const auto& h : hs) hash(h);
  }
  void parent(const std::optional<Digest>& p) {
    if (p) {
      hash(*p);
    } else {
      w.nil();
    }
  }
  void tokens(const std::vector<uint32_t>& t) {
    w.array(static_cast<uint32_t>(t.size()));
    for (uint32_t v : t) w.uint(v);
  }
  // Text-only requests: one None per reported block ([None, …] != the default None).
  void extra_keys(size_t blocks) {
    w.array(static_cast<uint32_t>(blocks));
    for (size_t i = 0; i < blocks; ++i) w.nil();
  }

  // --- map layout (vLLM >= 0.26, omit_defaults) ---
  void map_event(const BlockStored& e) {
    const bool kind = !e.kv_cache_spec_kind.empty();
    w.map(10 + (kind ? 1 : 0));
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
    w.nil();
    w.str("medium");
    w.opt_str(e.medium);
    w.str("lora_name");
    w.nil();
    w.str("extra_keys");
    extra_keys(e.block_hashes.size());
    w.str("group_idx");
    w.uint(e.group_idx);
    if (kind) {
      w.str("kv_cache_spec_kind");
      w.str(e.kv_cache_spec_kind);
    }
    // kv_cache_spec_sliding_window, locality, ownership: None == default -> omitted.
  }
  void map_event(const BlockRemoved& e) {
    w.map(4);
    w.str("type");
    w.str("BlockRemoved");
    w.str("block_hashes");
    hashes(e.block_hashes);
    w.str("medium");
    w.opt_str(e.medium);
    w.str("group_idx");
    w.uint(e.group_idx);
  }
  void map_event(const AllBlocksCleared&) {
    w.map(1);
    w.str("type");
    w.str("AllBlocksCleared");
  }

  // --- array layout (vLLM < 0.26: every field, None as nil; width per version) ---
  void array_event(const BlockStored& e, int n) {
    n = std::clamp(n, 6, 12);
    w.array(static_cast<uint32_t>(n));
    w.str("BlockStored");
    hashes(e.block_hashes);
    parent(e.parent_block_hash);
    tokens(e.token_ids);
    w.uint(e.block_size);
    w.nil();                                  // lora_id
    if (n >= 7) w.opt_str(e.medium);
    if (n >= 8) w.nil();                      // lora_name
    if (n >= 9) extra_keys(e.block_hashes.size());
    if (n >= 10) w.uint(e.group_idx);
    if (n >= 11) w.opt_str(e.kv_cache_spec_kind);
    if (n >= 12) w.nil();                     // kv_cache_spec_sliding_window
  }
  void array_event(const BlockRemoved& e, int n) {
    n = std::clamp(n, 2, 4);
    w.array(static_cast<uint32_t>(n));
    w.str("BlockRemoved");
    hashes(e.block_hashes);
    if (n >= 3) w.opt_str(e.medium);
    if (n >= 4) w.uint(e.group_idx);
  }
  void array_event(const AllBlocksCleared&, int) {
    w.array(1);
    w.str("AllBlocksCleared");
  }
};

}  // namespace

namespace kv_internal {

uint64_t low64(const Digest& d) {
  uint64_t v = 0;
  for (size_t i = d.size() - 8; i < d.size(); ++i) v = (v << 8) | d[i];
  return v;
}

std::string encode_batch_ex(double ts, const std::vector<KvEvent>& events, int data_parallel_rank,
                            KvEventsFormat format, BlockHashType hash_type,
                            const ArrayLayout& layout) {
  std::string out;
  out.reserve(64 + events.size() * 96);
  Writer w(out);
  Encoder enc{w, hash_type};
  const bool rank = format == KvEventsFormat::kMap || layout.with_dp_rank;
  w.array(rank ? 3 : 2);
  w.dbl(ts);
  w.array(static_cast<uint32_t>(events.size()));
  for (const auto& ev : events) {
    std::visit(
        [&](const auto& e) {
          if (format == KvEventsFormat::kMap) {
            enc.map_event(e);
          } else if constexpr (std::is_same_v<std::decay_t<decltype(e)>, BlockStored>) {
            enc.array_event(e, layout.stored_fields);
          } else {
            enc.array_event(e, layout.removed_fields);
          }
        },
        ev);
  }
  if (rank) {
    if (data_parallel_rank >= 0) {
      w.uint(static_cast<uint64_t>(data_parallel_rank));
    } else {
      w.nil();
    }
  }
  return out;
}

}  // namespace kv_internal

std::string encode_batch(double ts, const std::vector<KvEvent>& events, int data_parallel_rank,
                         KvEventsFormat format, BlockHashType hash_type) {
  return kv_internal::encode_batch_ex(ts, events, data_parallel_rank, format, hash_type,
                                      kv_internal::ArrayLayout{});
}

}  // namespace ramjet::sim
