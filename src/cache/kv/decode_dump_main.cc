// kv_decode_dump: a test tool for test_kv_decode.py. Reads one hex-encoded KVEventBatch payload
// per stdin line and prints, per line, the decoded batch as one JSON object, or
// {"error":"<reason>"}. Hashes print as {"u":N} (uint), {"i":N} (negative int) or {"b":"hex"}
// (bytes); an extra_keys tuple prints as the hex of its MessagePack; None as null.
#include <boost/json.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "cache/kv/codec.h"

namespace {

namespace json = boost::json;
namespace kv = ramjet::cache::kv;

std::string hex(std::span<const uint8_t> b) {
  static const char* k = "0123456789abcdef";
  std::string out;
  for (uint8_t c : b) {
    out.push_back(k[c >> 4]);
    out.push_back(k[c & 15]);
  }
  return out;
}

json::value hash(const kv::BlockHash& h) {
  switch (h.form()) {
    case kv::BlockHash::Form::kUint:
      return json::object{{"u", h.low64()}};
    case kv::BlockHash::Form::kNegativeInt:
      return json::object{{"i", h.as_int64()}};
    case kv::BlockHash::Form::kBytes:
      break;
  }
  return json::object{{"b", hex(h.bytes())}};
}

json::array hashes(const std::vector<kv::BlockHash>& hs) {
  json::array a;
  for (const auto& h : hs) a.push_back(hash(h));
  return a;
}

template <typename T>
json::value opt(const std::optional<T>& v) {
  if (!v) return nullptr;
  return json::value_from(*v);
}

json::value event(const kv::Event& ev) {
  if (const auto* s = std::get_if<kv::BlockStored>(&ev)) {
    json::array tokens;
    for (uint32_t t : s->token_ids) tokens.push_back(t);
    json::value extra = nullptr;
    if (s->extra_keys) {
      json::array a;
      for (const auto& k : *s->extra_keys) {
        if (k) {
          a.push_back(json::value(hex({reinterpret_cast<const uint8_t*>(k->data()), k->size()})));
        } else {
          a.push_back(nullptr);
        }
      }
      extra = std::move(a);
    }
    return json::object{
        {"type", "BlockStored"},
        {"block_hashes", hashes(s->block_hashes)},
        {"parent_block_hash", s->parent_block_hash ? hash(*s->parent_block_hash) : nullptr},
        {"token_ids", std::move(tokens)},
        {"block_size", s->block_size},
        {"lora_id", opt(s->lora_id)},
        {"medium", opt(s->medium)},
        {"lora_name", opt(s->lora_name)},
        {"extra_keys", std::move(extra)},
        {"group_idx", opt(s->group_idx)},
        {"kv_cache_spec_kind", opt(s->kv_cache_spec_kind)},
        {"kv_cache_spec_sliding_window", opt(s->kv_cache_spec_sliding_window)},
        {"locality", opt(s->locality)},
        {"ownership", opt(s->ownership)},
    };
  }
  if (const auto* r = std::get_if<kv::BlockRemoved>(&ev)) {
    return json::object{{"type", "BlockRemoved"},       {"block_hashes", hashes(r->block_hashes)},
                        {"medium", opt(r->medium)},     {"group_idx", opt(r->group_idx)},
                        {"locality", opt(r->locality)}, {"ownership", opt(r->ownership)}};
  }
  return json::object{{"type", "AllBlocksCleared"}};
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<uint8_t> bytes;
    for (size_t i = 0; i + 1 < line.size(); i += 2) {
      bytes.push_back(static_cast<uint8_t>(std::stoul(line.substr(i, 2), nullptr, 16)));
    }
    const auto r = kv::decode_batch(std::span<const uint8_t>(bytes));
    if (!r.ok()) {
      std::cout << json::serialize(json::object{{"error", std::string(r.error().reason())}})
                << "\n";
      continue;
    }
    json::array events;
    for (const auto& e : r->events) events.push_back(event(e));
    std::cout << json::serialize(json::object{{"ts", r->ts},
                                              {"events", std::move(events)},
                                              {"data_parallel_rank", opt(r->data_parallel_rank)}})
              << "\n";
  }
  return 0;
}
