#include "cache/index/approx_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <list>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace ramjet::cache {
namespace {

using Chain = std::vector<uint64_t>;

TEST(ApproxIndex, OverlapCountsLeadingFingerprintsAndStopsAtTheFirstMiss) {
  ApproxIndex index(2);
  index.observe(0, Chain{1, 2, 3});
  EXPECT_EQ(index.overlap(0, Chain{1, 2, 3, 4}), 3u);
  EXPECT_EQ(index.overlap(0, Chain{1, 2}), 2u);
  EXPECT_EQ(index.overlap(0, Chain{1, 9, 3}), 1u);
  EXPECT_EQ(index.overlap(0, Chain{9, 1, 2, 3}), 0u);
  EXPECT_EQ(index.overlap(0, Chain{}), 0u);
}

TEST(ApproxIndex, ObservingTeachesOnlyThatEngine) {
  ApproxIndex index(3);
  index.observe(1, Chain{7, 8});
  EXPECT_EQ(index.overlap(0, Chain{7, 8}), 0u);
  EXPECT_EQ(index.overlap(1, Chain{7, 8}), 2u);
  EXPECT_EQ(index.overlap(2, Chain{7, 8}), 0u);
  EXPECT_EQ(index.entries(1), 2u);
  EXPECT_EQ(index.entries(0), 0u);
}

TEST(ApproxIndex, BeyondCapacityTheLeastRecentlyObservedFingerprintIsEvicted) {
  ApproxIndex index(1, {.capacity = 3});
  index.observe(0, Chain{1, 2, 3});
  index.observe(0, Chain{4});
  EXPECT_EQ(index.entries(0), 3u);
  EXPECT_FALSE(index.contains(0, 1));
  EXPECT_TRUE(index.contains(0, 2));
  EXPECT_TRUE(index.contains(0, 4));
}

TEST(ApproxIndex, ObservingAgainRefreshesRecencyAndProtectsFromEviction) {
  ApproxIndex index(1, {.capacity = 3});
  index.observe(0, Chain{1, 2, 3});
  index.observe(0, Chain{1});
  index.observe(0, Chain{4});
  EXPECT_TRUE(index.contains(0, 1));
  EXPECT_FALSE(index.contains(0, 2));
}

TEST(ApproxIndex, ReadingOverlapDoesNotRefreshRecency) {
  ApproxIndex index(1, {.capacity = 2});
  index.observe(0, Chain{1, 2});
  EXPECT_EQ(index.overlap(0, Chain{1}), 1u);
  index.observe(0, Chain{3});
  EXPECT_FALSE(index.contains(0, 1));
}

TEST(ApproxIndex, EvictingAMiddleBlockShortensFutureOverlap) {
  ApproxIndex index(1, {.capacity = 4});
  index.observe(0, Chain{1, 2, 3});
  index.observe(0, Chain{1});  // 2 is now the least recently used
  index.observe(0, Chain{3});
  index.observe(0, Chain{5, 6});
  EXPECT_FALSE(index.contains(0, 2));
  EXPECT_EQ(index.overlap(0, Chain{1, 2, 3}), 1u);
}

TEST(ApproxIndex, ZeroCapacityHoldsNothing) {
  ApproxIndex index(1, {.capacity = 0});
  index.observe(0, Chain{1, 2});
  EXPECT_EQ(index.entries(0), 0u);
  EXPECT_EQ(index.overlap(0, Chain{1, 2}), 0u);
}

TEST(ApproxIndex, RepeatedFingerprintsInOneChainAreStoredOnce) {
  ApproxIndex index(1);
  index.observe(0, Chain{5, 5, 6, 5});
  EXPECT_EQ(index.entries(0), 2u);
}

TEST(ApproxIndex, AChainLongerThanCapacityKeepsOnlyItsTail) {
  // As the reference: the chain's own later blocks evict its head, so its overlap becomes 0.
  ApproxIndex index(1, {.capacity = 100});
  Chain chain;
  for (uint64_t i = 0; i < 250; ++i) chain.push_back(i * 7919);
  index.observe(0, chain);
  EXPECT_EQ(index.entries(0), 100u);
  EXPECT_EQ(index.overlap(0, chain), 0u);
  EXPECT_EQ(index.overlap(0, std::span(chain).subspan(150)), 100u);
}

TEST(ApproxIndex, ClearForgetsOneEngineAndItCanLearnAgain) {
  ApproxIndex index(2);
  index.observe(0, Chain{1});
  index.observe(1, Chain{1});
  index.clear(0);
  EXPECT_EQ(index.entries(0), 0u);
  EXPECT_EQ(index.entries(1), 1u);
  index.observe(0, Chain{2, 3});
  EXPECT_EQ(index.overlap(0, Chain{2, 3}), 2u);
}

// ---- differential test against a naive model ----

class NaiveLru {
 public:
  explicit NaiveLru(size_t capacity) : capacity_(capacity) {}
  void observe(const Chain& chain) {
    if (capacity_ == 0) return;
    for (uint64_t fp : chain) {
      if (auto it = where_.find(fp); it != where_.end()) order_.erase(it->second);
      order_.push_front(fp);
      where_[fp] = order_.begin();
      if (order_.size() > capacity_) {
        where_.erase(order_.back());
        order_.pop_back();
      }
    }
  }
  uint32_t overlap(const Chain& chain) const {
    uint32_t n = 0;
    while (n < chain.size() && where_.count(chain[n])) ++n;
    return n;
  }
  size_t entries() const { return where_.size(); }
  bool contains(uint64_t fp) const { return where_.count(fp) != 0; }
  void clear() {
    order_.clear();
    where_.clear();
  }

 private:
  size_t capacity_;
  std::list<uint64_t> order_;
  std::map<uint64_t, std::list<uint64_t>::iterator> where_;
};

TEST(ApproxIndex, BehavesExactlyLikeANaiveLruModelOverRandomOperations) {
  std::mt19937_64 rng(20261129);
  for (uint32_t capacity : {0u, 1u, 2u, 7u, 40u, 300u}) {
    constexpr size_t kEngines = 3;
    ApproxIndex index(kEngines, {.capacity = capacity});
    std::vector<NaiveLru> model(kEngines, NaiveLru(capacity));
    auto random_chain = [&] {
      Chain c(rng() % 24);
      for (auto& fp : c) fp = rng() % 96;  // a small universe: many hits, repeats and evictions
      return c;
    };
    for (int op = 0; op < 20000; ++op) {
      const size_t e = rng() % kEngines;
      const unsigned kind = rng() % 100;
      if (kind < 55) {
        Chain c = random_chain();
        index.observe(e, c);
        model[e].observe(c);
      } else if (kind < 99) {
        Chain c = random_chain();
        ASSERT_EQ(index.overlap(e, c), model[e].overlap(c))
            << "capacity " << capacity << " op " << op;
      } else {
        index.clear(e);
        model[e].clear();
      }
      ASSERT_EQ(index.entries(e), model[e].entries());
      if (op % 500 == 0) {
        for (uint64_t fp = 0; fp < 96; ++fp)
          ASSERT_EQ(index.contains(e, fp), model[e].contains(fp)) << fp;
      }
    }
  }
}

// ---- concurrency: one writer per engine, readers anywhere (run under the tsan preset) ----

TEST(ApproxIndex, ReadersOnOtherThreadsSeeOnlyPrefixesOfWhatWritersObserved) {
  constexpr size_t kEngines = 2;
  constexpr int kRounds = 2000;
  ApproxIndex index(kEngines, {.capacity = 512});
  // Writer e cycles through 50 distinct 100-block chains on its own engine while two readers
  // query both engines. The assertions are weak on purpose; the point is a data-race-free run
  // under ThreadSanitizer and a consistent index afterwards.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0};
  std::vector<std::thread> threads;
  for (size_t e = 0; e < kEngines; ++e) {
    threads.emplace_back([&, e] {
      for (int r = 0; r < kRounds; ++r) {
        Chain c(100);
        for (size_t i = 0; i < c.size(); ++i)
          c[i] = (e << 40) + static_cast<uint64_t>(r % 50) * 1000 + i;
        index.observe(e, c);
      }
    });
  }
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      Chain c(100);
      for (size_t i = 0; i < c.size(); ++i) c[i] = i;  // round 0 of engine 0
      while (!stop.load()) {
        for (size_t e = 0; e < kEngines; ++e) {
          const uint32_t n = index.overlap(e, c);
          EXPECT_LE(n, c.size());
          (void)index.entries(e);
        }
        reads.fetch_add(1);
      }
    });
  }
  threads[0].join();
  threads[1].join();
  stop.store(true);
  for (size_t i = 2; i < threads.size(); ++i) threads[i].join();
  EXPECT_GT(reads.load(), 0u);
  // 50 distinct chains of 100 per engine = 5000 > 512: the index is full and consistent.
  for (size_t e = 0; e < kEngines; ++e) EXPECT_EQ(index.entries(e), 512u);
  // The last round observed (r = 1999 -> 49) is fully present on each engine.
  for (size_t e = 0; e < kEngines; ++e) {
    Chain last(100);
    for (size_t i = 0; i < last.size(); ++i) last[i] = (e << 40) + 49 * 1000 + i;
    EXPECT_EQ(index.overlap(e, last), 100u);
  }
}

}  // namespace
}  // namespace ramjet::cache

namespace ramjet::cache {
namespace {

TEST(ApproxIndexHorizon, APrefixPastTheEnginesHorizonEarnsNothing) {
  ApproxIndex idx(1);
  const std::vector<uint64_t> a{1, 2, 3};
  idx.observe(0, a);
  EXPECT_EQ(idx.overlap(0, a), 3u);
  idx.set_horizon(0, 5);
  EXPECT_EQ(idx.overlap(0, a), 3u) << "nothing new since";
  idx.observe(0, std::vector<uint64_t>{10, 11});  // two new blocks: a's are 2..4 allocations old
  EXPECT_EQ(idx.overlap(0, a), 3u);
  idx.observe(0, std::vector<uint64_t>{12, 13});  // a's first block is now 5 allocations old
  EXPECT_EQ(idx.overlap(0, a), 0u) << "the chain stops at its first evicted block";
  EXPECT_EQ(idx.overlap(0, std::vector<uint64_t>{10, 11, 12}), 3u);
  // A hit refreshes the blocks it used (vLLM's LRU: they go to the back of the free queue).
  idx.observe(0, a);
  EXPECT_EQ(idx.overlap(0, a), 3u);
  // Refreshing blocks allocates nothing: no other entry ages.
  for (int i = 0; i < 10; ++i) idx.observe(0, std::vector<uint64_t>{10, 11, 12, 13});
  EXPECT_EQ(idx.overlap(0, a), 3u);
  idx.set_horizon(0, 0);
  EXPECT_EQ(idx.horizon(0), 0u);
}

TEST(ApproxIndexHorizon, NeverDeniesWhatANaiveLruOfTheEnginesPoolHolds) {
  // The engine as a naive LRU of `pool` blocks; ramjet's index (larger) with the horizon at the
  // pool. The horizon counts new allocations only (a hit on an older prefix also ages the others
  // in vLLM's free queue), so it may credit a block the pool has evicted, never deny one it holds;
  // with no hits on older prefixes (fresh chains only) the two agree exactly.
  std::mt19937 rng(3);
  const uint64_t pool = 40;
  ApproxIndex idx(1, ApproxIndexLimits{1000});
  idx.set_horizon(0, pool);
  std::vector<uint64_t> lru;  // most recent last
  auto use = [&](uint64_t fp) {
    auto it = std::find(lru.begin(), lru.end(), fp);
    if (it != lru.end()) lru.erase(it);
    lru.push_back(fp);
    if (lru.size() > pool) lru.erase(lru.begin());
  };
  for (int round = 0; round < 2000; ++round) {
    std::vector<uint64_t> chain(1 + rng() % 8);
    const uint64_t base = 100 * (rng() % 12);
    for (size_t i = 0; i < chain.size(); ++i) chain[i] = base + i;
    uint32_t naive = 0;
    while (naive < chain.size() && std::find(lru.begin(), lru.end(), chain[naive]) != lru.end()) ++naive;
    ASSERT_GE(idx.overlap(0, chain), naive) << "round " << round;
    idx.observe(0, chain);
    for (uint64_t fp : chain) use(fp);
  }
  // Fresh chains only: exact.
  ApproxIndex fresh(1, ApproxIndexLimits{1000});
  fresh.set_horizon(0, pool);
  lru.clear();
  std::vector<std::vector<uint64_t>> seen;
  for (uint64_t round = 0; round < 300; ++round) {
    std::vector<uint64_t> chain(1 + rng() % 8);
    for (size_t i = 0; i < chain.size(); ++i) chain[i] = 100000 + round * 10 + i;
    fresh.observe(0, chain);
    for (uint64_t fp : chain) use(fp);
    seen.push_back(chain);
    for (const auto& c : seen) {
      uint32_t naive = 0;
      while (naive < c.size() && std::find(lru.begin(), lru.end(), c[naive]) != lru.end()) ++naive;
      ASSERT_EQ(fresh.overlap(0, c), naive) << "round " << round;
    }
  }
}

}  // namespace
}  // namespace ramjet::cache
