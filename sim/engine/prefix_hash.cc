#include "sim/engine/prefix_hash.h"

namespace ramjet::sim {

std::vector<std::string> block_extra_keys(const CacheNamespace& ns, uint64_t block_index) {
  std::vector<std::string> keys;
  if (ns.lora()) keys.push_back(ns.lora_name);
  if (block_index == 0 && !ns.cache_salt.empty()) keys.push_back(ns.cache_salt);
  return keys;
}

namespace {

void msgpack_str(std::string& out, const std::string& s) {
  const size_t n = s.size();
  if (n < 32) {
    out.push_back(static_cast<char>(0xa0 | n));
  } else if (n <= 0xff) {
    out.push_back(static_cast<char>(0xd9));
    out.push_back(static_cast<char>(n));
  } else if (n <= 0xffff) {
    out.push_back(static_cast<char>(0xda));
    out.push_back(static_cast<char>(n >> 8));
    out.push_back(static_cast<char>(n));
  } else {
    out.push_back(static_cast<char>(0xdb));
    for (int s8 = 24; s8 >= 0; s8 -= 8) out.push_back(static_cast<char>(n >> s8));
  }
  out.append(s);
}

}  // namespace

std::optional<std::string> extra_keys_msgpack(const CacheNamespace& ns, uint64_t block_index) {
  const auto keys = block_extra_keys(ns, block_index);
  if (keys.empty()) return std::nullopt;
  std::string out;
  out.push_back(static_cast<char>(0x90 | keys.size()));  // at most 2 entries: a fixarray
  for (const auto& k : keys) msgpack_str(out, k);
  return out;
}

cache::kv::BlockHash hash_block_with_keys(cache::kv::BlockHasher& hasher, const cache::kv::BlockHash& parent,
                                          std::span<const uint32_t> tokens, std::span<const std::string> extra,
                                          std::vector<uint8_t>& buf) {
  if (extra.empty()) return hasher.hash_block(parent, tokens);
  const auto p = parent.bytes();
  buf.clear();
  cache::kv::cbor_append_head(buf, 4, 3);
  cache::kv::cbor_append_head(buf, 2, p.size());
  buf.insert(buf.end(), p.begin(), p.end());
  cache::kv::cbor_append_head(buf, 4, tokens.size());
  for (uint32_t t : tokens) cache::kv::cbor_append_head(buf, 0, t);
  cache::kv::cbor_append_head(buf, 4, extra.size());
  for (const auto& s : extra) {
    cache::kv::cbor_append_head(buf, 3, s.size());
    buf.insert(buf.end(), s.begin(), s.end());
  }
  return hasher.digest(buf);
}

}  // namespace ramjet::sim
