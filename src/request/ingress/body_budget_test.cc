#include "request/ingress/body_budget.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace ramjet::request {
namespace {

TEST(BodyBudget, LeasesUpToTheCapAndRefusesWhatWouldPassIt) {
  BodyBudget b(100);
  BodyBudget::Lease x, y;
  EXPECT_TRUE(x.grow_to(b, 60));
  EXPECT_FALSE(y.grow_to(b, 41));
  EXPECT_EQ(y.bytes(), 0u);
  EXPECT_TRUE(y.grow_to(b, 40));
  EXPECT_EQ(b.used(), 100u);
  EXPECT_FALSE(BodyBudget::Lease().grow_to(b, 1));
}

TEST(BodyBudget, AGrowingLeaseTakesOnlyTheDifferenceAndKeepsWhatItHeldWhenRefused) {
  BodyBudget b(100);
  BodyBudget::Lease x;
  ASSERT_TRUE(x.grow_to(b, 30));
  ASSERT_TRUE(x.grow_to(b, 80));
  EXPECT_EQ(b.used(), 80u);
  EXPECT_TRUE(x.grow_to(b, 10));  // never shrinks
  EXPECT_FALSE(x.grow_to(b, 101));
  EXPECT_EQ(x.bytes(), 80u);
  EXPECT_EQ(b.used(), 80u);
}

TEST(BodyBudget, LeasesReleaseOnDestructionAndMove) {
  BodyBudget b(100);
  {
    BodyBudget::Lease x;
    ASSERT_TRUE(x.grow_to(b, 70));
    BodyBudget::Lease y = std::move(x);
    EXPECT_EQ(b.used(), 70u);
    EXPECT_EQ(x.bytes(), 0u);
  }
  EXPECT_EQ(b.used(), 0u);
}

TEST(BodyBudget, ConcurrentLeasesNeverExceedTheCap) {
  BodyBudget b(1000);
  std::atomic<uint64_t> peak{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        BodyBudget::Lease l;
        if (l.grow_to(b, 300)) {
          const uint64_t u = b.used();
          uint64_t p = peak.load();
          while (u > p && !peak.compare_exchange_weak(p, u)) {
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(peak.load(), 1000u);
  EXPECT_EQ(b.used(), 0u);
}

}  // namespace
}  // namespace ramjet::request
