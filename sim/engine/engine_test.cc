#include "sim/engine/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "cache/kv/block_hash.h"
#include "sim/engine/engine_core.h"
#include "sim/engine/timing.h"

namespace ramjet::sim {
namespace {

struct Recorder : KvEventSink {
  std::vector<std::pair<double, std::vector<KvEvent>>> batches;
  void publish(double ts, std::vector<KvEvent> events) override {
    batches.emplace_back(ts, std::move(events));
  }
  template <typename T>
  std::vector<T> all() const {
    std::vector<T> out;
    for (const auto& [ts, events] : batches) {
      for (const auto& e : events) {
        if (const T* t = std::get_if<T>(&e)) out.push_back(*t);
      }
    }
    return out;
  }
};

EngineConfig tiny() { return *preset("tiny"); }

std::vector<uint32_t> seq_tokens(uint32_t n, uint32_t base = 5000) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = base + i;
  return t;
}

// Steps until idle; returns every output.
template <typename E>
std::vector<RequestOutput> drain(E& engine, double* now = nullptr, int max_steps = 100000) {
  std::vector<RequestOutput> all;
  double t = now != nullptr ? *now : 0.0;
  for (int i = 0; i < max_steps && !engine.idle(); ++i) {
    StepResult r = engine.step(t);
    t += r.duration_s;
    all.insert(all.end(), r.outputs.begin(), r.outputs.end());
  }
  if (now != nullptr) *now = t;
  return all;
}

const RequestOutput* first_output(const std::vector<RequestOutput>& outs, uint64_t id) {
  for (const auto& o : outs) {
    if (o.id == id && o.prefill_done) return &o;
  }
  return nullptr;
}

TEST(Engine, RepeatedPromptHitsThePrefixCacheAndReportsCachedTokens) {
  Engine engine(tiny(), nullptr);
  ASSERT_TRUE(engine.add_request(1, seq_tokens(100), 4));
  auto outs = drain(engine);
  ASSERT_NE(first_output(outs, 1), nullptr);
  EXPECT_EQ(first_output(outs, 1)->cached_tokens, 0u);
  ASSERT_TRUE(engine.add_request(2, seq_tokens(100), 4));
  outs = drain(engine);
  ASSERT_NE(first_output(outs, 2), nullptr);
  EXPECT_EQ(first_output(outs, 2)->cached_tokens, 96u);
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.prefix_cache_queries, 200u);
  EXPECT_EQ(s.prefix_cache_hits, 96u);
  EXPECT_EQ(s.prompt_tokens, 200u);
  EXPECT_EQ(s.generation_tokens, 8u);
}

TEST(Engine, CreatedCacheTokensAreThePromptsCachedBlocksAtTheFirstOutputMinusTheHit) {
  // vLLM 0.32 PrefillStats.finalize: min(estimate_cached_tokens, prompt) - num_cached_tokens.
  Engine engine(tiny(), nullptr);
  ASSERT_TRUE(engine.add_request(1, seq_tokens(100), 4));
  auto outs = drain(engine);
  EXPECT_EQ(first_output(outs, 1)->created_cache_tokens, 96u) << "6 full blocks written";
  for (const auto& o : outs) EXPECT_EQ(o.created_cache_tokens, o.new_tokens || o.finish != FinishReason::kNone ? 96u : 0u);
  ASSERT_TRUE(engine.add_request(2, seq_tokens(100), 4));
  outs = drain(engine);
  EXPECT_EQ(first_output(outs, 2)->cached_tokens, 96u);
  EXPECT_EQ(first_output(outs, 2)->created_cache_tokens, 0u);
  // A fully cached prompt recomputes (and caches again) its last block.
  ASSERT_TRUE(engine.add_request(3, seq_tokens(64, 7000), 1));
  drain(engine);
  ASSERT_TRUE(engine.add_request(4, seq_tokens(64, 7000), 1));
  outs = drain(engine);
  EXPECT_EQ(first_output(outs, 4)->cached_tokens, 48u);
  EXPECT_EQ(first_output(outs, 4)->created_cache_tokens, 16u);
}

TEST(Engine, AWaitingRequestStartsOnlyWhenThePoolCouldHoldItsWholePrompt) {
  // vLLM 0.32's scheduler_reserve_full_isl: admission needs room for the whole sequence, not
  // just the first chunk, so a long prompt waits instead of prefilling into a full pool.
  EngineConfig cfg = tiny();
  cfg.num_gpu_blocks = 11;  // 10 usable blocks of 16
  cfg.max_num_batched_tokens = 32;
  EngineCore engine(cfg, nullptr);
  ASSERT_TRUE(engine.add_request(1, seq_tokens(64, 1000), 40));  // grows to 104 tokens: 7 blocks
  ASSERT_TRUE(engine.add_request(2, seq_tokens(96, 3000), 2));   // 6 blocks; a 31-token chunk needs 2
  int r1_finished = -1, r2_first = -1;
  for (int step = 0; step < 1000 && !engine.idle(); ++step) {
    for (const auto& o : engine.step(0).outputs) {
      if (o.id == 1 && o.finish != FinishReason::kNone) r1_finished = step;
      if (o.id == 2 && r2_first < 0) r2_first = step;
    }
  }
  EXPECT_GE(r1_finished, 0);
  EXPECT_GT(r2_first, r1_finished) << "request 2 waited for the blocks of its whole prompt";
  EXPECT_EQ(engine.stats().preemptions, 0u);
}

TEST(Engine, MaxLorasSkipsAnotherAdaptersRequestUntilASlotDrainsAndReportsTheAdapters) {
  // vLLM's scheduler: with max_loras adapters in the running batch, a waiting request of another
  // adapter is skipped (keeping its place); a base-model request and one of a running adapter
  // are not.
  EngineConfig cfg = tiny();
  cfg.max_loras = 1;
  EngineCore engine(cfg, nullptr);
  const CacheNamespace a{"a", 1, "", "/a"}, b{"b", 2, "", "/b"};
  ASSERT_TRUE(engine.add_request(1, seq_tokens(32, 1000), 30, a));
  ASSERT_TRUE(engine.add_request(2, seq_tokens(32, 2000), 2, b));
  ASSERT_TRUE(engine.add_request(3, seq_tokens(32, 3000), 2));     // base model
  ASSERT_TRUE(engine.add_request(4, seq_tokens(32, 4000), 2, a));  // the running adapter
  engine.step(0);
  EngineStats st = engine.stats();
  EXPECT_EQ(st.running, 3u);
  EXPECT_EQ(st.waiting, 1u);
  EXPECT_EQ(st.loras, (std::vector<std::string>{"a", "b"}));
  int r1_finished = -1, r2_first = -1;
  for (int step = 1; step < 1000 && !engine.idle(); ++step) {
    for (const auto& o : engine.step(0).outputs) {
      if (o.id == 1 && o.finish != FinishReason::kNone) r1_finished = step;
      if (o.id == 2 && r2_first < 0) r2_first = step;
    }
  }
  EXPECT_GE(r1_finished, 0);
  EXPECT_GT(r2_first, r1_finished) << "adapter b waited for adapter a's slot";
  EXPECT_TRUE(engine.stats().loras.empty());
  // Without LoRA (max_loras 0) nothing waits for a slot and nothing is reported.
  EngineCore plain(tiny(), nullptr);
  ASSERT_TRUE(plain.add_request(1, seq_tokens(32, 1000), 30, a));
  ASSERT_TRUE(plain.add_request(2, seq_tokens(32, 2000), 2, b));
  plain.step(0);
  EXPECT_EQ(plain.stats().running, 2u);
  EXPECT_TRUE(plain.stats().loras.empty());
}

TEST(Engine, FullyCachedPromptRecomputesItsLastBlockAndStoresADuplicate) {
  Recorder rec;
  Engine engine(tiny(), &rec);
  ASSERT_TRUE(engine.add_request(1, seq_tokens(64), 1));
  drain(engine);
  const auto first = rec.all<BlockStored>();
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(first[0].block_hashes.size(), 4u);
  rec.batches.clear();
  ASSERT_TRUE(engine.add_request(2, seq_tokens(64), 1));
  const auto outs = drain(engine);
  EXPECT_EQ(first_output(outs, 2)->cached_tokens, 48u);
  const auto again = rec.all<BlockStored>();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].parent_block_hash, first[0].block_hashes[2]);
  EXPECT_EQ(again[0].block_hashes, (std::vector<BlockHash>{first[0].block_hashes[3]}));
  EXPECT_EQ(engine.stats().cached_blocks, 5u) << "two copies of the last block";
}

TEST(Engine, ChunkedPrefillSplitsALongPromptWithinTheTokenBudget) {
  EngineConfig cfg = tiny();
  cfg.max_num_batched_tokens = 64;
  Engine engine(cfg, nullptr);
  ASSERT_TRUE(engine.add_request(1, seq_tokens(40, 100), 50));
  engine.step(0);  // request 1 prefilled, now decoding
  ASSERT_TRUE(engine.add_request(2, seq_tokens(200, 900), 5));
  std::vector<uint32_t> scheduled;
  bool done2 = false;
  while (!done2) {
    StepResult r = engine.step(0);
    EXPECT_LE(r.scheduled_tokens, 64u);
    scheduled.push_back(r.scheduled_tokens);
    for (const auto& o : r.outputs) done2 |= o.id == 2 && o.prefill_done;
    ASSERT_LT(scheduled.size(), 10u);
  }
  // 1 decode + 63 prompt tokens per step: 63, 63, 63, then the last 11.
  EXPECT_EQ(scheduled, (std::vector<uint32_t>{64, 64, 64, 12}));
}

TEST(Engine, PreemptionHappensWhenThePoolIsExhaustedAndEveryRequestStillFinishes) {
  EngineConfig cfg = tiny();
  cfg.num_gpu_blocks = 20;  // 19 usable blocks = 304 tokens
  EngineCore engine(cfg, nullptr);
  for (uint64_t id = 1; id <= 4; ++id) {
    ASSERT_TRUE(engine.add_request(id, seq_tokens(50, static_cast<uint32_t>(id) * 1000), 60));
  }
  std::map<uint64_t, uint32_t> generated;
  std::map<uint64_t, FinishReason> finish;
  for (int i = 0; i < 10000 && !engine.idle(); ++i) {
    for (const auto& o : engine.step(0).outputs) {
      generated[o.id] += o.new_tokens;
      if (o.finish != FinishReason::kNone) finish[o.id] = o.finish;
    }
    ASSERT_EQ(engine.pool().check_invariants(), "");
  }
  EXPECT_TRUE(engine.idle());
  EXPECT_GT(engine.stats().preemptions, 0u);
  for (uint64_t id = 1; id <= 4; ++id) {
    EXPECT_EQ(generated[id], 60u);
    EXPECT_EQ(finish[id], FinishReason::kLength);
  }
  EXPECT_EQ(engine.pool().num_free(), engine.pool().usable_blocks());
}

TEST(Engine, EachStoredEventChainsFromItsParentAndCarriesBlockSizeTokensPerHash) {
  Recorder rec;
  EngineConfig cfg = tiny();
  Engine engine(cfg, &rec);
  ASSERT_TRUE(engine.add_request(1, seq_tokens(70), 100));  // prompt and generated blocks
  ASSERT_TRUE(engine.add_request(2, seq_tokens(33, 7000), 40));
  double now = 0;
  size_t steps_with_events = 0;
  while (!engine.idle()) {
    const size_t before = rec.batches.size();
    StepResult r = engine.step(now);
    now += r.duration_s;
    if (rec.batches.size() == before) continue;
    ++steps_with_events;
    size_t stored = 0;
    for (const auto& e : rec.batches.back().second) stored += std::holds_alternative<BlockStored>(e);
    EXPECT_LE(stored, r.outputs.size()) << "at most one BlockStored per request per step";
  }
  EXPECT_GT(steps_with_events, 5u);
  cache::kv::BlockHasher hasher(cache::kv::HashAlgo::kSha256Cbor, "0");
  std::set<BlockHash> seen;
  for (const BlockStored& s : rec.all<BlockStored>()) {
    ASSERT_EQ(s.token_ids.size(), s.block_hashes.size() * cfg.block_size);
    EXPECT_EQ(s.block_size, cfg.block_size);
    if (s.parent_block_hash) {
      EXPECT_TRUE(seen.contains(*s.parent_block_hash));
    }
    BlockHash parent = s.parent_block_hash.value_or(hasher.none_hash());
    for (size_t i = 0; i < s.block_hashes.size(); ++i) {
      parent = hasher.hash_block(
          parent, std::span<const uint32_t>(s.token_ids).subspan(i * cfg.block_size, cfg.block_size));
      EXPECT_EQ(parent, s.block_hashes[i]);
      seen.insert(parent);
    }
  }
  // Request 1: 70 + 100 tokens -> 10 full blocks (the 170th token is never computed).
  EXPECT_EQ(seen.size(), 10u + 4u);
}

TEST(Engine, ASingleDecodingRequestStoresEachNewlyFullBlockOnce) {
  Recorder rec;
  Engine engine(tiny(), &rec);
  ASSERT_TRUE(engine.add_request(1, seq_tokens(20), 200));
  drain(engine);
  const auto stored = rec.all<BlockStored>();
  ASSERT_EQ(stored.size(), 13u);  // 219 computed tokens -> 13 full blocks, one per step
  for (size_t i = 1; i < stored.size(); ++i) {
    EXPECT_EQ(stored[i].parent_block_hash, stored[i - 1].block_hashes.back());
    EXPECT_EQ(stored[i].block_hashes.size(), 1u);
  }
  for (const auto& [ts, events] : rec.batches) EXPECT_EQ(events.size(), 1u);
}

TEST(Engine, EvictionRemovesOnlyPreviouslyStoredHashes) {
  Recorder rec;
  EngineConfig cfg = tiny();
  cfg.num_gpu_blocks = 16;
  Engine engine(cfg, &rec);
  for (uint64_t id = 1; id <= 12; ++id) {
    ASSERT_TRUE(engine.add_request(id, seq_tokens(64, static_cast<uint32_t>(id) * 100), 8));
    drain(engine);
  }
  std::map<BlockHash, int> live;
  size_t removed = 0;
  for (const auto& [ts, events] : rec.batches) {
    for (const auto& e : events) {
      if (const auto* s = std::get_if<BlockStored>(&e)) {
        for (const auto& h : s->block_hashes) ++live[h];
      } else if (const auto* r = std::get_if<BlockRemoved>(&e)) {
        ASSERT_EQ(r->block_hashes.size(), 1u) << "one BlockRemoved per evicted block";
        ASSERT_GT(live[r->block_hashes[0]], 0) << "removed a hash that was never stored";
        --live[r->block_hashes[0]];
        ++removed;
      }
    }
  }
  EXPECT_GT(removed, 0u);
  size_t resident = 0;
  for (const auto& [h, n] : live) resident += static_cast<size_t>(n);
  EXPECT_EQ(resident, engine.stats().cached_blocks);
}

TEST(Engine, ResetPrefixCacheRefusesWhileRunningAndThenEmitsAllBlocksCleared) {
  Recorder rec;
  Engine engine(tiny(), &rec);
  ASSERT_TRUE(engine.add_request(1, seq_tokens(40), 10));
  engine.step(0);
  EXPECT_FALSE(engine.reset_prefix_cache(1.0));
  drain(engine);
  EXPECT_EQ(engine.resident_prefix_tokens(seq_tokens(40)), 32u);
  rec.batches.clear();
  EXPECT_TRUE(engine.reset_prefix_cache(2.5));
  ASSERT_EQ(rec.batches.size(), 1u);
  EXPECT_EQ(rec.batches[0].first, 2.5);
  ASSERT_EQ(rec.batches[0].second.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(rec.batches[0].second[0]));
  EXPECT_EQ(engine.resident_prefix_tokens(seq_tokens(40)), 0u);
  EXPECT_EQ(engine.stats().cached_blocks, 0u);
}

TEST(Engine, SleepAbortsEveryRequestFreesThePoolAndEmitsAllBlocksCleared) {
  Recorder rec;
  Engine engine(tiny(), &rec);
  ASSERT_TRUE(engine.add_request(1, seq_tokens(40), 10));
  ASSERT_TRUE(engine.add_request(2, seq_tokens(60), 10));
  engine.step(0);  // both running, blocks held and cached
  ASSERT_TRUE(engine.add_request(3, seq_tokens(20), 10));  // queued
  EXPECT_GT(engine.stats().kv_cache_usage, 0.0);
  rec.batches.clear();
  const std::vector<RequestOutput> out = engine.sleep(3.0);
  ASSERT_EQ(out.size(), 3u);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].id, i + 1);
    EXPECT_EQ(out[i].finish, FinishReason::kAbort);
  }
  EXPECT_TRUE(engine.idle());
  EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
  EXPECT_EQ(engine.stats().cached_blocks, 0u);
  EXPECT_EQ(engine.resident_prefix_tokens(seq_tokens(40)), 0u);
  ASSERT_EQ(rec.batches.size(), 1u);
  EXPECT_EQ(rec.batches[0].first, 3.0);
  ASSERT_EQ(rec.batches[0].second.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(rec.batches[0].second[0]));
  // Aborts are reported once: the next step has none of them.
  EXPECT_TRUE(engine.step(4.0).outputs.empty());
  // Awake again, it serves (from an empty cache).
  ASSERT_TRUE(engine.add_request(4, seq_tokens(40), 2));
  drain(engine);
  EXPECT_EQ(engine.resident_prefix_tokens(seq_tokens(40)), 32u);
}

TEST(Engine, ResidentPrefixTokensCountsLeadingCachedFullBlocks) {
  Engine engine(tiny(), nullptr);
  ASSERT_TRUE(engine.add_request(1, seq_tokens(100), 2));
  drain(engine);
  EXPECT_EQ(engine.resident_prefix_tokens(seq_tokens(100)), 96u);
  EXPECT_EQ(engine.resident_prefix_tokens(seq_tokens(50)), 48u);
  auto diverging = seq_tokens(100);
  diverging[40] = 1;
  EXPECT_EQ(engine.resident_prefix_tokens(diverging), 32u);
  EXPECT_EQ(engine.resident_prefix_tokens(seq_tokens(100, 77)), 0u);
}

TEST(Engine, AddRequestRejectsEmptyOversizedAndDuplicateRequests) {
  EngineConfig cfg = tiny();
  cfg.max_model_len = 128;
  Engine engine(cfg, nullptr);
  EXPECT_FALSE(engine.add_request(1, {}, 4));
  EXPECT_FALSE(engine.add_request(1, seq_tokens(10), 0));
  EXPECT_FALSE(engine.add_request(1, seq_tokens(100), 29));
  EXPECT_TRUE(engine.add_request(1, seq_tokens(100), 28));
  EXPECT_FALSE(engine.add_request(1, seq_tokens(10), 1));
  EXPECT_EQ(engine.stats().waiting, 1u);
}

TEST(Engine, AbortFreesBlocksAndIsReportedOnceInTheNextStep) {
  Engine engine(tiny(), nullptr);
  ASSERT_TRUE(engine.add_request(1, seq_tokens(100), 1000));
  ASSERT_TRUE(engine.add_request(2, seq_tokens(10, 9000), 1000));
  engine.step(0);
  EXPECT_GT(engine.stats().kv_cache_usage, 0.0);
  engine.abort(1);
  engine.abort(2);
  engine.abort(3);  // unknown: ignored
  EXPECT_TRUE(engine.idle());
  EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
  StepResult r = engine.step(0);
  ASSERT_EQ(r.outputs.size(), 2u);
  for (const auto& o : r.outputs) EXPECT_EQ(o.finish, FinishReason::kAbort);
  EXPECT_TRUE(engine.step(0).outputs.empty());
  EXPECT_EQ(engine.resident_prefix_tokens(seq_tokens(100)), 96u) << "cached blocks stay cached";
}

TEST(Engine, SpeculativeDecodingYieldsSeveralTokensPerStepButNeverPastMaxTokens) {
  Engine engine(*preset("tiny-mtp"), nullptr);
  for (uint64_t id = 1; id <= 8; ++id) {
    ASSERT_TRUE(engine.add_request(id, seq_tokens(30, static_cast<uint32_t>(id) * 100), 101));
  }
  std::map<uint64_t, uint32_t> generated;
  uint32_t decode_steps = 0;
  while (!engine.idle()) {
    StepResult r = engine.step(0);
    ++decode_steps;
    for (const auto& o : r.outputs) {
      EXPECT_LE(o.new_tokens, 3u);
      generated[o.id] += o.new_tokens;
    }
  }
  for (const auto& [id, n] : generated) EXPECT_EQ(n, 101u);
  EXPECT_LT(decode_steps, 70u);
  const EngineStats s = engine.stats();
  EXPECT_GT(s.spec_drafts, 0u);
  EXPECT_EQ(s.spec_draft_tokens, 2 * s.spec_drafts);
  ASSERT_EQ(s.spec_accepted_per_pos.size(), 2u);
  EXPECT_EQ(s.spec_accepted_tokens, s.spec_accepted_per_pos[0] + s.spec_accepted_per_pos[1]);
  EXPECT_GE(s.spec_accepted_per_pos[0], s.spec_accepted_per_pos[1]);
  EXPECT_EQ(s.generation_tokens, 808u);
}

std::string trace(const EngineConfig& cfg) {
  Recorder rec;
  Engine engine(cfg, &rec);
  std::string out;
  double now = 0;
  Rng rng(3);
  uint64_t next = 1;
  for (int step = 0; step < 400; ++step) {
    if (rng.next() % 3 == 0) {
      auto prompt = seq_tokens(20 + static_cast<uint32_t>(rng.next() % 60), 100 * (rng.next() % 3));
      engine.add_request(next++, prompt, 1 + static_cast<uint32_t>(rng.next() % 50));
    }
    StepResult r = engine.step(now);
    now += r.duration_s;
    out += std::to_string(r.duration_s);
    out += ':';
    for (const auto& o : r.outputs) {
      for (uint64_t v : {o.id, uint64_t{o.new_tokens}, uint64_t{o.cached_tokens},
                         static_cast<uint64_t>(o.finish)}) {
        out += std::to_string(v);
        out += '/';
      }
    }
  }
  for (const auto& [ts, events] : rec.batches) {
    out += std::to_string(ts);
    for (const auto& e : events) {
      if (const auto* s = std::get_if<BlockStored>(&e)) {
        for (const auto& h : s->block_hashes) {
          out += 'S';
          out += std::to_string(h.low64());
        }
      } else if (const auto* r = std::get_if<BlockRemoved>(&e)) {
        out += 'R';
        out += std::to_string(r->block_hashes[0].low64());
      }
    }
  }
  return out;
}

TEST(Engine, SameInputsGiveTheSameOutputsTimesAndEvents) {
  EngineConfig cfg = *preset("tiny-mtp");
  cfg.num_gpu_blocks = 40;
  const std::string a = trace(cfg);
  EXPECT_EQ(a, trace(cfg));
  cfg.random_seed = 2;
  EXPECT_NE(a, trace(cfg)) << "the seed drives the acceptance draws";
}

// Random arrivals (shared prefixes), aborts and finishes on a small pool, thousands of steps.
void random_load(EngineConfig cfg, uint64_t seed) {
  Recorder rec;
  cfg.num_gpu_blocks = 48;
  cfg.max_num_batched_tokens = 96;
  cfg.max_num_seqs = 12;
  EngineCore engine(cfg, &rec);
  Rng rng(seed);
  std::vector<std::vector<uint32_t>> prefixes;
  for (uint32_t p = 0; p < 5; ++p) prefixes.push_back(seq_tokens(20 + p * 17, 10000 * (p + 1)));
  std::vector<uint64_t> live;
  uint64_t next = 1;
  int64_t stored_minus_removed = 0;
  auto count_events = [&] {
    for (const auto& [ts, events] : rec.batches) {
      for (const auto& e : events) {
        if (const auto* s = std::get_if<BlockStored>(&e)) {
          stored_minus_removed += static_cast<int64_t>(s->block_hashes.size());
        } else if (const auto* r = std::get_if<BlockRemoved>(&e)) {
          stored_minus_removed -= static_cast<int64_t>(r->block_hashes.size());
        } else {
          stored_minus_removed = 0;
        }
      }
    }
    rec.batches.clear();
  };
  for (int step = 0; step < 4000; ++step) {
    const uint64_t dice = rng.next() % 100;
    if (dice < 35 && step < 3500) {
      std::vector<uint32_t> prompt = prefixes[rng.next() % prefixes.size()];
      const uint32_t suffix = static_cast<uint32_t>(rng.next() % 40);
      for (uint32_t i = 0; i < suffix; ++i) prompt.push_back(static_cast<uint32_t>(rng.next() % 50));
      if (engine.add_request(next, prompt, 1 + static_cast<uint32_t>(rng.next() % 60))) {
        live.push_back(next);
      }
      ++next;
    } else if (dice < 40 && !live.empty()) {
      const size_t i = rng.next() % live.size();
      engine.abort(live[i]);
      live.erase(live.begin() + static_cast<ptrdiff_t>(i));
    } else if (dice == 99 && engine.idle()) {
      engine.reset_prefix_cache(step);
    }
    for (const auto& o : engine.step(step).outputs) {
      if (o.finish != FinishReason::kNone) std::erase(live, o.id);
    }
    count_events();
    ASSERT_EQ(engine.pool().check_invariants(), "") << "step " << step;
    ASSERT_EQ(stored_minus_removed, static_cast<int64_t>(engine.pool().num_cached()));
    const EngineStats s = engine.stats();
    ASSERT_LE(s.running, cfg.max_num_seqs);
  }
  for (int i = 0; i < 100000 && !engine.idle(); ++i) engine.step(0);
  count_events();
  ASSERT_TRUE(engine.idle());
  EXPECT_EQ(engine.pool().num_free(), engine.pool().usable_blocks()) << "ref counts back to zero";
  for (uint32_t b = 1; b < engine.pool().num_blocks(); ++b) EXPECT_EQ(engine.pool().ref_count(b), 0u);
  EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
  EXPECT_EQ(stored_minus_removed, static_cast<int64_t>(engine.pool().num_cached()));
  EXPECT_GT(engine.stats().prefix_cache_hits, 0u);
  EXPECT_GT(engine.stats().preemptions, 0u);
}

TEST(Engine, RandomLoadKeepsBlockPoolInvariantsAndEventCounts) { random_load(tiny(), 11); }

TEST(Engine, RandomLoadWithSpeculationKeepsBlockPoolInvariants) {
  random_load(*preset("tiny-mtp"), 12);
}

TEST(Engine, StepWithFiveHundredRunningSequencesIsCheap) {
  EngineConfig cfg = tiny();
  cfg.max_num_seqs = 512;
  cfg.num_gpu_blocks = 40000;
  cfg.max_num_batched_tokens = 65536;
  Engine engine(cfg, nullptr);
  for (uint64_t id = 0; id < 500; ++id) {
    ASSERT_TRUE(engine.add_request(id, seq_tokens(100, static_cast<uint32_t>(id) * 7), 5000));
  }
  engine.step(0);
  ASSERT_EQ(engine.stats().running, 500u);
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int kSteps = 300;
  for (int i = 0; i < kSteps; ++i) engine.step(0);
  const double per_step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
      kSteps;
  std::printf("step() with 500 running sequences: %.3f ms\n", per_step_ms);
  EXPECT_LT(per_step_ms, 10.0);  // generous for sanitizer builds; Release is ~0.05 ms
}


// ---------------------------------------------------------------- namespaces, copies, hybrid

namespace ns_tests {

std::string hex(std::span<const uint8_t> b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t c : b) {
    s.push_back(d[c >> 4]);
    s.push_back(d[c & 15]);
  }
  return s;
}

CacheNamespace lora(std::string salt = "") { return CacheNamespace{"sql-lora", 1, std::move(salt), "/adapters/sql"}; }
CacheNamespace salted(std::string salt) { return CacheNamespace{"", 0, std::move(salt)}; }

// Stores of group `g` only.
std::vector<BlockStored> stores(const Recorder& rec, uint32_t g = 0) {
  std::vector<BlockStored> out;
  for (auto& s : rec.all<BlockStored>()) {
    if (s.group_idx.value_or(0) == g) out.push_back(s);
  }
  return out;
}

}  // namespace ns_tests

TEST(PrefixHash, ExtraKeysHashLikeVllmSha256Cbor) {
  // Pinned with Python: hashlib.sha256(cbor2.dumps((parent, tuple(tokens), extra), canonical=True)),
  // NONE_HASH = sha256(cbor2.dumps("0")), tokens 5000..5015 (then 5016..5031), extra the tagged
  // keys of vLLM 0.32: (("lora", "sql-lora", "/adapters/sql"), ("cache_salt", "salt-1")).
  cache::kv::BlockHasher hasher(cache::kv::HashAlgo::kSha256Cbor, "0");
  std::vector<uint8_t> buf;
  const auto t0 = seq_tokens(16), t1 = seq_tokens(16, 5016);
  auto h = [&](const BlockHash& parent, const std::vector<uint32_t>& t, const CacheNamespace& ns, uint64_t i) {
    return hash_block_in(hasher, parent, t, ns, i, buf);
  };
  using ns_tests::hex;
  EXPECT_EQ(hex(h(hasher.none_hash(), t0, {}, 0).bytes()), "6e7685527fbfe447c03c02dbfe614b9807386e4fc455347fa72300090009d54f");
  EXPECT_EQ(hex(h(hasher.none_hash(), t0, ns_tests::lora(), 0).bytes()),
            "2e06c45f5c8f9ab30165dda89d638cb1f52b7cc70117b7c69eaebc3111a5caa6");
  EXPECT_EQ(hex(h(hasher.none_hash(), t0, ns_tests::salted("salt-1"), 0).bytes()),
            "89e45fae7c7c42e62078b0c51ef66bcc6131de7e083714bb895a34fe5ecd72e2");
  const auto both = h(hasher.none_hash(), t0, ns_tests::lora("salt-1"), 0);
  EXPECT_EQ(hex(both.bytes()), "a55f7da60e820e62392e73119c79637f989cc4c7bfa9807ed1a6c10c6b489b3e");
  EXPECT_EQ(hex(h(both, t1, ns_tests::lora("salt-1"), 1).bytes()),
            "5559bdd55faaff25359184ada18b09ea4fe41d408614cd2b456f132616feba3a");
  // The salt keys block 0 only: block 1 of a salted request hashes as an unsalted block.
  EXPECT_EQ(h(both, t1, ns_tests::salted("salt-1"), 1), hasher.hash_block(both, t1));
  // The order of generate_block_hash_extra_keys: LoRA name (every block), cache_salt (block 0).
  EXPECT_EQ(block_extra_keys(ns_tests::lora("salt-1"), 0), (std::vector<std::string>{"sql-lora", "salt-1"}));
  EXPECT_EQ(block_extra_keys(ns_tests::lora("salt-1"), 1), (std::vector<std::string>{"sql-lora"}));
  EXPECT_TRUE(block_extra_keys(ns_tests::salted("s"), 1).empty());
  // msgpack.packb(("sql-lora", "salt-1")) and a 40-byte name (str8).
  const auto mp = extra_keys_msgpack(ns_tests::lora("salt-1"), 0);
  ASSERT_TRUE(mp);
  EXPECT_EQ(hex(std::span(reinterpret_cast<const uint8_t*>(mp->data()), mp->size())), "92a873716c2d6c6f7261a673616c742d31");
  const auto long_name = extra_keys_msgpack(CacheNamespace{std::string(40, 'x'), 1, ""}, 3);
  ASSERT_TRUE(long_name);
  EXPECT_EQ(long_name->substr(0, 3), std::string("\x91\xd9\x28", 3));
  EXPECT_FALSE(extra_keys_msgpack(CacheNamespace{}, 0));
}

TEST(Engine, LoraRequestsStoreTheAdapterAndNeverShareTheBaseModelsCache) {
  Recorder rec;
  EngineCore core(tiny(), &rec);
  ASSERT_TRUE(core.add_request(1, seq_tokens(64), 1, ns_tests::lora()));
  drain(core);
  auto st = ns_tests::stores(rec);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].lora_id, 1);
  EXPECT_EQ(st[0].lora_name, "sql-lora");
  ASSERT_TRUE(st[0].extra_keys);
  ASSERT_EQ(st[0].extra_keys->size(), 4u);
  for (const auto& k : *st[0].extra_keys) EXPECT_EQ(k, std::string("\x91\xa8sql-lora"));
  EXPECT_EQ(core.resident_prefix_tokens(seq_tokens(64), ns_tests::lora()), 64u);
  EXPECT_EQ(core.resident_prefix_tokens(seq_tokens(64)), 0u) << "the base model does not see the adapter's blocks";
  EXPECT_EQ(core.resident_prefix_tokens(seq_tokens(64), CacheNamespace{"other", 2, ""}), 0u);

  // The base model computes its own blocks: a miss, and a store without LoRA fields.
  rec.batches.clear();
  ASSERT_TRUE(core.add_request(2, seq_tokens(64), 1));
  auto outs = drain(core);
  EXPECT_EQ(first_output(outs, 2)->cached_tokens, 0u);
  st = ns_tests::stores(rec);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_FALSE(st[0].lora_id);
  EXPECT_FALSE(st[0].lora_name);
  EXPECT_EQ(st[0].extra_keys, cache::kv::ExtraKeys(4));
  // ...and the adapter hits its own.
  ASSERT_TRUE(core.add_request(3, seq_tokens(80), 1, ns_tests::lora()));
  outs = drain(core);
  EXPECT_EQ(first_output(outs, 3)->cached_tokens, 64u);
  EXPECT_EQ(core.pool().check_invariants(), "");
}

TEST(Engine, CacheSaltKeysBlockZeroOnlyAndSeparatesSaltedFromUnsaltedPrompts) {
  Recorder rec;
  EngineCore core(tiny(), &rec);
  ASSERT_TRUE(core.add_request(1, seq_tokens(48), 1, ns_tests::salted("tenant-a")));
  drain(core);
  auto st = ns_tests::stores(rec);
  ASSERT_EQ(st.size(), 1u);
  ASSERT_TRUE(st[0].extra_keys);
  ASSERT_EQ(st[0].extra_keys->size(), 3u);
  EXPECT_EQ((*st[0].extra_keys)[0], std::string("\x91\xa8tenant-a"));
  EXPECT_FALSE((*st[0].extra_keys)[1]);
  EXPECT_FALSE((*st[0].extra_keys)[2]);
  EXPECT_FALSE(st[0].lora_name);
  EXPECT_EQ(core.resident_prefix_tokens(seq_tokens(48), ns_tests::salted("tenant-a")), 48u);
  EXPECT_EQ(core.resident_prefix_tokens(seq_tokens(48)), 0u);
  EXPECT_EQ(core.resident_prefix_tokens(seq_tokens(48), ns_tests::salted("tenant-b")), 0u);
  // Unsalted, then salted again: the salt's chain changes every later hash too.
  ASSERT_TRUE(core.add_request(2, seq_tokens(48), 1));
  auto outs = drain(core);
  EXPECT_EQ(first_output(outs, 2)->cached_tokens, 0u);
  ASSERT_TRUE(core.add_request(3, seq_tokens(64), 1, ns_tests::salted("tenant-a")));
  outs = drain(core);
  EXPECT_EQ(first_output(outs, 3)->cached_tokens, 48u);
  // An adapter with a salt: [lora, salt] on block 0, [lora] after.
  rec.batches.clear();
  ASSERT_TRUE(core.add_request(4, seq_tokens(33, 9000), 1, ns_tests::lora("s")));
  drain(core);
  st = ns_tests::stores(rec);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ((*st[0].extra_keys)[0], std::string("\x92\xa8sql-lora\xa1s"));
  EXPECT_EQ((*st[0].extra_keys)[1], std::string("\x91\xa8sql-lora"));
}

TEST(Engine, ConcurrentIdenticalPromptsCacheTwoCopiesOfTheBlocksNeitherFoundCached) {
  // Two identical requests in flight: the second hits the first's full prompt blocks, but the
  // partial last block (then filled with the same generated tokens) is computed by both, so its
  // hash is stored twice, as vLLM does (no de-duplication).
  Recorder rec;
  EngineCore core(tiny(), &rec);
  ASSERT_TRUE(core.add_request(1, seq_tokens(40), 20));
  ASSERT_TRUE(core.add_request(2, seq_tokens(40), 20));
  const auto outs = drain(core);
  EXPECT_EQ(first_output(outs, 2)->cached_tokens, 32u);
  std::map<BlockHash, int> stored;
  for (const auto& s : rec.all<BlockStored>()) {
    for (const auto& h : s.block_hashes) ++stored[h];
  }
  int twice = 0;
  for (const auto& [h, n] : stored) {
    EXPECT_LE(n, 2);
    if (n == 2) {
      ++twice;
      EXPECT_EQ(core.pool().copies(h), 2u);
    }
  }
  EXPECT_EQ(twice, 1) << "block 2 (8 prompt + 8 generated tokens) is cached by both requests";
  EXPECT_EQ(core.pool().check_invariants(), "");
}

TEST(Engine, DelayCacheBlocksMakesSameStepRequestsCacheTheirOwnCopiesAndEachCopyIsRemoved) {
  EngineConfig cfg = tiny();
  cfg.delay_cache_blocks = true;
  cfg.num_gpu_blocks = 17;  // 16 usable
  Recorder rec;
  EngineCore core(cfg, &rec);
  ASSERT_TRUE(core.add_request(1, seq_tokens(64), 1));
  ASSERT_TRUE(core.add_request(2, seq_tokens(64), 1));
  auto outs = drain(core);
  EXPECT_EQ(first_output(outs, 2)->cached_tokens, 0u) << "nothing was cached when it was admitted";
  auto st = rec.all<BlockStored>();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].block_hashes, st[1].block_hashes);
  EXPECT_EQ(st[0].token_ids, st[1].token_ids);
  EXPECT_FALSE(st[1].parent_block_hash);
  for (const auto& h : st[0].block_hashes) EXPECT_EQ(core.pool().copies(h), 2u);
  // A later request sees the blocks (the oldest copy).
  ASSERT_TRUE(core.add_request(3, seq_tokens(80), 1));
  outs = drain(core);
  EXPECT_EQ(first_output(outs, 3)->cached_tokens, 64u);
  // Pressure evicts every copy: one BlockRemoved per copy, stored - removed = resident copies.
  ASSERT_TRUE(core.add_request(4, seq_tokens(16 * 16 - 8, 70000), 1));
  drain(core);
  std::map<BlockHash, int> live;
  for (const auto& [ts, events] : rec.batches) {
    for (const auto& e : events) {
      if (auto* s = std::get_if<BlockStored>(&e)) for (const auto& h : s->block_hashes) ++live[h];
      if (auto* r = std::get_if<BlockRemoved>(&e)) {
        ASSERT_EQ(r->block_hashes.size(), 1u);
        EXPECT_GT(live[r->block_hashes[0]]--, 0) << "a removal of a hash with no stored copy";
      }
    }
  }
  for (const auto& [h, n] : live) EXPECT_EQ(static_cast<uint32_t>(n), core.pool().copies(h));
  for (const auto& h : st[0].block_hashes) EXPECT_EQ(live[h], 0) << "both copies evicted, each reported";
  EXPECT_EQ(core.pool().check_invariants(), "");
}

TEST(Engine, HybridMambaPublishesAMambaGroupBesideFullAttentionAsVllmDoes) {
  EngineConfig cfg = tiny();
  cfg.hybrid_mamba = true;
  cfg.max_num_batched_tokens = 40;  // chunks: 32 (aligned), 32, then the rest
  Recorder rec;
  EngineCore core(cfg, &rec);
  ASSERT_TRUE(core.add_request(1, seq_tokens(100), 1));
  drain(core);
  const auto full = ns_tests::stores(rec, 0);
  const auto mamba = ns_tests::stores(rec, 1);
  ASSERT_FALSE(mamba.empty());
  uint32_t full_blocks = 0;
  for (const auto& s : full) {
    EXPECT_EQ(s.kv_cache_spec_kind, "full_attention");
    EXPECT_EQ(s.token_ids.size(), 16 * s.block_hashes.size());
    full_blocks += static_cast<uint32_t>(s.block_hashes.size());
  }
  EXPECT_EQ(full_blocks, 6u);
  std::vector<BlockHash> states;
  for (const auto& s : mamba) {
    EXPECT_EQ(s.kv_cache_spec_kind, "mamba");
    EXPECT_EQ(s.block_size, 16u);
    EXPECT_EQ(s.medium, "GPU");
    // The state blocks only (null blocks skipped), token_ids the whole range.
    EXPECT_EQ(s.token_ids.size() % 16, 0u);
    EXPECT_LE(s.block_hashes.size() * 16, s.token_ids.size());
    EXPECT_EQ(s.extra_keys ? s.extra_keys->size() : 0u, s.block_hashes.size());
    states.insert(states.end(), s.block_hashes.begin(), s.block_hashes.end());
  }
  // Chunk ends 32, 64, 96 (the prompt's last block boundary): the states there are cached.
  ASSERT_EQ(states.size(), 3u);
  EXPECT_EQ(states[0], full[0].block_hashes[1]);
  EXPECT_EQ(states[2], full.back().block_hashes.back());
  // The same prompt again: hit up to the last cached state (96 tokens).
  EXPECT_EQ(core.resident_prefix_tokens(seq_tokens(100)), 96u);
  ASSERT_TRUE(core.add_request(2, seq_tokens(100), 1));
  auto outs = drain(core);
  EXPECT_EQ(first_output(outs, 2)->cached_tokens, 96u);
  // A prompt that shares 5 blocks but whose state at block 5 is not cached: cut back to 64.
  auto other = seq_tokens(100);
  other[90] = 1;
  EXPECT_EQ(core.resident_prefix_tokens(other), 64u);
  EXPECT_EQ(core.pool().check_invariants(), "");
}

TEST(Engine, HybridMambaEvictionRemovesStatesOfGroupOne) {
  EngineConfig cfg = tiny();
  cfg.hybrid_mamba = true;
  cfg.num_gpu_blocks = 17;
  Recorder rec;
  EngineCore core(cfg, &rec);
  ASSERT_TRUE(core.add_request(1, seq_tokens(64), 1));
  drain(core);
  const auto mamba = ns_tests::stores(rec, 1);
  ASSERT_EQ(mamba.size(), 1u);
  ASSERT_EQ(mamba[0].block_hashes.size(), 1u) << "one state: at the prompt's last block boundary";
  ASSERT_TRUE(core.add_request(2, seq_tokens(16 * 15, 70000), 1));
  drain(core);
  bool removed_state = false;
  for (const auto& r : rec.all<BlockRemoved>()) {
    if (r.group_idx == 1u) removed_state |= r.block_hashes[0] == mamba[0].block_hashes[0];
  }
  EXPECT_TRUE(removed_state);
  EXPECT_EQ(core.pool().check_invariants(), "");
}

TEST(Engine, RandomLoadWithHybridLoraSaltAndDelayedCachingKeepsInvariants) {
  EngineConfig cfg = tiny();
  cfg.hybrid_mamba = true;
  cfg.delay_cache_blocks = true;
  cfg.num_gpu_blocks = 200;
  cfg.max_num_batched_tokens = 256;
  Recorder rec;
  EngineCore core(cfg, &rec);
  uint64_t x = 7;
  auto rnd = [&] { return x = x * 6364136223846793005ull + 1442695040888963407ull, x >> 33; };
  for (uint64_t id = 1; id <= 300; ++id) {
    CacheNamespace ns;
    if (rnd() % 3 == 0) ns = ns_tests::lora();
    if (rnd() % 4 == 0) ns.cache_salt = "s" + std::to_string(rnd() % 2);
    ASSERT_TRUE(core.add_request(id, seq_tokens(20 + rnd() % 300, 5000 + 16 * (rnd() % 4)), 1 + rnd() % 40, ns));
    for (int k = 0; k < 3; ++k) {
      if (!core.idle()) core.step(0);
    }
    ASSERT_EQ(core.pool().check_invariants(), "") << id;
  }
  drain(core);
  ASSERT_EQ(core.pool().check_invariants(), "");
  // Per (group, hash): stored - removed == cached copies.
  std::map<std::pair<uint32_t, BlockHash>, int> live;
  for (const auto& [ts, events] : rec.batches) {
    for (const auto& e : events) {
      if (auto* s = std::get_if<BlockStored>(&e)) for (const auto& h : s->block_hashes) ++live[{*s->group_idx, h}];
      if (auto* r = std::get_if<BlockRemoved>(&e)) for (const auto& h : r->block_hashes) --live[{*r->group_idx, h}];
    }
  }
  for (const auto& [k, n] : live) EXPECT_EQ(static_cast<uint32_t>(n), core.pool().copies(k.second, k.first));
}

// ---------------------------------------------------------------------------- CPU offload tier

// A prompt whose blocks the GPU evicted while the CPU tier kept them: the next request loads
// them back (cached_tokens counts them, as vLLM's num_computed_tokens counts the connector's
// tokens), for a fraction of the prefill's step time.
TEST(EngineCpuTier, BlocksEvictedFromTheGpuAreLoadedBackFromCpu) {
  struct Run {
    uint32_t cached = 0;
    double prefill_s = 0;
    Recorder rec;
    EngineStats stats;
  };
  auto run = [](uint32_t cpu_blocks) {
    Run out;
    EngineConfig c = tiny();
    c.num_gpu_blocks = 12;  // 11 usable: B evicts most of A
    c.cpu_offload_blocks = cpu_blocks;
    EngineCore e(c, &out.rec);
    double now = 0;
    const auto a = seq_tokens(100, 1000);
    e.add_request(1, a, 2);
    drain(e, &now);
    e.add_request(2, seq_tokens(150, 50000), 2);
    drain(e, &now);
    e.add_request(3, a, 2);
    const StepResult first = e.step(now);
    out.prefill_s = first.duration_s;
    for (const auto& o : first.outputs) {
      if (o.id == 3) out.cached = o.cached_tokens;
    }
    drain(e, &now);
    out.stats = e.stats();
    return out;
  };
  const Run gpu_only = run(0);
  EXPECT_EQ(gpu_only.cached, 16u) << "block 0 stayed on the GPU";
  EXPECT_TRUE(gpu_only.rec.all<BlockStored>().size() > 0);
  for (const auto& s : gpu_only.rec.all<BlockStored>()) EXPECT_EQ(s.medium, "GPU");

  const Run tiered = run(64);
  EXPECT_EQ(tiered.cached, 96u) << "block 0 from the GPU, blocks 1..5 loaded from CPU";
  EXPECT_EQ(tiered.stats.cpu_loaded_tokens, 80u);
  EXPECT_LT(tiered.prefill_s, gpu_only.prefill_s);
  size_t cpu_stores = 0;
  for (const auto& s : tiered.rec.all<BlockStored>()) {
    if (s.medium != "CPU") continue;
    ++cpu_stores;
    EXPECT_TRUE(s.token_ids.empty());
    EXPECT_EQ(s.block_size, 0u);
    EXPECT_FALSE(s.parent_block_hash);
  }
  EXPECT_GT(cpu_stores, 0u);
  EXPECT_EQ(tiered.stats.cpu_cached_blocks, 6u + 9u) << "A's and B's full blocks, once each";
  // Every CPU-stored hash was first stored on the GPU (ramjet chains CPU copies to GPU blocks).
  std::set<std::vector<uint8_t>> gpu_hashes;
  for (const auto& [ts, events] : tiered.rec.batches) {
    for (const auto& ev : events) {
      const auto* s = std::get_if<BlockStored>(&ev);
      if (s == nullptr) continue;
      for (const auto& bh : s->block_hashes) {
        const std::vector<uint8_t> key(bh.bytes().begin(), bh.bytes().end());
        if (s->medium == "GPU") gpu_hashes.insert(key);
        else EXPECT_TRUE(gpu_hashes.contains(key));
      }
    }
  }
}

TEST(EngineCpuTier, ASmallTierEvictsWithCpuRemovals) {
  EngineConfig c = tiny();
  c.cpu_offload_blocks = 4;
  Recorder rec;
  EngineCore e(c, &rec);
  double now = 0;
  e.add_request(1, seq_tokens(64 + 3, 1000), 1);  // 4 full blocks
  drain(e, &now);
  e.add_request(2, seq_tokens(32 + 3, 9000), 1);  // 2 more: A's first two go
  drain(e, &now);
  size_t removed = 0;
  for (const auto& r : rec.all<BlockRemoved>()) {
    if (r.medium == "CPU") removed += r.block_hashes.size();
  }
  EXPECT_EQ(removed, 2u);
  ASSERT_NE(e.cpu_tier(), nullptr);
  EXPECT_EQ(e.cpu_tier()->size(), 4u);
  EXPECT_EQ(e.cpu_tier()->check_invariants(), "");
}

}  // namespace
}  // namespace ramjet::sim
