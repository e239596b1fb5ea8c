#include "text.h"

#include <gtest/gtest.h>

#include <set>

namespace ramjet::bench {
namespace {

TEST(Rng, SameSeedGivesSameSequenceAndDifferentSeedsDiffer) {
  Rng a(7), b(7), c(8);
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.next();
    EXPECT_EQ(x, b.next());
    EXPECT_NE(x, c.next());
  }
}

TEST(Rng, ExponentialMeanIsOneOverRate) {
  Rng r(42);
  double sum = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) sum += r.exponential(50.0);
  EXPECT_NEAR(sum / n, 1.0 / 50.0, 0.0005);
}

TEST(Vocab, EveryWordHasAtMostThreeLettersAndNoSpaces) {
  std::set<std::string_view> seen;
  for (size_t i = 0; i < kVocabSize; ++i) {
    auto w = vocab_word(i);
    EXPECT_GE(w.size(), 1u);
    EXPECT_LE(w.size(), 3u);
    EXPECT_EQ(w.find(' '), std::string_view::npos);
    seen.insert(w);
  }
  EXPECT_EQ(seen.size(), kVocabSize);
}

TEST(AppendWords, IsDeterministicAndPrefixStable) {
  std::string a, b, c;
  append_words(a, 99, 50);
  append_words(b, 99, 50);
  append_words(c, 99, 20);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.substr(0, c.size()), c);
  // exactly one leading space per word
  EXPECT_EQ(std::count(a.begin(), a.end(), ' '), 50);
  EXPECT_EQ(a.front(), ' ');
}

TEST(AppendTextBytes, ReachesTheSizeWithWholeWordsFromTheSameSequence) {
  std::string t, w;
  append_text_bytes(t, 5, 1000);
  EXPECT_GE(t.size(), 1000u);
  EXPECT_LT(t.size(), 1004u);
  append_words(w, 5, static_cast<size_t>(std::count(t.begin(), t.end(), ' ')));
  EXPECT_EQ(t, w);
}

TEST(JsonString, EscapesQuotesBackslashesAndControlsAndRoundTrips) {
  std::string out;
  const std::string in = "a\"b\\c\nd\x01" "e\xc3\xa9";
  append_json_string(out, in);
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\nd\\u0001e\xc3\xa9\"");
  std::string back;
  ASSERT_TRUE(append_json_unescaped(back, std::string_view(out).substr(1, out.size() - 2)));
  EXPECT_EQ(back, in);
}

TEST(JsonUnescape, DecodesUnicodeEscapesIncludingSurrogatePairs) {
  std::string out;
  ASSERT_TRUE(append_json_unescaped(out, "\\u00e9\\ud83d\\ude00\\/x"));
  EXPECT_EQ(out, "\xc3\xa9\xf0\x9f\x98\x80/x");
}

TEST(JsonUnescape, RejectsABadEscape) {
  std::string out;
  EXPECT_FALSE(append_json_unescaped(out, "ab\\q"));
  EXPECT_FALSE(append_json_unescaped(out, "ab\\"));
  EXPECT_FALSE(append_json_unescaped(out, "\\u12"));
}

}  // namespace
}  // namespace ramjet::bench
