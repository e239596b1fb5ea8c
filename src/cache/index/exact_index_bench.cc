// Microbenchmarks for cache/index/exact_index (issue targets in docs/benchmarks.md):
//  - BM_ExactApply: event application, 16-token blocks, a full shard in steady state (every
//    stored block evicts an old one), in blocks per second on one core.
//  - BM_ExactLookup/8 engines vs BM_Xxh3Floor: a request's lookup of an 80K-token prompt over 8
//    engines (chain keys + a match per engine) against XXH3-hashing the same token IDs once.
//  - BM_ExactMemory: bytes per block of a full shard (counter bytes_per_block).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include <xxhash.h>

#include "cache/index/exact_index.h"

namespace {

using ramjet::cache::exact_chain;
using ramjet::cache::exact_root_seed;
using ramjet::cache::ExactShard;

constexpr uint32_t kBlock = 16;

std::vector<uint32_t> random_tokens(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> t(n);
  for (auto& x : t) x = static_cast<uint32_t>(rng() % 150000);
  return t;
}

// Sessions of `blocks_per_store` blocks stored below a shared 64-block system prompt; once the
// shard holds `resident` session blocks, each new session evicts the oldest one, its tail first
// (vLLM frees a request's blocks in reverse order, and its free queue evicts the least recently
// freed first), as one batch of BlockRemoved events (the inventory hands a batch's consecutive
// removals to one remove()). items = blocks applied: stored plus removed.
void BM_ExactApply(benchmark::State& state) {
  const uint32_t per_store = static_cast<uint32_t>(state.range(0));
  const uint32_t resident = 200000;
  ExactShard shard({.max_blocks = resident + 1024});
  const auto system = random_tokens(64 * kBlock, 1);
  std::vector<uint64_t> sys_keys(64);
  for (uint32_t i = 0; i < 64; ++i) sys_keys[i] = 1'000'000'000ull + i;
  const uint64_t root = exact_root_seed(kBlock);
  if (shard.store(std::nullopt, root, sys_keys, system, kBlock)) state.SkipWithError("system prompt");
  // A pool of session bodies, made new per use by their first token.
  std::vector<std::vector<uint32_t>> bodies;
  for (uint64_t s = 0; s < 64; ++s) bodies.push_back(random_tokens(per_store * kBlock, 100 + s));
  const size_t sessions = resident / per_store;
  std::vector<uint64_t> ring(sessions * per_store);  // removal keys of the live sessions
  uint64_t next_key = 1, stored = 0, removed = 0;
  for (auto _ : state) {
    const size_t slot = stored % sessions;
    std::span<uint64_t> keys(&ring[slot * per_store], per_store);
    if (stored >= sessions) {  // evict the session this slot held, tail first, in one batch
      std::reverse(keys.begin(), keys.end());
      removed += per_store - shard.remove(keys);
    }
    auto& body = bodies[stored % bodies.size()];
    body[0] = static_cast<uint32_t>(stored);
    for (auto& k : keys) k = next_key++;
    if (shard.store(sys_keys.back(), root, keys, body, kBlock)) {
      state.SkipWithError("store failed");
      break;
    }
    ++stored;
  }
  state.SetItemsProcessed(static_cast<int64_t>(stored * per_store + removed));
  state.counters["resident"] = shard.resident_blocks();
}
BENCHMARK(BM_ExactApply)->Arg(1)->Arg(16)->Arg(128);

constexpr size_t kPromptTokens = 80 * 1024;

void BM_Xxh3Floor(benchmark::State& state) {
  const auto t = random_tokens(kPromptTokens, 7);
  for (auto _ : state) benchmark::DoNotOptimize(XXH3_64bits(t.data(), t.size() * sizeof(uint32_t)));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * t.size() * sizeof(uint32_t)));
}
BENCHMARK(BM_Xxh3Floor);

// Eight engines: engine e holds the first (e + 1) / 8 of the prompt, among 100K other blocks.
// `offloaded`: each engine's CPU tier holds its part of the prompt too and its GPU kept the first
// half only (a lookup then gallops over the GPU and GPU-or-CPU runs as well).
void exact_lookup(benchmark::State& state, size_t engines, bool offloaded) {
  const auto t = random_tokens(kPromptTokens, 7);
  const uint64_t root = exact_root_seed(kBlock);
  std::vector<uint64_t> chain;
  exact_chain(t, kBlock, root, chain);
  std::vector<std::unique_ptr<ExactShard>> shards;
  uint64_t next_key = 1;
  for (size_t e = 0; e < engines; ++e) {
    shards.push_back(std::make_unique<ExactShard>(ramjet::cache::ExactShardLimits{.max_blocks = 131072}));
    for (uint64_t s = 0; s < 100; ++s) {  // other sessions' 1,000 blocks each
      const auto other = random_tokens(1000 * kBlock, 1000 * e + s + 11);
      std::vector<uint64_t> keys(1000);
      for (auto& k : keys) k = next_key++;
      if (shards[e]->store(std::nullopt, root, keys, other, kBlock)) state.SkipWithError("filler");
    }
    const size_t held = chain.size() * (e + 1) / engines;
    std::vector<uint64_t> keys(held);
    for (auto& k : keys) k = next_key++;
    if (shards[e]->store(std::nullopt, root, keys, std::span<const uint32_t>(t).first(held * kBlock), kBlock)) {
      state.SkipWithError("prompt");
    }
    if (offloaded) {
      uint32_t unknown = 0;
      if (shards[e]->attach(keys, ramjet::cache::Tier::kCpu, unknown) || unknown != 0) state.SkipWithError("cpu");
      shards[e]->remove(std::span<const uint64_t>(keys).subspan(held / 2));
    }
  }
  std::vector<uint64_t> c;
  c.reserve(chain.size());
  uint64_t total = 0;
  for (auto _ : state) {
    c.clear();
    exact_chain(t, kBlock, root, c);
    for (auto& s : shards) total += s->match(c).value_or(0);
  }
  benchmark::DoNotOptimize(total);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * t.size() * sizeof(uint32_t)));
}
void BM_ExactLookup(benchmark::State& state) { exact_lookup(state, static_cast<size_t>(state.range(0)), false); }
BENCHMARK(BM_ExactLookup)->Arg(1)->Arg(8);
// The same with half of every engine's part of the prompt offloaded to CPU (three gallops).
void BM_ExactLookupTiered(benchmark::State& state) { exact_lookup(state, static_cast<size_t>(state.range(0)), true); }
BENCHMARK(BM_ExactLookupTiered)->Arg(8);

// The chain alone (what a lookup pays before its probes).
void BM_ExactChain(benchmark::State& state) {
  const auto t = random_tokens(kPromptTokens, 7);
  const uint64_t root = exact_root_seed(kBlock);
  std::vector<uint64_t> c;
  c.reserve(t.size() / kBlock);
  for (auto _ : state) {
    c.clear();
    exact_chain(t, kBlock, root, c);
    benchmark::DoNotOptimize(c.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * t.size() * sizeof(uint32_t)));
}
BENCHMARK(BM_ExactChain);

// A shard filled to its limit: allocated bytes / blocks held.
void BM_ExactMemory(benchmark::State& state) {
  const uint32_t limit = 262144;
  ExactShard shard({.max_blocks = limit});
  const auto t = random_tokens(static_cast<size_t>(limit) * kBlock, 3);
  std::vector<uint64_t> keys(limit);
  for (uint32_t i = 0; i < limit; ++i) keys[i] = i + 1;
  // 256 sessions of 1,024 blocks each, under the root.
  const uint64_t root = exact_root_seed(kBlock);
  for (uint32_t s = 0; s < 256; ++s) {
    if (shard.store(std::nullopt, root, std::span<const uint64_t>(keys).subspan(s * 1024, 1024),
                    std::span<const uint32_t>(t).subspan(static_cast<size_t>(s) * 1024 * kBlock, 1024 * kBlock), kBlock)) {
      state.SkipWithError("fill");
    }
  }
  for (auto _ : state) benchmark::DoNotOptimize(shard.blocks());
  state.counters["blocks"] = shard.blocks();
  state.counters["bytes_per_block"] = static_cast<double>(shard.table_bytes()) / shard.blocks();
}
BENCHMARK(BM_ExactMemory)->Iterations(1);

}  // namespace
