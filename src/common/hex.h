// common/hex: the value of one hexadecimal digit (API-key digests, the companion's secret files,
// JSON \u escapes).
#pragma once

namespace ramjet {

// 0..15, or -1 for a character that is not a hex digit (either case).
inline int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace ramjet
