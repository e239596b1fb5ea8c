// Microbenchmarks for issue 16's foundation (targets in docs/benchmarks.md):
//  - BM_DigestWords/BM_DigestChain vs BM_RawChain: digesting an 80K-token prompt's 16-token blocks
//    (HMAC-SHA256 each; target <= 0.5 ms), and the digest chain a lookup needs, against the raw
//    chain (XXH3 over the tokens).
//  - BM_SnapshotImport: a 36,612-block snapshot (the Rust version's 13.1 ms case; target <= 5 ms)
//    decoded (checksum, limits) and imported into a fresh digest inventory, construction included;
//    BM_SnapshotDecode and BM_SnapshotCapture split it, the latter on the companion's side.
//  - BM_DigestIndexMemory: bytes per block of the digest index (counters).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <numeric>
#include <random>

#include "cache/events/inventory.h"
#include "cache/index/block_digest.h"
#include "companion/snapshot.h"

namespace {

using namespace ramjet;
using cache::events::Inventory;

constexpr uint32_t kBlock = 16;
constexpr size_t kPromptTokens = 80 * 1024;
constexpr uint32_t kSnapshotBlocks = 36612;

std::shared_ptr<const cache::DigestKey> key() {
  std::array<uint8_t, 32> s{};
  std::iota(s.begin(), s.end(), uint8_t{1});
  return cache::DigestKey::from_secret(s);
}

std::vector<uint32_t> random_tokens(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> t(n);
  for (auto& x : t) x = static_cast<uint32_t>(rng() % 150000);
  return t;
}

void BM_DigestWords(benchmark::State& state) {
  const auto k = key();
  const auto t = random_tokens(kPromptTokens, 7);
  std::vector<uint32_t> words;
  for (auto _ : state) {
    words.clear();
    k->digest_words(t, kBlock, words);
    benchmark::DoNotOptimize(words.data());
  }
  state.counters["blocks"] = static_cast<double>(t.size() / kBlock);
  state.counters["ns_per_block"] = benchmark::Counter(static_cast<double>(t.size() / kBlock),
                                                       benchmark::Counter::kIsIterationInvariantRate |
                                                           benchmark::Counter::kInvert);
}
BENCHMARK(BM_DigestWords)->Unit(benchmark::kMicrosecond);

void BM_DigestChain(benchmark::State& state) {
  const auto k = key();
  const auto t = random_tokens(kPromptTokens, 7);
  std::vector<uint64_t> chain;
  for (auto _ : state) {
    chain.clear();
    cache::digest_chain(*k, t, kBlock, cache::exact_root_seed(kBlock), chain);
    benchmark::DoNotOptimize(chain.data());
  }
}
BENCHMARK(BM_DigestChain)->Unit(benchmark::kMicrosecond);

void BM_RawChain(benchmark::State& state) {
  const auto t = random_tokens(kPromptTokens, 7);
  std::vector<uint64_t> chain;
  for (auto _ : state) {
    chain.clear();
    cache::exact_chain(t, kBlock, cache::exact_root_seed(kBlock), chain);
    benchmark::DoNotOptimize(chain.data());
  }
}
BENCHMARK(BM_RawChain)->Unit(benchmark::kMicrosecond);

// A digest inventory of exactly kSnapshotBlocks blocks: 16 system prompts of 64 blocks, sessions
// of 8..200 blocks below them, a few duplicate copies (a second rank), some removals.
void fill(Inventory& inv) {
  std::mt19937_64 rng(3);
  std::vector<std::vector<uint32_t>> systems;
  // Hashes as vLLM's are: 64 random bits (sequential small ints would collide across ranks in
  // Inventory::removal_key, whose XXH3 seed is the rank and group).
  std::mt19937_64 hashes(11);
  std::vector<uint64_t> sys_last;
  cache::kv::EventBatch b;
  for (int s = 0; s < 16; ++s) {
    cache::kv::BlockStored e;
    e.token_ids = random_tokens(64 * kBlock, 100 + static_cast<uint64_t>(s));
    for (int i = 0; i < 64; ++i) e.block_hashes.push_back(cache::kv::BlockHash::from_uint(hashes()));
    sys_last.push_back(e.block_hashes.back().low64());
    e.block_size = kBlock;
    b.events.push_back(std::move(e));
  }
  (void)inv.apply(b);
  b.data_parallel_rank = 1;  // the system prompts on a second rank too: the same blocks, second copies
  (void)inv.apply(b);
  uint64_t session = 0;
  while (inv.shard().blocks() < kSnapshotBlocks) {
    const uint32_t want = std::min<uint32_t>(8 + static_cast<uint32_t>(rng() % 193), kSnapshotBlocks - inv.shard().blocks());
    cache::kv::EventBatch sb;
    cache::kv::BlockStored e;
    e.parent_block_hash = cache::kv::BlockHash::from_uint(sys_last[rng() % sys_last.size()]);
    e.token_ids = random_tokens(want * kBlock, 1000 + session++);
    for (uint32_t i = 0; i < want; ++i) e.block_hashes.push_back(cache::kv::BlockHash::from_uint(hashes()));
    e.block_size = kBlock;
    sb.events.push_back(e);
    if (session % 10 == 0) sb.data_parallel_rank = 1;
    if (auto err = inv.apply(sb)) {
      std::fprintf(stderr, "fill: %s\n", std::string(cache::reason(*err)).c_str());
      std::abort();
    }
    if (session % 7 == 0) {  // an eviction of a session's tail
      cache::kv::EventBatch rb;
      cache::kv::BlockRemoved r;
      r.block_hashes.push_back(e.block_hashes.back());
      rb.events.push_back(r);
      rb.data_parallel_rank = sb.data_parallel_rank;
      (void)inv.apply(rb);
    }
  }
}

std::string snapshot_bytes(const Inventory& inv) {
  companion::SnapshotHeader h;
  h.key_id = inv.digest_key()->key_id();
  h.incarnation = "engine-0/bench";
  h.last_event_sequence = 123456;
  return companion::encode_snapshot(companion::capture_snapshot(inv, h));
}

void BM_SnapshotImport(benchmark::State& state) {
  const auto k = key();
  Inventory source({}, k);
  fill(source);
  const std::string bytes = snapshot_bytes(source);
  const std::span<const uint8_t> in(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  for (auto _ : state) {
    Inventory fresh({}, k);
    auto s = companion::decode_snapshot(in);
    if (!s.ok() || companion::import_snapshot(*s, fresh)) {
      state.SkipWithError("import failed");
      break;
    }
    benchmark::DoNotOptimize(fresh.shard().blocks());
  }
  state.counters["blocks"] = source.shard().blocks();
  state.counters["removal_keys"] = source.shard().removal_keys();
  state.counters["snapshot_bytes"] = static_cast<double>(bytes.size());
}
BENCHMARK(BM_SnapshotImport)->Unit(benchmark::kMillisecond);

void BM_SnapshotDecode(benchmark::State& state) {
  const auto k = key();
  Inventory source({}, k);
  fill(source);
  const std::string bytes = snapshot_bytes(source);
  const std::span<const uint8_t> in(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  for (auto _ : state) {
    auto s = companion::decode_snapshot(in);
    benchmark::DoNotOptimize(s.ok());
  }
}
BENCHMARK(BM_SnapshotDecode)->Unit(benchmark::kMillisecond);

void BM_SnapshotCapture(benchmark::State& state) {
  const auto k = key();
  Inventory source({}, k);
  fill(source);
  for (auto _ : state) benchmark::DoNotOptimize(snapshot_bytes(source).size());
}
BENCHMARK(BM_SnapshotCapture)->Unit(benchmark::kMillisecond);

void BM_DigestIndexMemory(benchmark::State& state) {
  const auto k = key();
  Inventory inv({}, k);
  fill(inv);
  for (auto _ : state) benchmark::DoNotOptimize(inv.shard().table_bytes());
  const auto& s = inv.shard();
  state.counters["table_bytes_per_block_limit"] = static_cast<double>(s.table_bytes()) / s.limits().max_blocks;
  state.counters["snapshot_bytes_per_block"] = static_cast<double>(snapshot_bytes(inv).size()) / s.blocks();
}
BENCHMARK(BM_DigestIndexMemory)->Iterations(1);

}  // namespace
