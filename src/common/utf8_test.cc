// common/utf8: utf8_sequence, the one rule for a multi-byte UTF-8 sequence (the usage reader's
// strings refuse what it refuses; the tokenizer's lossy decoding replaces each maximal subpart).
#include "common/utf8.h"

#include <gtest/gtest.h>

#include <string_view>

namespace ramjet {
namespace {

size_t seq(std::string_view s, size_t* prefix = nullptr) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  return utf8_sequence(p, p + s.size(), prefix);
}

TEST(Utf8Sequence, WellFormedSequencesAndTheirLengths) {
  EXPECT_EQ(seq("\xC2\x80"), 2u);
  EXPECT_EQ(seq("\xDF\xBF"), 2u);
  EXPECT_EQ(seq("\xE0\xA0\x80"), 3u);
  EXPECT_EQ(seq("\xED\x9F\xBF"), 3u);        // U+D7FF, the last before the surrogates
  EXPECT_EQ(seq("\xEF\xBF\xBF"), 3u);
  EXPECT_EQ(seq("\xF0\x90\x80\x80"), 4u);
  EXPECT_EQ(seq("\xF4\x8F\xBF\xBF"), 4u);    // U+10FFFF
  EXPECT_EQ(seq("\xE2\x82\xACtail"), 3u);    // only its own bytes
}

TEST(Utf8Sequence, IllFormedOnesAndTheMaximalSubpartALossyDecoderReplaces) {
  struct Case {
    std::string_view bytes;
    size_t prefix;
  } cases[] = {
      {"\x80", 1},                  // a stray continuation
      {"\xC0\x80", 1},              // overlong lead bytes
      {"\xC1\xBF", 1},
      {"\xE0\x80\x80", 1},          // overlong three-byte form
      {"\xED\xA0\x80", 1},          // a surrogate
      {"\xF0\x80\x80\x80", 1},      // overlong four-byte form
      {"\xF4\x90\x80\x80", 1},      // past U+10FFFF
      {"\xF5\x80\x80\x80", 1},      // not a lead byte
      {"\xFF", 1},
      {"\xE2\x82", 2},              // cut short by the end
      {"\xE2\x82x", 2},             // cut short by an ASCII byte
      {"\xF0\x90\x80", 3},
      {"\xC2", 1},
  };
  for (const Case& c : cases) {
    size_t prefix = 0;
    EXPECT_EQ(seq(c.bytes, &prefix), 0u) << testing::PrintToString(c.bytes);
    EXPECT_EQ(prefix, c.prefix) << testing::PrintToString(c.bytes);
  }
}

}  // namespace
}  // namespace ramjet
