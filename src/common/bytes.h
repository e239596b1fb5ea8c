// common/bytes: word-at-a-time comparisons of short byte strings (HTTP field names and tokens)
// against known ones, where a call to memcmp costs more than the comparison.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace ramjet {

inline uint64_t load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

inline uint32_t load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Whether the n bytes at a, each or'ed with `fold` (0, or 0x20 in every byte to lowercase ASCII
// letters), are the n bytes at b.
inline bool same_bytes(const char* a, const char* b, size_t n, uint64_t fold) {
  if (n >= 8) {
    for (size_t i = 0; i + 8 <= n; i += 8) {
      if ((load64(a + i) | fold) != load64(b + i)) return false;
    }
    return (load64(a + n - 8) | fold) == load64(b + n - 8);  // the tail, overlapping
  }
  if (n >= 4) {
    const auto fold32 = static_cast<uint32_t>(fold);
    return (load32(a) | fold32) == load32(b) && (load32(a + n - 4) | fold32) == load32(b + n - 4);
  }
  for (size_t i = 0; i < n; ++i) {
    if ((static_cast<unsigned char>(a[i]) | static_cast<unsigned char>(fold)) != static_cast<unsigned char>(b[i])) {
      return false;
    }
  }
  return true;
}

// a == b without a call to memcmp: b is usually a literal, whose length the compiler knows.
inline bool same(std::string_view a, std::string_view b) {
  return a.size() == b.size() && same_bytes(a.data(), b.data(), b.size(), 0);
}

// `name` equals `lower` (lowercase letters and '-') in any case, `name` being HTTP token
// characters: bit 5 set in each of its bytes lowercases its letters and maps no other token
// character onto a letter or '-' (only CR, never in a token, would become '-').
inline bool iequal_token(std::string_view name, std::string_view lower) {
  return name.size() == lower.size() && same_bytes(name.data(), lower.data(), lower.size(), 0x2020202020202020);
}

}  // namespace ramjet
