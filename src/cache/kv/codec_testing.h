// cache/kv test helpers: byte notation, digests with a known low 64 bits, and events shaped as a
// GPU block pool of a text-only vLLM emits them. For tests only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/kv/event.h"

namespace ramjet::cache::kv::testing {

// Hex byte pairs and "quoted" strings (raw bytes), spaces ignored: `93 cb ... ab "BlockStored"`.
inline std::string spec_bytes(std::string_view text) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ') {
      ++i;
    } else if (c == '"') {
      const size_t end = text.find('"', i + 1);
      out.append(text.substr(i + 1, end - i - 1));
      i = end + 1;
    } else {
      out.push_back(static_cast<char>(std::stoi(std::string(text.substr(i, 2)), nullptr, 16)));
      i += 2;
    }
  }
  return out;
}

inline std::string hex(std::string_view s) {
  static const char* k = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (!out.empty()) out.push_back(' ');
    out.push_back(k[c >> 4]);
    out.push_back(k[c & 15]);
  }
  return out;
}

inline std::string be64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
  return s;
}

// A 32-byte digest whose last 8 bytes (big-endian) are `low`; the first 24 bytes are filler so a
// wrong byte order or offset shows up.
inline BlockHash digest(uint64_t low) {
  uint8_t d[32];
  for (size_t i = 0; i < 24; ++i) d[i] = static_cast<uint8_t>(0xa0 + i);
  for (int i = 0; i < 8; ++i) d[31 - i] = static_cast<uint8_t>(low >> (8 * i));
  return BlockHash::from_bytes(d);
}

// A BlockStored as vLLM's GPU block pool reports a text-only request: medium GPU, group 0,
// full_attention, one None extra key per block.
inline BlockStored gpu_stored(std::vector<uint64_t> hashes, std::optional<uint64_t> parent,
                              std::vector<uint32_t> tokens, uint32_t block_size) {
  BlockStored s;
  for (uint64_t h : hashes) s.block_hashes.push_back(digest(h));
  if (parent) s.parent_block_hash = digest(*parent);
  s.token_ids = std::move(tokens);
  s.block_size = block_size;
  s.medium = "GPU";
  s.extra_keys.emplace(s.block_hashes.size());
  s.group_idx = 0;
  s.kv_cache_spec_kind = "full_attention";
  return s;
}

inline BlockRemoved gpu_removed(std::vector<uint64_t> hashes) {
  BlockRemoved r;
  for (uint64_t h : hashes) r.block_hashes.push_back(digest(h));
  r.medium = "GPU";
  r.group_idx = 0;
  return r;
}

constexpr uint64_t kKthenaHash = 15760518052499183552ull;  // 0xdab89baa7b5857c0

}  // namespace ramjet::cache::kv::testing
