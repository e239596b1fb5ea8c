#include "cache/index/exact_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace ramjet::cache {
namespace {

constexpr uint32_t kBs = 4;  // small blocks keep the tests readable

std::vector<uint32_t> tokens(size_t blocks, uint32_t start = 1) {
  std::vector<uint32_t> t(blocks * kBs);
  for (size_t i = 0; i < t.size(); ++i) t[i] = start + static_cast<uint32_t>(i);
  return t;
}

std::vector<uint64_t> chain(const std::vector<uint32_t>& t, uint64_t seed = exact_root_seed(kBs)) {
  std::vector<uint64_t> c;
  exact_chain(t, kBs, seed, c);
  return c;
}

// Removal keys as an engine would make them: anything unique per block (here 1000 + block).
std::vector<uint64_t> rkeys(size_t from, size_t to, uint64_t base = 1000) {
  std::vector<uint64_t> k;
  for (size_t i = from; i < to; ++i) k.push_back(base + i);
  return k;
}

std::span<const uint32_t> blocks_of(const std::vector<uint32_t>& t, size_t from, size_t to) {
  return std::span<const uint32_t>(t).subspan(from * kBs, (to - from) * kBs);
}

TEST(ExactChain, KeysDependOnEveryTokenTheNamespaceAndTheBlockSize) {
  const auto t = tokens(3);
  const auto base = chain(t);
  ASSERT_EQ(base.size(), 3u);
  auto u = t;
  u[9] += 1;  // a token of block 2
  const auto changed = chain(u);
  EXPECT_EQ(changed[0], base[0]);
  EXPECT_EQ(changed[1], base[1]);
  EXPECT_NE(changed[2], base[2]);
  EXPECT_NE(chain(t, exact_root_seed(kBs, "adapter"))[0], base[0]);
  EXPECT_NE(chain(t, exact_root_seed(kBs, "", "salt"))[0], base[0]);
  EXPECT_NE(exact_root_seed(kBs, "ab", "c"), exact_root_seed(kBs, "a", "bc"));
  EXPECT_NE(exact_root_seed(16), exact_root_seed(32));
  std::vector<uint64_t> partial;
  exact_chain(std::span<const uint32_t>(t).first(11), kBs, exact_root_seed(kBs), partial);
  EXPECT_EQ(partial.size(), 2u) << "the partial tail block is not a block";
}

TEST(ExactShard, MatchCountsTheLeadingBlocksTheEngineCanServe) {
  ExactShard s;
  const auto t = tokens(6);
  const auto c = chain(t);
  EXPECT_EQ(s.match(c), 0u);
  ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 4), blocks_of(t, 0, 4), kBs));
  EXPECT_EQ(s.match(c), 4u);
  ASSERT_FALSE(s.store(1003, 0, rkeys(4, 6), blocks_of(t, 4, 6), kBs));
  EXPECT_EQ(s.match(c), 6u);
  EXPECT_EQ(s.match(std::span<const uint64_t>(c).first(3)), 3u);
  // Evicting a middle block cuts every hit after it, as vLLM's lookup stops at the first miss.
  EXPECT_EQ(s.remove(rkeys(2, 3)), 0u);
  EXPECT_EQ(s.match(c), 2u);
  EXPECT_EQ(s.resident_blocks(), 5u);
  // Stored again, the blocks below it count again.
  ASSERT_FALSE(s.store(1001, 0, rkeys(2, 3), blocks_of(t, 2, 3), kBs));
  EXPECT_EQ(s.match(c), 6u);
  EXPECT_TRUE(s.check_invariants());
}

// The prediction check's question: were the blocks a lookup found held without a break since?
TEST(ExactShard, HeldSinceTellsBlocksRemovedAfterALookupFromBlocksHeldAllAlong) {
  ExactShard s;
  const auto t = tokens(6);
  const auto c = chain(t);
  ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 6), blocks_of(t, 0, 6), kBs));
  const uint64_t decided = s.revision();
  EXPECT_EQ(s.held_since(c, 2, decided), true);
  // Other blocks come and go: these are still held since.
  const auto other = tokens(2, 500);
  ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 2, 9000), blocks_of(other, 0, 2), kBs));
  EXPECT_EQ(s.remove(rkeys(0, 2, 9000)), 0u);
  EXPECT_EQ(s.held_since(c, 2, decided), true);
  // Block 4 is evicted: not held; stored again (the next prefill), still not held since.
  EXPECT_EQ(s.remove(rkeys(4, 5)), 0u);
  EXPECT_EQ(s.held_since(c, 2, decided), false);
  ASSERT_FALSE(s.store(1003, 0, rkeys(4, 5), blocks_of(t, 4, 5), kBs));
  EXPECT_EQ(s.match(c), 6u);
  EXPECT_EQ(s.held_since(c, 2, decided), false);
  EXPECT_EQ(s.held_since(c, 5, decided), false) << "block 5 stopped being reachable with block 4";
  EXPECT_EQ(s.held_since(std::span<const uint64_t>(c).first(4), 2, decided), true) << "blocks 2-3 never left";
  EXPECT_EQ(s.held_since(c, 2, s.revision()), true) << "held since a later lookup";
  // A clear removes everything, whatever comes back.
  const uint64_t later = s.revision();
  s.clear();
  ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 6), blocks_of(t, 0, 6), kBs));
  EXPECT_EQ(s.held_since(c, 0, later), false);
  EXPECT_TRUE(s.check_invariants());
}

TEST(ExactShard, ADuplicateCopyKeepsABlockResidentUntilTheLastCopyGoes) {
  ExactShard s;
  const auto t = tokens(2);
  const auto c = chain(t);
  for (int copy = 0; copy < 2; ++copy) {
    ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 2), t, kBs));
  }
  EXPECT_EQ(s.removal_keys(), 2u);
  EXPECT_EQ(s.remove(rkeys(1, 2)), 0u);
  EXPECT_EQ(s.match(c), 2u) << "one copy of block 1 is still cached";
  EXPECT_EQ(s.remove(rkeys(1, 2)), 0u);
  EXPECT_EQ(s.match(c), 1u);
  EXPECT_EQ(s.remove(rkeys(1, 2)), 1u) << "a third removal names nothing";
  EXPECT_TRUE(s.check_invariants());
}

TEST(ExactShard, TwoRemovalKeysForOneBlockEachHoldACopy) {
  // Two main attention groups report the same tokens under their own hashes.
  ExactShard s;
  const auto t = tokens(2);
  ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 2, 1000), t, kBs));
  ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 2, 5000), t, kBs));
  EXPECT_EQ(s.blocks(), 2u);
  s.remove(rkeys(0, 2, 1000));
  EXPECT_EQ(s.match(chain(t)), 2u);
  s.remove(rkeys(0, 2, 5000));
  EXPECT_EQ(s.match(chain(t)), 0u);
  EXPECT_EQ(s.blocks(), 0u) << "blocks nobody holds are forgotten";
  EXPECT_TRUE(s.check_invariants());
}

TEST(ExactShard, AStoreBelowAnUnknownParentFailsAndChangesNothing) {
  ExactShard s;
  const auto t = tokens(3);
  const auto rev = s.revision();
  EXPECT_EQ(s.store(999, 0, rkeys(1, 3), blocks_of(t, 1, 3), kBs), ExactStoreErrc::kParentUnknown);
  EXPECT_EQ(s.blocks(), 0u);
  EXPECT_EQ(s.revision(), rev);
}

TEST(ExactShard, AConflictingStoreFailsWhole) {
  ExactShard s;
  const auto t = tokens(3);
  ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 3), t, kBs));
  // Removal key 1001 already names block 1; now it is reported for other tokens.
  const auto other = tokens(2, 500);
  EXPECT_EQ(s.store(std::nullopt, exact_root_seed(kBs), {std::vector<uint64_t>{7000, 1001}}, other, kBs),
            ExactStoreErrc::kConflict);
  // The same removal key twice in one store.
  EXPECT_EQ(s.store(std::nullopt, exact_root_seed(kBs), {std::vector<uint64_t>{7000, 7000}}, other, kBs),
            ExactStoreErrc::kConflict);
  EXPECT_EQ(s.blocks(), 3u);
  EXPECT_EQ(s.removal_keys(), 3u);
  EXPECT_EQ(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 2), std::span<const uint32_t>(t).first(7), kBs),
            ExactStoreErrc::kShape);
  EXPECT_TRUE(s.check_invariants());
}

TEST(ExactShard, AStorePastTheLimitFailsWholeAndTheShardStaysUsable) {
  ExactShard s({.max_blocks = 4});
  const auto t = tokens(5);
  ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 3), blocks_of(t, 0, 3), kBs));
  EXPECT_EQ(s.store(1002, 0, rkeys(3, 5), blocks_of(t, 3, 5), kBs), ExactStoreErrc::kCapacity);
  EXPECT_EQ(s.match(chain(t)), 3u);
  ASSERT_FALSE(s.store(1002, 0, rkeys(3, 4), blocks_of(t, 3, 4), kBs));
  EXPECT_EQ(s.match(chain(t)), 4u);
  s.clear();
  EXPECT_EQ(s.match(chain(t)), 0u);
  EXPECT_EQ(s.blocks(), 0u);
  EXPECT_EQ(s.removal_keys(), 0u);
  ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 4), blocks_of(t, 0, 4), kBs));
  EXPECT_TRUE(s.check_invariants());
}

TEST(ExactShard, EveryMutationBumpsTheRevision) {
  ExactShard s;
  const auto t = tokens(1);
  auto r = s.revision();
  ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 1), t, kBs));
  EXPECT_GT(s.revision(), r);
  r = s.revision();
  s.remove(rkeys(0, 1));
  EXPECT_GT(s.revision(), r);
}

// ------------------------------------------------------------------------ against a naive model

// What the shard must answer, computed the obvious way: per removal key its block and copies; a
// block is resident while any key holds a copy; a chain matches up to its first non-resident block.
struct Naive {
  std::map<uint64_t, std::pair<uint64_t, uint32_t>> keys;  // removal key -> (chain key, copies)
  bool has(uint64_t rk) const { return keys.count(rk) != 0; }
  uint64_t chain_key(uint64_t rk) const { return keys.at(rk).first; }
  bool resident(uint64_t ck) const {
    for (const auto& [rk, v] : keys) {
      if (v.first == ck) return true;
    }
    return false;
  }
  uint32_t match(const std::vector<uint64_t>& c) const {
    uint32_t n = 0;
    while (n < c.size() && resident(c[n])) ++n;
    return n;
  }
};

// Prompts share prefixes (a few roots, random branching); the "engine" stores runs of blocks under
// a known parent, in one or two groups (two removal-key families), sometimes twice (duplicate
// copies), evicts single copies, sometimes clears, and sometimes reports a store below a parent it
// never reported.
TEST(ExactShard, RandomTracesAnswerLikeANaiveModel) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    std::mt19937_64 rng(seed);
    ExactShard s({.max_blocks = 4096});
    Naive model;
    struct Prompt {
      std::vector<uint32_t> tokens;
      uint64_t root;
      std::vector<uint64_t> chain;
    };
    std::vector<Prompt> prompts;
    const uint64_t roots[3] = {exact_root_seed(kBs), exact_root_seed(kBs, "lora-a"), exact_root_seed(kBs, "", "salt")};
    for (int p = 0; p < 40; ++p) {
      Prompt pr;
      if (p > 0 && rng() % 3 != 0) {  // branch off an earlier prompt
        const Prompt& base = prompts[rng() % prompts.size()];
        const size_t keep = (rng() % (base.tokens.size() / kBs + 1)) * kBs;
        pr.tokens.assign(base.tokens.begin(), base.tokens.begin() + static_cast<long>(keep));
        pr.root = base.root;
      } else {
        pr.root = roots[rng() % 3];
      }
      const size_t extra = 1 + rng() % 12;
      for (size_t i = 0; i < extra * kBs; ++i) pr.tokens.push_back(static_cast<uint32_t>(rng() % 50));
      exact_chain(pr.tokens, kBs, pr.root, pr.chain);
      prompts.push_back(std::move(pr));
    }
    // The engine's hash of a block: a function of its chain key and its group.
    auto rk = [](uint64_t chain_key, int group) { return chain_key * 31 + static_cast<uint64_t>(group); };
    std::vector<uint64_t> stored;  // removal keys ever stored (for removals and bogus parents)

    for (int op = 0; op < 3000; ++op) {
      const uint64_t roll = rng() % 100;
      if (roll < 55) {  // store a run of blocks of one prompt in one group
        const Prompt& pr = prompts[rng() % prompts.size()];
        const int group = static_cast<int>(rng() % 2);
        const size_t nb = pr.chain.size();
        size_t from = rng() % nb;
        // Mostly below a resident parent; sometimes at the root; sometimes below a missing one.
        const bool at_root = rng() % 4 == 0;
        if (at_root) from = 0;
        const size_t to = from + 1 + rng() % (nb - from);
        std::optional<uint64_t> parent;
        if (from > 0) parent = rk(pr.chain[from - 1], group);
        std::vector<uint64_t> keys;
        for (size_t b = from; b < to; ++b) keys.push_back(rk(pr.chain[b], group));
        const auto err = s.store(parent, pr.root, keys, blocks_of(pr.tokens, from, to), kBs);
        if (parent && !model.has(*parent)) {
          EXPECT_EQ(err, ExactStoreErrc::kParentUnknown);
          continue;
        }
        ASSERT_FALSE(err) << reason(*err);
        for (size_t b = from; b < to; ++b) {
          auto& v = model.keys[keys[b - from]];
          v.first = pr.chain[b];
          ++v.second;
          stored.push_back(keys[b - from]);
        }
      } else if (roll < 93) {  // evict one copy of something (or of nothing)
        if (stored.empty()) continue;
        const uint64_t key = rng() % 10 == 0 ? rng() : stored[rng() % stored.size()];
        const uint32_t unknown = s.remove(std::vector<uint64_t>{key});
        auto it = model.keys.find(key);
        EXPECT_EQ(unknown, it == model.keys.end() ? 1u : 0u);
        if (it != model.keys.end() && --it->second.second == 0) model.keys.erase(it);
      } else if (roll < 94) {
        s.clear();
        model.keys.clear();
      } else {  // read
        const Prompt& pr = prompts[rng() % prompts.size()];
        ASSERT_EQ(s.match(pr.chain), model.match(pr.chain)) << "seed " << seed << " op " << op;
      }
      if (op % 100 == 0) {
        ASSERT_TRUE(s.check_invariants()) << "seed " << seed << " op " << op;
      }
    }
    for (const auto& pr : prompts) ASSERT_EQ(s.match(pr.chain), model.match(pr.chain));
    ASSERT_TRUE(s.check_invariants());
    // Evicting everything leaves an empty shard (no block kept for nothing).
    while (!model.keys.empty()) {
      auto it = model.keys.begin();
      s.remove(std::vector<uint64_t>(it->second.second, it->first));
      model.keys.erase(it);
    }
    EXPECT_EQ(s.blocks(), 0u);
    EXPECT_EQ(s.resident_blocks(), 0u);
    EXPECT_EQ(s.removal_keys(), 0u);
  }
}

// A reader racing the writer sees some state the writer left between two write sections (every
// kWriteBatch blocks), never a torn one, and is never made to wait for the writer.
TEST(ExactShard, AReaderRacingTheWriterSeesOnlyWholeStates) {
  ExactShard s;
  const size_t n = ExactShard::kWriteBatch * 2 + 10;
  const auto t = tokens(n);
  const auto c = chain(t);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    while (!stop.load()) {
      ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, n), t, kBs));
      s.remove(rkeys(0, 1));  // block 0 goes: nothing matches
      s.remove(rkeys(1, n));
    }
  });
  size_t answered = 0, busy = 0;
  for (int i = 0; i < 20000; ++i) {
    const auto m = s.match(c);
    if (!m) {
      ++busy;
      continue;
    }
    ++answered;
    ASSERT_TRUE(*m == 0 || *m == ExactShard::kWriteBatch || *m == 2 * ExactShard::kWriteBatch || *m == n) << *m;
  }
  stop = true;
  writer.join();
  EXPECT_GT(answered, busy);
}

TEST(ExactShard, ExportedBlocksImportIntoAnEqualShard) {
  ExactShard s;
  std::mt19937_64 rng(5);
  std::vector<std::vector<uint32_t>> prompts;
  for (uint32_t p = 0; p < 40; ++p) prompts.push_back(tokens(1 + rng() % 8, 1 + static_cast<uint32_t>(rng() % 3) * 100));
  for (int step = 0; step < 400; ++step) {
    const auto& t = prompts[rng() % prompts.size()];
    const size_t n = t.size() / kBs;
    const uint64_t base = 10000 * (1 + rng() % 3) + 100 * (&t - prompts.data());  // copies under other keys
    if (rng() % 3 == 0) {
      s.remove(rkeys(rng() % n, n, base));
    } else {
      (void)s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, n, base), t, kBs);
    }
  }
  ASSERT_GT(s.blocks(), 20u);
  std::vector<ExactBlockRecord> blocks;
  std::vector<ExactRemovalRecord> removals;
  s.export_blocks(blocks, removals);
  EXPECT_EQ(blocks.size(), s.blocks());
  EXPECT_EQ(removals.size(), s.removal_keys());
  ExactShard copy;
  ASSERT_FALSE(copy.import_blocks(blocks, removals));
  EXPECT_TRUE(copy.check_invariants());
  EXPECT_EQ(copy.blocks(), s.blocks());
  EXPECT_EQ(copy.resident_blocks(), s.resident_blocks());
  for (const auto& t : prompts) EXPECT_EQ(copy.match(chain(t)), s.match(chain(t)));
  // The copy behaves the same under further events.
  for (const auto& t : prompts) {
    const auto keys = rkeys(0, t.size() / kBs, 10000 + 100 * (&t - prompts.data()));
    s.remove(keys);
    copy.remove(keys);
    EXPECT_EQ(copy.match(chain(t)), s.match(chain(t)));
  }
  EXPECT_TRUE(copy.check_invariants());
  EXPECT_EQ(copy.import_blocks(blocks, removals), ExactImportErrc::kNotEmpty);
}

TEST(ExactShard, ImportRejectsInconsistentRecordsAndStaysEmpty) {
  using B = ExactBlockRecord;
  using R = ExactRemovalRecord;
  constexpr uint32_t kRoot = B::kNoParent;
  const auto rejects = [](std::vector<B> b, std::vector<R> r, ExactImportErrc want, ExactShardLimits l = {}) {
    ExactShard s(l);
    EXPECT_EQ(s.import_blocks(b, r), want);
    EXPECT_EQ(s.blocks(), 0u);
    EXPECT_EQ(s.removal_keys(), 0u);
    EXPECT_TRUE(s.check_invariants());
  };
  rejects({{1, 1, 1}, {2, kRoot, 1}}, {{10, 1}, {11, 1}}, ExactImportErrc::kParent);  // parent after child
  rejects({{1, 0, 1}}, {{10, 1}}, ExactImportErrc::kParent);                          // its own parent
  rejects({{1, kRoot, 1}, {1, 0, 1}}, {{10, 1}, {11, 1}}, ExactImportErrc::kDuplicateKey);
  rejects({{1, kRoot, 1}, {2, 0, 1}}, {{10, 1}, {10, 1}}, ExactImportErrc::kDuplicateRemovalKey);
  rejects({{1, kRoot, 1}}, {{10, 0}}, ExactImportErrc::kZeroCopies);
  rejects({{1, kRoot, 0}}, {}, ExactImportErrc::kDangling);
  rejects({{1, kRoot, 2}}, {{10, 1}}, ExactImportErrc::kShape);
  rejects({{1, kRoot, 1}, {2, 0, 1}}, {{10, 1}, {11, 1}}, ExactImportErrc::kCapacity, {.max_blocks = 1});
  ExactShard ok;  // a non-resident block above a resident one is kept, and not reachable
  ASSERT_FALSE(ok.import_blocks(std::vector<B>{{1, kRoot, 0}, {2, 0, 1}}, std::vector<R>{{10, 3}}));
  EXPECT_EQ(ok.resident_blocks(), 1u);
  EXPECT_EQ(ok.match(std::vector<uint64_t>{1, 2}), 0u);
  EXPECT_TRUE(ok.check_invariants());
}

// ------------------------------------------------------------------------------------------ tiers

TEST(ExactShard, ABlockOffloadedToCpuStillExtendsTheRunAndCountsAsCpu) {
  ExactShard s;
  const auto t = tokens(4);
  const auto c = chain(t);
  ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 4), t, kBs));
  uint32_t unknown = 0;
  ASSERT_FALSE(s.attach(rkeys(1, 4), Tier::kCpu, unknown));  // the connector stored blocks 1..3
  EXPECT_EQ(unknown, 0u);
  EXPECT_EQ(s.match_tiers(c), (TierBlocks{{4, 0, 0}})) << "all on GPU: served from GPU";
  // The GPU evicts its tail first (vLLM frees a request's blocks in reverse order), then block 1.
  EXPECT_EQ(s.remove(rkeys(2, 4)), 0u);
  EXPECT_EQ(s.match_tiers(c), (TierBlocks{{2, 2, 0}}));
  EXPECT_EQ(s.remove(rkeys(1, 2)), 0u);
  EXPECT_EQ(s.match_tiers(c), (TierBlocks{{1, 3, 0}}));
  EXPECT_EQ(s.match(c), 4u) << "the run continues through any tier";
  // A CPU removal drops the CPU copy only: block 3 is gone, blocks 1..2 stay on CPU.
  EXPECT_EQ(s.remove(rkeys(3, 4), Tier::kCpu), 0u);
  EXPECT_EQ(s.match_tiers(c), (TierBlocks{{1, 2, 0}}));
  EXPECT_EQ(s.remove(rkeys(3, 4), Tier::kCpu), 1u) << "no CPU copy left under that key";
  // The GPU prefix cache resets: what the CPU holds stays reachable from the root only if block 0
  // is held somewhere.
  s.clear_tier(Tier::kGpu);
  EXPECT_EQ(s.match_tiers(c), (TierBlocks{{0, 0, 0}}));
  EXPECT_EQ(s.resident_blocks(Tier::kCpu), 2u);
  EXPECT_EQ(s.resident_blocks(Tier::kGpu), 0u);
  EXPECT_TRUE(s.check_invariants());
}

TEST(ExactShard, AttachSkipsHashesItDoesNotHold) {
  ExactShard s;
  const auto t = tokens(2);
  ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 2), t, kBs));
  uint32_t unknown = 0;
  ASSERT_FALSE(s.attach(std::vector<uint64_t>{1000, 77, 1001}, Tier::kDisk, unknown));
  EXPECT_EQ(unknown, 1u);
  EXPECT_EQ(s.resident_blocks(Tier::kDisk), 2u);
  EXPECT_TRUE(s.check_invariants());
}

TEST(ExactShard, AStoreInACpuTierMayHangBelowAGpuParentAndTheReverse) {
  ExactShard s;
  const auto t = tokens(3);
  const auto c = chain(t);
  ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 1), blocks_of(t, 0, 1), kBs));
  ASSERT_FALSE(s.store(uint64_t{1000}, 0, rkeys(1, 2), blocks_of(t, 1, 2), kBs, Tier::kCpu));
  ASSERT_FALSE(s.store(uint64_t{1001}, 0, rkeys(2, 3), blocks_of(t, 2, 3), kBs));  // parent only on CPU
  EXPECT_EQ(s.match_tiers(c), (TierBlocks{{1, 2, 0}})) << "after the first GPU miss the rest is loaded";
  EXPECT_TRUE(s.check_invariants());
}

TEST(ExactShard, ATierCopyPastItsMaximumFailsAsCapacity) {
  ExactShard s;
  const auto t = tokens(1);
  ASSERT_FALSE(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 1), t, kBs));
  uint32_t unknown = 0;
  for (int i = 0; i < 255; ++i) ASSERT_FALSE(s.attach(rkeys(0, 1), Tier::kCpu, unknown)) << i;
  EXPECT_EQ(s.attach(rkeys(0, 1), Tier::kCpu, unknown), ExactStoreErrc::kCapacity) << "a CPU copy count is 8 bits";
  EXPECT_EQ(s.store(std::nullopt, exact_root_seed(kBs), rkeys(0, 1), t, kBs, Tier::kCpu), ExactStoreErrc::kCapacity);
  EXPECT_EQ(unknown, 0u);
  EXPECT_EQ(s.remove(std::vector<uint64_t>(255, 1000), Tier::kCpu), 0u);
  EXPECT_EQ(s.resident_blocks(Tier::kCpu), 0u);
  EXPECT_EQ(s.resident_blocks(Tier::kGpu), 1u);
  EXPECT_TRUE(s.check_invariants());
}

// What the tiered shard must answer, the obvious way: per (removal key, tier) its block and copies;
// a block is on a tier while any key of that tier holds a copy; a chain's GPU run ends at its first
// block without a GPU copy, its GPU-or-CPU run at the first without either, its run at the first
// held nowhere.
struct NaiveTiers {
  std::map<std::pair<uint64_t, int>, std::pair<uint64_t, uint32_t>> keys;  // (rk, tier) -> (chain key, copies)
  bool has(uint64_t rk) const {
    for (int t = 0; t < 3; ++t) {
      if (keys.count({rk, t}) != 0) return true;
    }
    return false;
  }
  bool on(uint64_t ck, int max_tier) const {
    for (const auto& [k, v] : keys) {
      if (v.first == ck && k.second <= max_tier) return true;
    }
    return false;
  }
  TierBlocks match(const std::vector<uint64_t>& c) const {
    uint32_t run[3] = {0, 0, 0};
    for (int level = 0; level < 3; ++level) {
      while (run[level] < c.size() && on(c[run[level]], level)) ++run[level];
    }
    return TierBlocks{{run[0], run[1] - run[0], run[2] - run[1]}};
  }
};

TEST(ExactShard, RandomTieredTracesAnswerLikeANaiveModel) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    std::mt19937_64 rng(seed);
    ExactShard s({.max_blocks = 4096});
    NaiveTiers model;
    struct Prompt {
      std::vector<uint32_t> tokens;
      std::vector<uint64_t> chain;
    };
    std::vector<Prompt> prompts;
    for (int p = 0; p < 30; ++p) {
      Prompt pr;
      if (p > 0 && rng() % 3 != 0) {
        const Prompt& base = prompts[rng() % prompts.size()];
        const size_t keep = (rng() % (base.tokens.size() / kBs + 1)) * kBs;
        pr.tokens.assign(base.tokens.begin(), base.tokens.begin() + static_cast<long>(keep));
      }
      const size_t extra = 1 + rng() % 10;
      for (size_t i = 0; i < extra * kBs; ++i) pr.tokens.push_back(static_cast<uint32_t>(rng() % 40));
      exact_chain(pr.tokens, kBs, exact_root_seed(kBs), pr.chain);
      prompts.push_back(std::move(pr));
    }
    auto rk = [](uint64_t chain_key) { return chain_key * 31 + 7; };
    std::vector<uint64_t> stored;
    for (int op = 0; op < 4000; ++op) {
      const uint64_t roll = rng() % 100;
      const Tier tier = static_cast<Tier>(rng() % 2 == 0 ? 0 : 1 + rng() % 2);
      const int ti = static_cast<int>(tier);
      if (roll < 40) {  // a store with tokens (GPU, or a self-describing offload store)
        const Prompt& pr = prompts[rng() % prompts.size()];
        const size_t nb = pr.chain.size();
        size_t from = rng() % 4 == 0 ? 0 : rng() % nb;
        const size_t to = from + 1 + rng() % (nb - from);
        std::optional<uint64_t> parent;
        if (from > 0) parent = rk(pr.chain[from - 1]);
        std::vector<uint64_t> keys;
        for (size_t b = from; b < to; ++b) keys.push_back(rk(pr.chain[b]));
        const auto err = s.store(parent, exact_root_seed(kBs), keys, blocks_of(pr.tokens, from, to), kBs, tier);
        if (parent && !model.has(*parent)) {
          EXPECT_EQ(err, ExactStoreErrc::kParentUnknown);
          continue;
        }
        ASSERT_FALSE(err) << reason(*err) << " seed " << seed << " op " << op;
        for (size_t b = from; b < to; ++b) {
          auto& v = model.keys[{keys[b - from], ti}];
          v.first = pr.chain[b];
          ++v.second;
          stored.push_back(keys[b - from]);
        }
      } else if (roll < 55) {  // a hash-only offload store of blocks the shard may know
        if (stored.empty() || tier == Tier::kGpu) continue;
        std::vector<uint64_t> keys;
        for (int i = 0, n = 1 + static_cast<int>(rng() % 4); i < n; ++i) {
          keys.push_back(rng() % 8 == 0 ? rng() : stored[rng() % stored.size()]);
        }
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        uint32_t unknown = 0;
        ASSERT_FALSE(s.attach(keys, tier, unknown));
        uint32_t want_unknown = 0;
        for (uint64_t k : keys) {
          uint64_t ck = 0;
          bool found = false;
          for (int t = 0; t < 3 && !found; ++t) {
            if (auto it = model.keys.find({k, t}); it != model.keys.end()) {
              ck = it->second.first;
              found = true;
            }
          }
          if (!found) {
            ++want_unknown;
            continue;
          }
          auto& v = model.keys[{k, ti}];
          v.first = ck;
          ++v.second;
        }
        EXPECT_EQ(unknown, want_unknown);
      } else if (roll < 93) {  // evict one copy of one tier
        if (stored.empty()) continue;
        const uint64_t key = rng() % 10 == 0 ? rng() : stored[rng() % stored.size()];
        const uint32_t unknown = s.remove(std::vector<uint64_t>{key}, tier);
        auto it = model.keys.find({key, ti});
        EXPECT_EQ(unknown, it == model.keys.end() ? 1u : 0u);
        if (it != model.keys.end() && --it->second.second == 0) model.keys.erase(it);
      } else if (roll < 95) {  // the GPU prefix cache resets
        s.clear_tier(Tier::kGpu);
        std::erase_if(model.keys, [](const auto& kv) { return kv.first.second == 0; });
      } else {
        const Prompt& pr = prompts[rng() % prompts.size()];
        ASSERT_EQ(s.match_tiers(pr.chain), model.match(pr.chain)) << "seed " << seed << " op " << op;
      }
      if (op % 100 == 0) {
        ASSERT_TRUE(s.check_invariants()) << "seed " << seed << " op " << op;
      }
    }
    for (const auto& pr : prompts) ASSERT_EQ(s.match_tiers(pr.chain), model.match(pr.chain));
    ASSERT_TRUE(s.check_invariants());
    // Copies keep their tiers through an export and an import.
    std::vector<ExactBlockRecord> blocks;
    std::vector<ExactRemovalRecord> removals;
    s.export_blocks(blocks, removals);
    ExactShard copy({.max_blocks = 4096});
    ASSERT_FALSE(copy.import_blocks(blocks, removals));
    ASSERT_TRUE(copy.check_invariants());
    for (const auto& pr : prompts) ASSERT_EQ(copy.match_tiers(pr.chain), model.match(pr.chain));
    // Evicting every copy of every tier leaves an empty shard.
    while (!model.keys.empty()) {
      auto it = model.keys.begin();
      s.remove(std::vector<uint64_t>(it->second.second, it->first.first), static_cast<Tier>(it->first.second));
      model.keys.erase(it);
    }
    EXPECT_EQ(s.blocks(), 0u);
    EXPECT_EQ(s.resident_blocks(), 0u);
    EXPECT_EQ(s.removal_keys(), 0u);
    EXPECT_TRUE(s.check_invariants());
  }
}

}  // namespace
}  // namespace ramjet::cache
