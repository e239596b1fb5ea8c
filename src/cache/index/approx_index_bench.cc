// Microbenchmarks for cache/index/approx_index: the per-engine overlap read routing does for
// every candidate, and the observe() a completed response does. Threads(2) runs two readers on
// one engine's shard (the contended case) and a reader against a concurrent writer.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "cache/index/approx_index.h"

namespace {

using ramjet::cache::ApproxIndex;

std::vector<uint64_t> chain_of(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> c(n);
  for (auto& fp : c) fp = rng();
  return c;
}

// A full index (capacity 100k) holding `chain`; overlap walks the whole chain.
void BM_OverlapWarm(benchmark::State& state) {
  static ApproxIndex* index = nullptr;
  const auto chain = chain_of(static_cast<size_t>(state.range(0)), 1);
  if (state.thread_index() == 0) {
    index = new ApproxIndex(1);
    for (uint64_t s = 2; s < 100; ++s) index->observe(0, chain_of(1024, s));
    index->observe(0, chain);
  }
  for (auto _ : state) benchmark::DoNotOptimize(index->overlap(0, chain));
  state.SetItemsProcessed(state.iterations() * state.range(0));
  if (state.thread_index() == 0) {
    delete index;
    index = nullptr;
  }
}

void BM_OverlapColdMiss(benchmark::State& state) {
  ApproxIndex index(1);
  index.observe(0, chain_of(4096, 3));
  const auto chain = chain_of(1024, 4);
  for (auto _ : state) benchmark::DoNotOptimize(index.overlap(0, chain));
}

// Observing 1024 new fingerprints into a full index: every one evicts.
void BM_ObserveEvicting(benchmark::State& state) {
  ApproxIndex index(1);
  uint64_t seed = 10;
  for (; seed < 110; ++seed) index.observe(0, chain_of(1024, seed));
  std::vector<std::vector<uint64_t>> chains;
  for (int i = 0; i < 64; ++i) chains.push_back(chain_of(1024, seed++));
  size_t i = 0;
  for (auto _ : state) index.observe(0, chains[i++ % chains.size()]);
  state.SetItemsProcessed(state.iterations() * 1024);
}

// Re-observing a chain already present (the common case for a warm conversation).
void BM_ObserveTouching(benchmark::State& state) {
  ApproxIndex index(1);
  const auto chain = chain_of(1024, 5);
  index.observe(0, chain);
  for (auto _ : state) index.observe(0, chain);
  state.SetItemsProcessed(state.iterations() * 1024);
}

// Thread 0 writes (observe 32 new blocks), the other threads read a 32-block overlap.
void BM_OverlapWhileObserving(benchmark::State& state) {
  static ApproxIndex* index = nullptr;
  if (state.thread_index() == 0) {
    index = new ApproxIndex(1);
    for (uint64_t s = 2; s < 100; ++s) index->observe(0, chain_of(1024, s));
  }
  const auto chain = chain_of(32, 1000 + static_cast<uint64_t>(state.thread_index()));
  for (auto _ : state) {
    if (state.thread_index() == 0) {
      index->observe(0, chain);
    } else {
      benchmark::DoNotOptimize(index->overlap(0, chain));
    }
  }
  if (state.thread_index() == 0) {
    delete index;
    index = nullptr;
  }
}

}  // namespace

BENCHMARK(BM_OverlapWarm)->Arg(32)->Arg(1024)->Threads(1)->Threads(2);
BENCHMARK(BM_OverlapColdMiss);
BENCHMARK(BM_ObserveEvicting)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ObserveTouching)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_OverlapWhileObserving)->Threads(2);
