#include "sim/engine/prefix_hash.h"

#include <string_view>

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

namespace {

void cbor_text(std::vector<uint8_t>& buf, std::string_view s) {
  cache::kv::cbor_append_head(buf, 3, s.size());
  buf.insert(buf.end(), s.begin(), s.end());
}

}  // namespace

cache::kv::BlockHash hash_block_in(cache::kv::BlockHasher& hasher, const cache::kv::BlockHash& parent,
                                   std::span<const uint32_t> tokens, const CacheNamespace& ns,
                                   uint64_t block_index, std::vector<uint8_t>& buf) {
  const bool salt = block_index == 0 && !ns.cache_salt.empty();
  const size_t keys = (ns.lora() ? 1 : 0) + (salt ? 1 : 0);
  if (keys == 0) return hasher.hash_block(parent, tokens);
  const auto p = parent.bytes();
  buf.clear();
  cache::kv::cbor_append_head(buf, 4, 3);
  cache::kv::cbor_append_head(buf, 2, p.size());
  buf.insert(buf.end(), p.begin(), p.end());
  cache::kv::cbor_append_head(buf, 4, tokens.size());
  for (uint32_t t : tokens) cache::kv::cbor_append_head(buf, 0, t);
  // generate_block_hash_extra_keys' order: LoRA, (multimodal: none here), cache_salt.
  cache::kv::cbor_append_head(buf, 4, keys);
  if (ns.lora()) {  // _gen_lora_extra_hash_keys: ("lora", lora_name, lora_path)
    cache::kv::cbor_append_head(buf, 4, 3);
    cbor_text(buf, "lora");
    cbor_text(buf, ns.lora_name);
    cbor_text(buf, ns.lora_path);
  }
  if (salt) {
    cache::kv::cbor_append_head(buf, 4, 2);
    cbor_text(buf, "cache_salt");
    cbor_text(buf, ns.cache_salt);
  }
  return hasher.digest(buf);
}

}  // namespace ramjet::sim
