// Differential test (issue 16): a digest inventory (block digests in place of token IDs) answers
// every lookup exactly as the raw inventory fed the same KV-event batches. Random traces of stores
// (with parents, duplicate copies of one hash, several groups and ranks, namespaces by LoRA name
// and cache_salt, filtered media and localities), removes (known and unknown hashes) and clears;
// after every batch, both inventories' counts, skips and lookups of random requests (prefixes of
// stored sequences, perturbed ones, other namespaces) must agree.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include <xxhash.h>

#include "cache/events/inventory.h"

namespace ramjet::cache::events {
namespace {

using kv::BlockHash;
using kv::BlockRemoved;
using kv::BlockStored;
using kv::EventBatch;

constexpr uint32_t kBs = 16;

std::string extra_key(std::string_view part) {
  std::string s(1, static_cast<char>(0x91));
  s.push_back(static_cast<char>(0xa0 | part.size()));
  s.append(part);
  return s;
}

struct Namespace {
  std::string lora;  // empty: none
  std::string salt;  // empty: none
};

class Trace {
 public:
  explicit Trace(uint64_t seed) : rng_(seed) {
    // Sequences branch off one another at block boundaries, so prefixes are shared.
    for (int s = 0; s < 24; ++s) {
      std::vector<uint32_t> t;
      const size_t blocks = 2 + pick(14);
      if (s > 0 && pick(3) != 0) {
        const auto& from = seqs_[pick(seqs_.size())];
        const size_t keep = pick(from.size() / kBs + 1) * kBs;
        t.assign(from.begin(), from.begin() + static_cast<long>(std::min(keep, from.size())));
      }
      while (t.size() < blocks * kBs) t.push_back(static_cast<uint32_t>(pick(50)));  // small vocabulary
      seqs_.push_back(std::move(t));
    }
    spaces_ = {{"", ""}, {"adapter-a", ""}, {"", "tenant-7"}, {"adapter-a", "tenant-7"}, {"adapter-b", ""}};
  }

  size_t pick(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  // vLLM's hash of block b of seq s in namespace ns: a function of the whole prefix and the
  // namespace (so equal prefixes in one namespace share hashes, as in vLLM).
  uint64_t hash_of(size_t s, size_t b, size_t ns) const {
    const uint64_t seed = XXH3_64bits(spaces_[ns].lora.data(), spaces_[ns].lora.size()) * 31 +
                          XXH3_64bits(spaces_[ns].salt.data(), spaces_[ns].salt.size());
    return XXH3_64bits_withSeed(seqs_[s].data(), (b + 1) * kBs * sizeof(uint32_t), seed);
  }

  kv::Event next_event() {
    const size_t r = pick(100);
    if (r < 1) return kv::AllBlocksCleared{};
    if (r < 35) return removed();
    return stored();
  }

  BlockStored stored() {
    const size_t s = pick(seqs_.size());
    const size_t n = seqs_[s].size() / kBs;
    const size_t from = chance(0.5) ? 0 : pick(n);
    const size_t to = from + 1 + pick(std::min<size_t>(n - from, 6));
    const size_t ns = chance(0.6) ? 0 : pick(spaces_.size());
    BlockStored e;
    for (size_t b = from; b < to; ++b) e.block_hashes.push_back(BlockHash::from_uint(hash_of(s, b, ns)));
    if (from > 0) e.parent_block_hash = BlockHash::from_uint(hash_of(s, from - 1, ns));
    e.token_ids.assign(seqs_[s].begin() + static_cast<long>(from * kBs), seqs_[s].begin() + static_cast<long>(to * kBs));
    e.block_size = kBs;
    e.medium = chance(0.05) ? "CPU" : "GPU";
    if (chance(0.05)) e.locality = "REMOTE";
    const size_t g = pick(10);
    e.group_idx = g < 7 ? 0 : g < 9 ? 1 : 2;  // 1: sliding window (skipped), 2: a second main group
    if (chance(0.9)) e.kv_cache_spec_kind = *e.group_idx == 1 ? "sliding_window" : "full_attention";
    if (!spaces_[ns].lora.empty()) {
      e.lora_name = spaces_[ns].lora;
      e.lora_id = 1;
    }
    if (!spaces_[ns].salt.empty() && from == 0) {
      e.extra_keys = kv::ExtraKeys(to - from);
      (*e.extra_keys)[0] = extra_key(spaces_[ns].salt);
    }
    if (chance(0.02)) e.extra_keys = kv::ExtraKeys{std::string("\x92\xa1x\x01", 4)};  // unparseable shape: skipped
    last_stores_.push_back(e);
    if (last_stores_.size() > 64) last_stores_.erase(last_stores_.begin());
    return e;
  }

  BlockRemoved removed() {
    BlockRemoved e;
    e.medium = chance(0.03) ? "CPU" : "GPU";
    if (!last_stores_.empty() && chance(0.85)) {
      const BlockStored& s = last_stores_[pick(last_stores_.size())];
      const size_t k = 1 + pick(s.block_hashes.size());
      // the tail first, as vLLM evicts a request's blocks
      for (size_t i = 0; i < k; ++i) e.block_hashes.push_back(s.block_hashes[s.block_hashes.size() - 1 - i]);
      e.group_idx = chance(0.9) ? s.group_idx : std::optional<uint32_t>(pick(3));
    } else {
      e.block_hashes.push_back(BlockHash::from_uint(rng_()));  // never stored
      e.group_idx = 0;
    }
    return e;
  }

  // A request: a prefix of a sequence (maybe a partial last block), sometimes with one token
  // changed, in some namespace.
  struct Request {
    std::vector<uint32_t> tokens;
    std::string model;
    std::string salt;
  };
  Request request() {
    Request q;
    const auto& t = seqs_[pick(seqs_.size())];
    q.tokens.assign(t.begin(), t.begin() + static_cast<long>(1 + pick(t.size())));
    if (chance(0.3)) q.tokens[pick(q.tokens.size())] ^= 1;
    if (chance(0.2)) q.tokens.insert(q.tokens.end(), kBs, 3);
    const size_t ns = chance(0.5) ? 0 : pick(spaces_.size());
    q.model = spaces_[ns].lora.empty() ? std::string("base-model") : spaces_[ns].lora;
    q.salt = spaces_[ns].salt;
    return q;
  }

  uint32_t rank() { return chance(0.1) ? 1 : 0; }

 private:
  std::mt19937_64 rng_;
  std::vector<std::vector<uint32_t>> seqs_;
  std::vector<Namespace> spaces_;
  std::vector<BlockStored> last_stores_;
};

std::array<uint8_t, 32> secret() {
  std::array<uint8_t, 32> s{};
  std::iota(s.begin(), s.end(), uint8_t{42});
  return s;
}

TEST(DigestInventory, AnswersEveryLookupAsTheRawInventoryOverRandomTraces) {
  constexpr int kTraces = 24, kSteps = 400, kLookups = 12;
  const auto key = DigestKey::from_secret(secret());
  uint64_t lookups = 0, nonzero = 0, applied = 0;
  for (int trace = 0; trace < kTraces; ++trace) {
    Trace tr(1000 + static_cast<uint64_t>(trace));
    Inventory raw, dig({}, key);
    ASSERT_EQ(dig.digest_key(), key.get());
    for (int step = 0; step < kSteps; ++step) {
      EventBatch b;
      b.ts = 1.0;
      b.data_parallel_rank = tr.rank();
      const size_t events = 1 + tr.pick(6);
      for (size_t i = 0; i < events; ++i) b.events.push_back(tr.next_event());
      ApplyCounts rc, dc;
      const auto re = raw.apply(b, &rc);
      const auto de = dig.apply(b, &dc);
      ASSERT_EQ(re, de) << "trace " << trace << " step " << step;
      if (re) {  // the caller would fence and clear both
        raw.clear();
        dig.clear();
      }
      ASSERT_EQ(rc.stored, dc.stored);
      ASSERT_EQ(rc.removed, dc.removed);
      applied += rc.stored + rc.removed;
      ASSERT_EQ(raw.shard().blocks(), dig.shard().blocks());
      ASSERT_EQ(raw.shard().resident_blocks(), dig.shard().resident_blocks());
      ASSERT_EQ(raw.shard().removal_keys(), dig.shard().removal_keys());
      ASSERT_EQ(raw.block_size(), dig.block_size());
      for (size_t s = 0; s < static_cast<size_t>(Skip::kCount_); ++s) {
        ASSERT_EQ(raw.skipped(static_cast<Skip>(s)), dig.skipped(static_cast<Skip>(s)));
      }
      for (int q = 0; q < kLookups; ++q) {
        const auto req = tr.request();
        const Inventory* both[] = {&raw, &dig};
        std::optional<uint32_t> out[2];
        lookup(both, ExactRequest{req.tokens, req.model, req.salt}, out);
        ASSERT_TRUE(out[0] && out[1]);
        ASSERT_EQ(*out[0], *out[1]) << "trace " << trace << " step " << step;
        ++lookups;
        nonzero += *out[0] != 0;
      }
    }
    ASSERT_TRUE(dig.shard().check_invariants());
    // A snapshot's state imported into a fresh digest inventory answers as the raw one does.
    InventoryState state;
    dig.export_state(state);
    Inventory copy({}, key);
    ASSERT_FALSE(copy.import_state(state));
    ASSERT_TRUE(copy.shard().check_invariants());
    ASSERT_EQ(copy.shard().blocks(), dig.shard().blocks());
    for (int q = 0; q < 200; ++q) {
      const auto req = tr.request();
      const Inventory* both[] = {&raw, &copy};
      std::optional<uint32_t> out[2];
      lookup(both, ExactRequest{req.tokens, req.model, req.salt}, out);
      ASSERT_EQ(out[0], out[1]);
      ++lookups;
    }
  }
  // The traces must exercise hits, not only misses.
  EXPECT_GT(nonzero, lookups / 5);
  EXPECT_GT(applied, 10000u);
  std::printf("differential: %d traces x %d batches, %llu lookups (%llu non-zero), %llu blocks applied\n", kTraces,
              kSteps, static_cast<unsigned long long>(lookups), static_cast<unsigned long long>(nonzero),
              static_cast<unsigned long long>(applied));
}

TEST(DigestInventory, HoldsNoTokenIdsAndAnotherKeyFindsNothing) {
  const auto key = DigestKey::from_secret(secret());
  auto other_secret = secret();
  other_secret[0] ^= 1;
  Inventory dig({}, key), other({}, DigestKey::from_secret(other_secret));
  std::vector<uint32_t> t(4 * kBs);
  std::iota(t.begin(), t.end(), 1u);
  BlockStored e;
  for (uint64_t i = 0; i < 4; ++i) e.block_hashes.push_back(BlockHash::from_uint(i + 1));
  e.token_ids = t;
  e.block_size = kBs;
  EventBatch b;
  b.events.push_back(e);
  ASSERT_FALSE(dig.apply(b));
  ASSERT_FALSE(other.apply(b));
  // A raw chain (token keys) does not match the digest shard, and each key matches only itself.
  std::vector<uint64_t> raw_chain, dig_chain;
  exact_chain(t, kBs, exact_root_seed(kBs), raw_chain);
  digest_chain(*key, t, kBs, exact_root_seed(kBs), dig_chain);
  EXPECT_EQ(dig.match(raw_chain), 0u);
  EXPECT_EQ(dig.match(dig_chain), 4u);
  EXPECT_EQ(other.match(dig_chain), 0u);
  const Inventory* both[] = {&dig, &other};
  std::optional<uint32_t> out[2];
  lookup(both, ExactRequest{t, {}, {}}, out);
  EXPECT_EQ(out[0], 4 * kBs);
  EXPECT_EQ(out[1], 4 * kBs);
}

}  // namespace
}  // namespace ramjet::cache::events

namespace ramjet::cache::events {
namespace {

TEST(DigestInventory, RefusesABadShapeAsTheRawInventoryDoes) {
  std::array<uint8_t, 32> s{};
  s.fill(0x5a);
  Inventory raw, dig({}, DigestKey::from_secret(s));
  auto store = [](uint32_t block_size, size_t tokens) {
    BlockStored e;
    e.block_hashes = {BlockHash::from_uint(1), BlockHash::from_uint(2)};
    e.token_ids.assign(tokens, 3);
    e.block_size = block_size;
    EventBatch b;
    b.events.push_back(e);
    return b;
  };
  for (const auto& b : {store(kBs, 2 * kBs - 1), store(kBs, 2 * kBs + 1), store(0, 0), store(0, 2 * kBs)}) {
    ASSERT_FALSE(raw.apply(b));
    ASSERT_FALSE(dig.apply(b));
  }
  EXPECT_EQ(raw.skipped(Skip::kShape), 8u);
  EXPECT_EQ(dig.skipped(Skip::kShape), 8u);
  EXPECT_EQ(dig.shard().blocks(), 0u);
}

}  // namespace
}  // namespace ramjet::cache::events
