#include "sim/engine/tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/engine/filler.h"
#include "sim/engine/timing.h"

namespace ramjet::sim {
namespace {

TEST(Tokenizer, SplitsWordsWithTheirLeadingSpacesAndCutsLongWordsIntoFourBytePieces) {
  const auto ids = tokenize("Hi  there, everyone");
  // "Hi" | "  th" "ere," | " eve" "ryon" "e"
  const std::vector<uint32_t> want = {piece_token_id("Hi"),   piece_token_id("  th"),
                                      piece_token_id("ere,"), piece_token_id(" eve"),
                                      piece_token_id("ryon"), piece_token_id("e")};
  EXPECT_EQ(ids, want);
  EXPECT_TRUE(tokenize("").empty());
  EXPECT_EQ(tokenize("   ").size(), 1u);
}

TEST(Tokenizer, TokenIdIsOneThousandPlusFnv1a64ModuloOneHundredFiftyThousand) {
  // FNV-1a 64 of "" is the offset basis 14695981039346656037.
  EXPECT_EQ(piece_token_id(""), 1000 + 14695981039346656037ULL % 150000);
  // FNV-1a 64("a") = 0xaf63dc4c8601ec8c.
  EXPECT_EQ(piece_token_id("a"), 1000 + 0xaf63dc4c8601ec8cULL % 150000);
  for (uint32_t id : tokenize("the quick brown fox")) {
    EXPECT_GE(id, 1000u);
    EXPECT_LT(id, 151000u);
  }
}

TEST(Tokenizer, AnExtendedTextKeepsEveryTokenButPossiblyTheLast) {
  Rng rng(5);
  const std::string alphabet = "ab  c\n,.xyz";
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const size_t n = rng.next() % 40;
    for (size_t i = 0; i < n; ++i) text += alphabet[rng.next() % alphabet.size()];
    std::string ext = text;
    const size_t m = rng.next() % 20;
    for (size_t i = 0; i < m; ++i) ext += alphabet[rng.next() % alphabet.size()];
    const auto a = tokenize(text);
    const auto b = tokenize(ext);
    ASSERT_GE(b.size() + 1, a.size());
    const size_t keep = a.empty() ? 0 : a.size() - 1;
    for (size_t i = 0; i < keep; ++i) ASSERT_EQ(a[i], b[i]) << "'" << text << "' -> '" << ext << "'";
  }
}

TEST(Tokenizer, FillerTextRetokenizesToTheGeneratedTokenIds) {
  std::string text;
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 3000; ++i) {
    text += filler_token(i);
    ids.push_back(filler_token_id(i));
    EXPECT_LE(filler_token(i).size(), 4u);
  }
  EXPECT_EQ(tokenize(text), ids);
  EXPECT_EQ(filler_token(0).front(), ' ');
}

TEST(Tokenizer, FillerLooksLikeEnglishWords) {
  std::string text;
  for (uint32_t i = 0; i < 60; ++i) text += filler_token(i);
  size_t spaces = 0;
  for (char c : text) spaces += c == ' ';
  EXPECT_GT(spaces, 20u);
  EXPECT_EQ(filler_token(7), filler_token(7));
}

TEST(RenderChat, RendersChatMlWithAGenerationPrompt) {
  const std::string json =
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hello"}])";
  EXPECT_EQ(render_chat(json, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(json, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n");
}

TEST(RenderChat, JoinsTextPartsAndMarksOtherPartsByType) {
  const std::string json =
      R"([{"role":"user","content":[{"type":"text","text":"What is "},)"
      R"({"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"this?"}]},)"
      R"({"role":"assistant","content":null,"tool_calls":[]}])";
  EXPECT_EQ(render_chat(json, false),
            "<|im_start|>user\nWhat is <|image_url|>this?<|im_end|>\n"
            "<|im_start|>assistant\n<|im_end|>\n");
}

TEST(RenderChat, ReadsTheResponsesApiInputTextPartsAsText) {
  const std::string json =
      R"([{"type":"message","role":"user","content":[{"type":"input_text","text":"Hi "},)"
      R"({"type":"input_text","text":"there"},{"type":"output_text","text":"!"}]}])";
  EXPECT_EQ(render_chat(json, false), "<|im_start|>user\nHi there<|output_text|><|im_end|>\n");
}

TEST(RenderChat, InvalidJsonOrANonArrayRendersNothing) {
  EXPECT_EQ(render_chat("{", true), "");
  EXPECT_EQ(render_chat(R"({"role":"user"})", true), "");
}

TEST(RenderChat, AConversationThatGrowsKeepsItsTokenPrefix) {
  const std::string turn1 = R"([{"role":"user","content":"Tell me a story"}])";
  std::string answer;
  for (uint32_t i = 0; i < 50; ++i) answer += filler_token(i);
  const std::string turn2 = R"([{"role":"user","content":"Tell me a story"},)"
                            R"({"role":"assistant","content":")" + answer +
                            R"("},{"role":"user","content":"More"}])";
  auto a = tokenize(render_chat(turn1, true));
  for (uint32_t i = 0; i < 50; ++i) a.push_back(filler_token_id(i));
  const auto b = tokenize(render_chat(turn2, true));
  ASSERT_GT(b.size(), a.size());
  // Everything but the last generated token (it merges with "<|im_end|>") is a prefix.
  for (size_t i = 0; i + 1 < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
}

}  // namespace
}  // namespace ramjet::sim
