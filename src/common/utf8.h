// common/utf8: appending a code point as UTF-8 (the tokenizer's byte decoding, the JSON readers'
// \u escapes, the benchmark's text generator; the caller passes a valid scalar value), and
// checking one multi-byte sequence (the usage reader's strings, the tokenizer's lossy decoding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ramjet {

inline void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The well-formed UTF-8 sequence whose lead byte (>= 0x80) is at p: its length (2..4), or 0 when
// it is not one (a stray continuation or an invalid lead byte, an overlong form, a surrogate, a code
// point past U+10FFFF, or a sequence cut short by `end`). With `prefix`, on 0 it is set to the
// length of the maximal subpart that starts at p (its lead and the continuation bytes that still
// fit the sequence; at least 1): what a lossy decoder replaces with one U+FFFD.
inline size_t utf8_sequence(const unsigned char* p, const unsigned char* end, size_t* prefix = nullptr) {
  const unsigned char c = p[0];
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  }
  size_t k = 1;
  for (; k < len && p + k < end; ++k) {
    const unsigned char d = p[k];
    if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF)) break;
  }
  if (len != 0 && k == len) return len;
  if (prefix != nullptr) *prefix = k;
  return 0;
}

}  // namespace ramjet
