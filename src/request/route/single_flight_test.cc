#include "request/route/single_flight.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"

namespace ramjet::route {
namespace {

using Chain = std::vector<uint64_t>;
using Counts = std::vector<uint32_t>;

Counts pending_of(const SingleFlight& sf, const Chain& chain) {
  Counts out(sf.engines(), 7);  // pending() must overwrite every element
  sf.pending(chain, out);
  return out;
}

// A chain of `n` fingerprints starting at `first` (distinct values stand in for chained hashes).
Chain chain_of(uint64_t first, size_t n) {
  Chain c;
  for (size_t i = 0; i < n; ++i) c.push_back(first + i);
  return c;
}

TEST(SingleFlight, PendingOnAnEmptyTableIsAllZeros) {
  ManualClock clock;
  SingleFlight sf(3, {}, clock);
  EXPECT_EQ(pending_of(sf, chain_of(1, 4)), (Counts{0, 0, 0}));
  EXPECT_EQ(pending_of(sf, Chain{}), (Counts{0, 0, 0}));
  EXPECT_EQ(sf.leaders(), 0u);
}

TEST(SingleFlight, ALeadersChainIsPendingOnItsEngineOnly) {
  ManualClock clock;
  SingleFlight sf(3, {}, clock);
  auto lease = sf.lead(1, chain_of(10, 4));
  ASSERT_TRUE(lease.active());
  EXPECT_EQ(lease.engine(), 1u);
  EXPECT_EQ(lease.blocks(), 4u);
  EXPECT_EQ(pending_of(sf, chain_of(10, 4)), (Counts{0, 4, 0}));
  EXPECT_EQ(sf.leaders(), 1u);
  EXPECT_EQ(sf.stats().leads, 1u);
}

TEST(SingleFlight, AFollowerSharingFiveLeadingBlocksOfALongerLeaderChainSeesFive) {
  ManualClock clock;
  SingleFlight sf(2, {}, clock);
  auto lease = sf.lead(0, chain_of(100, 12));
  Chain follower = chain_of(100, 5);
  follower.push_back(999);  // diverges after five blocks
  follower.push_back(1000);
  EXPECT_EQ(pending_of(sf, follower), (Counts{5, 0}));
  EXPECT_EQ(pending_of(sf, chain_of(100, 5)), (Counts{5, 0}));  // shorter than the leader
}

TEST(SingleFlight, AChainThatDivergesAtBlockZeroSeesZero) {
  ManualClock clock;
  SingleFlight sf(2, {}, clock);
  auto lease = sf.lead(0, chain_of(100, 8));
  Chain other = chain_of(100, 8);
  other[0] = 7;  // later fingerprints equal, first one not: a different prefix
  EXPECT_EQ(pending_of(sf, other), (Counts{0, 0}));
}

TEST(SingleFlight, EntriesVanishWhenTheLeaseIsDestroyed) {
  ManualClock clock;
  SingleFlight sf(2, {}, clock);
  {
    auto lease = sf.lead(1, chain_of(5, 3));
    EXPECT_EQ(pending_of(sf, chain_of(5, 3)), (Counts{0, 3}));
  }
  EXPECT_EQ(pending_of(sf, chain_of(5, 3)), (Counts{0, 0}));
  EXPECT_EQ(sf.leaders(), 0u);
  EXPECT_EQ(sf.stats().expired, 0u);
}

TEST(SingleFlight, EndingALeaseExplicitlyRemovesItsEntriesOnce) {
  ManualClock clock;
  SingleFlight sf(1, {}, clock);
  auto lease = sf.lead(0, chain_of(5, 3));
  lease.end();
  EXPECT_FALSE(lease.active());
  EXPECT_EQ(pending_of(sf, chain_of(5, 3)), (Counts{0}));
  lease.end();  // harmless
  EXPECT_EQ(sf.leaders(), 0u);
}

TEST(SingleFlight, EntriesExpireAfterTimeoutEvenIfTheLeaseIsNeverDestroyed) {
  ManualClock clock;
  SingleFlight sf(2, {.timeout_ms = 1000}, clock);
  auto lease = sf.lead(0, chain_of(1, 3));
  clock.advance_ms(999);
  EXPECT_EQ(pending_of(sf, chain_of(1, 3)), (Counts{3, 0}));
  EXPECT_EQ(sf.leaders(), 1u);
  clock.advance_ms(1);
  EXPECT_EQ(pending_of(sf, chain_of(1, 3)), (Counts{0, 0}));
  EXPECT_EQ(sf.leaders(), 0u);  // purged
  EXPECT_EQ(sf.stats().expired, 1u);
}

TEST(SingleFlight, DestroyingAnExpiredLeaseLaterIsHarmless) {
  ManualClock clock;
  SingleFlight sf(2, {.timeout_ms = 1000}, clock);
  auto old = sf.lead(0, chain_of(1, 3));
  clock.advance_ms(1000);
  // A new leader purges the expired one and may reuse its slot for the same prefix.
  auto fresh = sf.lead(1, chain_of(1, 3));
  EXPECT_EQ(sf.leaders(), 1u);
  EXPECT_EQ(sf.stats().expired, 1u);
  old.end();  // must not remove the new leader's entries
  { SingleFlight::Lease gone = std::move(old); }
  EXPECT_EQ(pending_of(sf, chain_of(1, 3)), (Counts{0, 3}));
  EXPECT_EQ(sf.leaders(), 1u);
  EXPECT_EQ(sf.stats().expired, 1u);
}

TEST(SingleFlight, DestroyingALeaseWhoseSlotWasReusedDoesNotTouchTheNewLeader) {
  ManualClock clock;
  SingleFlight sf(2, {.capacity = 1, .timeout_ms = 1000}, clock);
  auto old = sf.lead(0, chain_of(1, 3));
  clock.advance_ms(1000);
  auto fresh = sf.lead(0, chain_of(50, 2));  // capacity 1: necessarily the same slot
  ASSERT_TRUE(fresh.active());
  old = SingleFlight::Lease();  // ends `old`
  EXPECT_EQ(pending_of(sf, chain_of(50, 2)), (Counts{2, 0}));
  EXPECT_EQ(sf.leaders(), 1u);
}

TEST(SingleFlight, TheTableRefusesLeadersBeyondCapacityAndCountsIt) {
  ManualClock clock;
  SingleFlight sf(2, {.capacity = 2}, clock);
  auto a = sf.lead(0, chain_of(10, 2));
  auto b = sf.lead(1, chain_of(20, 2));
  auto c = sf.lead(0, chain_of(30, 2));
  EXPECT_TRUE(a.active());
  EXPECT_TRUE(b.active());
  EXPECT_FALSE(c.active());
  EXPECT_EQ(pending_of(sf, chain_of(30, 2)), (Counts{0, 0}));
  EXPECT_EQ(sf.stats().refused_full, 1u);
  EXPECT_EQ(sf.stats().leads, 2u);
  a.end();  // room again
  auto d = sf.lead(0, chain_of(30, 2));
  EXPECT_TRUE(d.active());
  EXPECT_EQ(pending_of(sf, chain_of(30, 2)), (Counts{2, 0}));
  EXPECT_EQ(sf.leaders(), 2u);
}

TEST(SingleFlight, AFullTableAcceptsANewLeaderOnceAnOldOneExpired) {
  ManualClock clock;
  SingleFlight sf(1, {.capacity = 1, .timeout_ms = 100}, clock);
  auto a = sf.lead(0, chain_of(10, 2));
  EXPECT_FALSE(sf.lead(0, chain_of(20, 2)).active());
  clock.advance_ms(100);
  EXPECT_TRUE(sf.lead(0, chain_of(20, 2)).active());
  EXPECT_EQ(sf.stats().refused_full, 1u);
  EXPECT_EQ(sf.stats().expired, 1u);
}

TEST(SingleFlight, MovedFromLeasesDoNothing) {
  ManualClock clock;
  SingleFlight sf(2, {}, clock);
  auto a = sf.lead(0, chain_of(1, 3));
  SingleFlight::Lease b = std::move(a);
  EXPECT_FALSE(a.active());  // NOLINT(bugprone-use-after-move): the point of the test
  a.end();
  { SingleFlight::Lease c = std::move(a); }
  EXPECT_EQ(pending_of(sf, chain_of(1, 3)), (Counts{3, 0}));
  EXPECT_TRUE(b.active());
  SingleFlight::Lease d;
  d = std::move(b);
  EXPECT_FALSE(b.active());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(pending_of(sf, chain_of(1, 3)), (Counts{3, 0}));
  d.end();
  EXPECT_EQ(pending_of(sf, chain_of(1, 3)), (Counts{0, 0}));
}

TEST(SingleFlight, MoveAssigningOntoAnActiveLeaseEndsTheOverwrittenOne) {
  ManualClock clock;
  SingleFlight sf(2, {}, clock);
  auto a = sf.lead(0, chain_of(1, 3));
  auto b = sf.lead(1, chain_of(50, 2));
  a = std::move(b);
  EXPECT_EQ(pending_of(sf, chain_of(1, 3)), (Counts{0, 0}));
  EXPECT_EQ(pending_of(sf, chain_of(50, 2)), (Counts{0, 2}));
  EXPECT_EQ(sf.leaders(), 1u);
}

TEST(SingleFlight, DisabledConfigLeadsNothing) {
  ManualClock clock;
  SingleFlight sf(2, {.enabled = false}, clock);
  auto lease = sf.lead(0, chain_of(1, 3));
  EXPECT_FALSE(lease.active());
  EXPECT_EQ(pending_of(sf, chain_of(1, 3)), (Counts{0, 0}));
  EXPECT_EQ(sf.stats().leads, 0u);
  EXPECT_EQ(sf.stats().refused_full, 0u);
}

TEST(SingleFlight, AnEmptyChainLeadsNothing) {
  ManualClock clock;
  SingleFlight sf(2, {}, clock);
  EXPECT_FALSE(sf.lead(0, Chain{}).active());
  EXPECT_EQ(sf.leaders(), 0u);
}

TEST(SingleFlight, TwoLeadersOnDifferentEnginesWithTheSamePrefixAreBothVisibleAndEndingOneKeepsTheOther) {
  ManualClock clock;
  SingleFlight sf(3, {}, clock);
  auto a = sf.lead(0, chain_of(1, 4));
  auto b = sf.lead(2, chain_of(1, 6));
  EXPECT_EQ(pending_of(sf, chain_of(1, 6)), (Counts{4, 0, 6}));
  a.end();
  EXPECT_EQ(pending_of(sf, chain_of(1, 6)), (Counts{0, 0, 6}));
  auto c = sf.lead(0, chain_of(1, 2));
  b.end();
  EXPECT_EQ(pending_of(sf, chain_of(1, 6)), (Counts{2, 0, 0}));
}

TEST(SingleFlight, TwoLeadersOnTheSameEngineCountASharedFingerprintOnce) {
  ManualClock clock;
  SingleFlight sf(1, {}, clock);
  auto a = sf.lead(0, chain_of(1, 3));
  auto b = sf.lead(0, chain_of(1, 5));
  EXPECT_EQ(pending_of(sf, chain_of(1, 5)), (Counts{5}));
  b.end();
  EXPECT_EQ(pending_of(sf, chain_of(1, 5)), (Counts{3}));
}

TEST(SingleFlight, AnExpiredLeaderIsInvisibleWhileAnotherOnTheSameEngineStillCounts) {
  ManualClock clock;
  SingleFlight sf(2, {.timeout_ms = 100}, clock);
  auto old = sf.lead(0, chain_of(1, 6));
  clock.advance_ms(50);
  auto young = sf.lead(0, chain_of(1, 2));
  clock.advance_ms(50);  // `old` expired but is not purged yet (no lead() since)
  EXPECT_EQ(pending_of(sf, chain_of(1, 6)), (Counts{2, 0}));
}

TEST(SingleFlight, MaxBlocksCapsTheRegisteredLength) {
  ManualClock clock;
  SingleFlight sf(2, {.max_blocks = 4}, clock);
  auto lease = sf.lead(1, chain_of(1, 10));
  EXPECT_EQ(lease.blocks(), 4u);
  EXPECT_EQ(pending_of(sf, chain_of(1, 10)), (Counts{0, 4}));
  Chain tail = {5, 6};  // fingerprints past the cap were never registered
  EXPECT_EQ(pending_of(sf, tail), (Counts{0, 0}));
}

TEST(SingleFlight, SlotsAreReusedSoTheTableStaysBoundedOverManyLeaders) {
  ManualClock clock;
  SingleFlight sf(2, {.max_blocks = 3, .capacity = 4}, clock);
  for (uint64_t i = 0; i < 1000; ++i) {
    auto lease = sf.lead(i % 2, chain_of(i * 10, 3));
    ASSERT_TRUE(lease.active());
    EXPECT_EQ(pending_of(sf, chain_of(i * 10, 3))[i % 2], 3u);
  }
  EXPECT_EQ(sf.leaders(), 0u);
  EXPECT_EQ(sf.stats().leads, 1000u);
  EXPECT_EQ(sf.stats().refused_full, 0u);
}

// Several threads lead, query and end at once. Each thread's own prefix is unique to it, so while
// its lease lives (the clock stands still) it must see exactly its blocks on its engine; all
// threads also lead a shared prefix on their own engines, exercising shared fingerprint lists.
TEST(SingleFlight, ConcurrentLeadersFollowersAndEndsKeepTheTableConsistent) {
  constexpr size_t kThreads = 6;
  constexpr size_t kEngines = 3;
  constexpr int kRounds = 2000;
  ManualClock clock;
  SingleFlight sf(kEngines, {.max_blocks = 8, .capacity = 64}, clock);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const size_t engine = t % kEngines;
      const Chain shared = chain_of(1, 8);
      Counts out(kEngines);
      for (int r = 0; r < kRounds; ++r) {
        const Chain own = chain_of(1'000'000 * (t + 1) + 16 * static_cast<uint64_t>(r), 1 + r % 10);
        auto mine = sf.lead(engine, own);
        auto common = sf.lead(engine, Chain(shared.begin(), shared.begin() + 1 + r % 8));
        if (!mine.active() || !common.active()) {
          failures.fetch_add(1);  // capacity 64 > 2 leases x 6 threads: never full
          continue;
        }
        sf.pending(own, out);
        for (size_t e = 0; e < kEngines; ++e) {
          const uint32_t want = e == engine ? mine.blocks() : 0;
          if (out[e] != want) failures.fetch_add(1);
        }
        sf.pending(shared, out);
        if (out[engine] < common.blocks()) failures.fetch_add(1);
        if (r % 3 == 0) (void)sf.leaders();
        if (r % 2 == 0) mine.end();  // the rest end at scope exit
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(sf.leaders(), 0u);
  EXPECT_EQ(sf.stats().leads, 2u * kThreads * kRounds);
  EXPECT_EQ(pending_of(sf, chain_of(1, 8)), (Counts(kEngines, 0)));
}

// The same with a clock that keeps moving past the timeout, so purges race with ends.
TEST(SingleFlight, ConcurrentExpiryAndEndsNeverLoseOrDoubleCountLeaders) {
  constexpr size_t kThreads = 4;
  constexpr int kRounds = 3000;
  ManualClock clock;
  SingleFlight sf(2, {.max_blocks = 4, .capacity = 16, .timeout_ms = 5}, clock);
  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    while (!stop.load()) {
      clock.advance_ms(1);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Counts out(2);
      std::vector<SingleFlight::Lease> held;
      for (int r = 0; r < kRounds; ++r) {
        held.push_back(sf.lead(t % 2, chain_of(1 + r % 5, 4)));
        sf.pending(chain_of(1, 4), out);
        if (held.size() > 3) held.erase(held.begin());
      }
    });
  }
  for (auto& th : threads) th.join();
  stop = true;
  ticker.join();
  const auto s = sf.stats();
  EXPECT_EQ(s.leads + s.refused_full, kThreads * kRounds);
  EXPECT_EQ(sf.leaders(), 0u);
}

}  // namespace
}  // namespace ramjet::route
