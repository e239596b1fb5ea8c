#include "oracle.h"

#include <gtest/gtest.h>

#include <map>

namespace ramjet::bench {
namespace {

ResidentAnswer ans(uint64_t resident, uint64_t running, uint64_t waiting) {
  ResidentAnswer a;
  a.ok = true;
  a.resident_tokens = resident;
  a.running = running;
  a.waiting = waiting;
  return a;
}

TEST(ChooseEngine, MostResidentTokensWinsEvenWhenBusier) {
  uint64_t rr = 0;
  EXPECT_EQ(choose_engine({ans(100, 0, 0), ans(900, 9, 9), ans(500, 0, 0)}, rr), 1u);
}

TEST(ChooseEngine, ResidentTieGoesToFewestRunningPlusWaiting) {
  uint64_t rr = 0;
  EXPECT_EQ(choose_engine({ans(64, 3, 1), ans(64, 1, 2), ans(0, 0, 0)}, rr), 1u);
}

TEST(ChooseEngine, FullTiesRotateRoundRobin) {
  uint64_t rr = 0;
  std::map<size_t, int> n;
  for (int i = 0; i < 30; ++i) n[choose_engine({ans(0, 1, 0), ans(5, 0, 1), ans(5, 1, 0)}, rr)]++;
  EXPECT_EQ(n[0], 0);
  EXPECT_EQ(n[1], 15);
  EXPECT_EQ(n[2], 15);
}

TEST(ChooseEngine, SilentEnginesAreSkippedAndAllSilentMeansRoundRobin) {
  uint64_t rr = 0;
  ResidentAnswer down;
  EXPECT_EQ(choose_engine({down, ans(0, 5, 5)}, rr), 1u);
  std::map<size_t, int> n;
  for (int i = 0; i < 4; ++i) n[choose_engine({down, down}, rr)]++;
  EXPECT_EQ(n[0], 2);
  EXPECT_EQ(n[1], 2);
}

TEST(ParseResident, ReadsTheSimAnswerAndRejectsJunk) {
  auto a = parse_resident("{\"prompt_tokens\":700,\"resident_tokens\":512,\"running\":3,\"waiting\":1}");
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->ok);
  EXPECT_EQ(a->prompt_tokens, 700u);
  EXPECT_EQ(a->resident_tokens, 512u);
  EXPECT_EQ(a->running, 3u);
  EXPECT_EQ(a->waiting, 1u);
  EXPECT_FALSE(parse_resident("nope"));
  EXPECT_FALSE(parse_resident("{\"running\":1}"));
  EXPECT_EQ(resident_body("[1]"), "{\"messages\":[1]}");
}

}  // namespace
}  // namespace ramjet::bench
