#include "request/admission/client_share.h"

#include <gtest/gtest.h>

namespace ramjet::request {
namespace {

TEST(ClientShares, AClientAloneMayHoldEverySlot) {
  ClientShares s;
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(s.enter("p", "a", 4)) << i;
  EXPECT_FALSE(s.enter("p", "a", 4));  // its fifth
}

TEST(ClientShares, ANewcomerCountsItselfAndTheHeavyClientIsPastItsShare) {
  ClientShares s;
  for (int i = 0; i < 4; ++i) s.enter("p", "heavy", 4);
  // Two clients now share four slots: two each.
  EXPECT_TRUE(s.enter("p", "light", 4));
  EXPECT_FALSE(s.enter("p", "heavy", 4));
  EXPECT_TRUE(s.enter("p", "light", 4));
  EXPECT_FALSE(s.enter("p", "light", 4));
  EXPECT_EQ(s.clients("p"), 2u);
  // An odd number of slots rounds the share up (ceil(5 / 3) = 2); no slots: nobody is under it.
  EXPECT_TRUE(s.enter("p", "third", 5));
  EXPECT_FALSE(s.enter("p", "fourth", 0));
}

TEST(ClientShares, PoolsAreSeparateAndEndedRequestsAreForgotten) {
  ClientShares s;
  s.enter("p", "a", 1);
  EXPECT_TRUE(s.enter("q", "a", 1));  // another pool: its own share
  EXPECT_FALSE(s.enter("p", "a", 1));
  s.remove("p", "a");
  s.remove("p", "a");
  EXPECT_EQ(s.clients("p"), 0u);
  EXPECT_TRUE(s.enter("p", "a", 1));  // forgotten: under its share again
  EXPECT_EQ(s.clients("q"), 1u);
  s.remove("q", "a");
  s.remove("q", "a");  // (one too many: ignored)
  EXPECT_EQ(s.clients("q"), 0u);
}

}  // namespace
}  // namespace ramjet::request
