#include "request/stream/tokenize_budget.h"

#include <gtest/gtest.h>

namespace ramjet::request {
namespace {

using std::chrono::milliseconds;

TEST(TokenizeBudget, IsTheTimeoutUntilTheFleetsSpeedIsLearned) {
  TokenizeBudget b(TokenizeBudgetConfig{.share = 0.1, .cap = milliseconds(500)});
  EXPECT_EQ(b.budget(40000), milliseconds(500));
  b.learn(40000, 10000, 0, 0);  // prompt size learned, speed not (not streamed)
  EXPECT_EQ(b.budget(40000), milliseconds(500));
  b.learn(1000, 10, 0, 1'000'000);  // too small to say anything
  EXPECT_EQ(b.ns_per_token(), 0.0);
}

// 10,000 prompt tokens for 40,000 bytes, computed in 1 s: 100 us per token. A 40 KB request's cold
// prefill is then 1 s and its budget a tenth of it; a 4 MB one would be capped by the timeout.
TEST(TokenizeBudget, IsAShareOfTheExpectedColdPrefill) {
  TokenizeBudget b(TokenizeBudgetConfig{.share = 0.1, .cap = milliseconds(500)});
  b.learn(40000, 10000, 0, 1'000'000'000);
  EXPECT_DOUBLE_EQ(b.tokens_per_byte(), 0.25);
  EXPECT_DOUBLE_EQ(b.ns_per_token(), 100'000.0);
  EXPECT_EQ(b.budget(40000), milliseconds(100));
  EXPECT_EQ(b.budget(8000), milliseconds(20));
  EXPECT_EQ(b.budget(4'000'000), milliseconds(500));
  EXPECT_EQ(b.budget(10), TokenizeBudget::kFloor);
}

// The time to first token counts against the tokens the engine computed, not the cached ones.
TEST(TokenizeBudget, LearnsPerComputedTokenAndMovesWithTheFleet) {
  TokenizeBudget b(TokenizeBudgetConfig{.share = 0.1, .cap = milliseconds(5000)});
  b.learn(40000, 10000, 9000, 100'000'000);  // 1,000 computed in 100 ms
  EXPECT_DOUBLE_EQ(b.ns_per_token(), 100'000.0);
  b.learn(40000, 10000, 9990, 100'000'000);  // 10 computed: below kMinComputedTokens, ignored
  EXPECT_DOUBLE_EQ(b.ns_per_token(), 100'000.0);
  for (int i = 0; i < 200; ++i) b.learn(40000, 10000, 0, 4'000'000'000);  // a loaded fleet: 400 us per token
  EXPECT_NEAR(b.ns_per_token(), 400'000.0, 1000.0);
  EXPECT_NEAR(static_cast<double>(b.budget(40000).count()), 400.0, 2.0);
}

TEST(TokenizeBudget, ShareZeroIsTheTimeoutForEveryRequest) {
  TokenizeBudget b(TokenizeBudgetConfig{.share = 0, .cap = milliseconds(300)});
  b.learn(40000, 10000, 0, 1'000'000'000);
  EXPECT_EQ(b.budget(40000), milliseconds(300));
}

}  // namespace
}  // namespace ramjet::request
