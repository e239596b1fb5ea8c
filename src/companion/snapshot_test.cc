#include "companion/snapshot.h"

#include <gtest/gtest.h>

#include <numeric>

namespace ramjet::companion {
namespace {

using cache::events::Inventory;
using cache::events::InventoryState;

std::shared_ptr<const cache::DigestKey> key() {
  std::array<uint8_t, 32> s{};
  std::iota(s.begin(), s.end(), uint8_t{9});
  return cache::DigestKey::from_secret(s);
}

// A digest inventory holding a few prompts below a shared system prompt, one in an adapter's
// namespace, one group learned as sliding window.
void fill(Inventory& inv) {
  std::vector<uint32_t> t(16 * 12);
  std::iota(t.begin(), t.end(), 5u);
  cache::kv::EventBatch b;
  cache::kv::BlockStored e;
  for (uint64_t i = 0; i < 12; ++i) e.block_hashes.push_back(cache::kv::BlockHash::from_uint(100 + i));
  e.token_ids = t;
  e.block_size = 16;
  e.kv_cache_spec_kind = "full_attention";
  b.events.push_back(e);
  auto lora = e;
  for (auto& h : lora.block_hashes) h = cache::kv::BlockHash::from_uint(h.low64() + 1000);
  lora.lora_name = "adapter";
  b.events.push_back(lora);
  auto sw = e;
  sw.group_idx = 1;
  sw.kv_cache_spec_kind = "sliding_window";
  b.events.push_back(sw);
  cache::kv::BlockRemoved r;
  r.block_hashes = {cache::kv::BlockHash::from_uint(105)};
  b.events.push_back(r);
  ASSERT_FALSE(inv.apply(b));
}

Snapshot sample(Inventory& inv) {
  SnapshotHeader h;
  h.challenge.fill(7);
  h.key_id = inv.digest_key()->key_id();
  h.generation = 3;
  h.last_event_sequence = 41;
  h.incarnation = "engine-0/rev-a/1700000000";
  return capture_snapshot(inv, h);
}

TEST(Snapshot, RoundTripsAndImportsIntoAnEqualInventory) {
  Inventory inv({}, key());
  fill(inv);
  const Snapshot s = sample(inv);
  ASSERT_EQ(s.state.blocks.size(), inv.shard().blocks());
  const std::string bytes = encode_snapshot(s);
  const auto d = decode_snapshot(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  ASSERT_TRUE(d.ok()) << d.error().reason();
  EXPECT_EQ(d->header.challenge, s.header.challenge);
  EXPECT_EQ(d->header.generation, 3u);
  EXPECT_EQ(d->header.last_event_sequence, 41u);
  EXPECT_EQ(d->header.incarnation, s.header.incarnation);
  EXPECT_EQ(d->state.block_size, 16u);
  EXPECT_EQ(d->state.groups.size(), 2u);
  EXPECT_EQ(d->state.loras, std::vector<std::string>{"adapter"});
  EXPECT_EQ(encode_snapshot(*d), bytes);
  EXPECT_FALSE(verify_binding(d->header, s.header.challenge, inv.digest_key()->key_id()));

  Inventory copy({}, key());
  ASSERT_FALSE(import_snapshot(*d, copy));
  EXPECT_TRUE(copy.shard().check_invariants());
  EXPECT_EQ(copy.shard().resident_blocks(), inv.shard().resident_blocks());
  EXPECT_TRUE(copy.knows_lora("adapter"));
  std::vector<uint32_t> t(16 * 12);
  std::iota(t.begin(), t.end(), 5u);
  const Inventory* both[] = {&inv, &copy};
  for (std::string_view model : {"base", "adapter"}) {
    std::optional<uint32_t> out[2];
    cache::events::lookup(both, cache::events::ExactRequest{t, model, {}}, out);
    EXPECT_EQ(out[0], model == "base" ? 5u * 16 : 12u * 16) << "block 5 was removed in the base namespace only";
    EXPECT_EQ(out[1], out[0]);
  }
  // The learned sliding-window group still filters its removals after the import.
  cache::kv::EventBatch b;
  cache::kv::BlockRemoved r;
  r.block_hashes = {cache::kv::BlockHash::from_uint(101)};
  r.group_idx = 1;
  b.events.push_back(r);
  ASSERT_FALSE(copy.apply(b));
  EXPECT_EQ(copy.skipped(cache::events::Skip::kNonMainAttention), 1u);
}

TEST(Snapshot, ABindingToAnotherChallengeOrKeyIsRejected) {
  Inventory inv({}, key());
  fill(inv);
  const Snapshot s = sample(inv);
  Challenge other{};
  EXPECT_EQ(verify_binding(s.header, other, s.header.key_id)->code, SnapshotErrc::kWrongChallenge);
  cache::DigestKeyId other_key{};
  EXPECT_EQ(verify_binding(s.header, s.header.challenge, other_key)->code, SnapshotErrc::kWrongKey);
  Inventory raw;
  EXPECT_EQ(import_snapshot(s, raw)->code, SnapshotErrc::kWrongKey) << "a raw inventory takes no digest snapshot";
}

TEST(Snapshot, HostileBytesGiveTypedErrors) {
  Inventory inv({}, key());
  fill(inv);
  const std::string good = encode_snapshot(sample(inv));
  const auto decode = [](const std::string& b, SnapshotLimits l = {}) {
    return decode_snapshot(std::span(reinterpret_cast<const uint8_t*>(b.data()), b.size()), l);
  };
  const auto code = [&](const std::string& b, SnapshotLimits l = {}) {
    auto r = decode(b, l);
    return r.ok() ? std::optional<SnapshotErrc>() : r.error().code;
  };
  EXPECT_EQ(code(""), SnapshotErrc::kTruncated);
  EXPECT_EQ(code(good.substr(0, good.size() - 1)), SnapshotErrc::kTruncated);
  EXPECT_EQ(code(good + "x"), SnapshotErrc::kMalformed);
  std::string bad = good;
  bad[0] = 'X';
  EXPECT_EQ(code(bad), SnapshotErrc::kBadMagic);
  bad = good;
  bad[8] = 2;
  EXPECT_EQ(code(bad), SnapshotErrc::kBadVersion);
  bad = good;
  bad[good.size() / 2] ^= 1;
  EXPECT_EQ(code(bad), SnapshotErrc::kBadChecksum);
  EXPECT_EQ(code(good, {.max_bytes = 100}), SnapshotErrc::kOversized);
  EXPECT_EQ(code(good, {.max_records = 2}), SnapshotErrc::kLimit);
  EXPECT_EQ(code(good, {.max_string_bytes = 4}), SnapshotErrc::kLimit);
  // A body length beyond the bytes.
  bad = good;
  bad[16] = static_cast<char>(0xff);
  EXPECT_EQ(code(bad), SnapshotErrc::kTruncated);
  // Records inconsistent as a shard: decode accepts them, the import does not.
  Snapshot s = sample(inv);
  s.state.blocks[1].parent = 5;
  auto d = decode(encode_snapshot(s));
  ASSERT_TRUE(d.ok());
  Inventory copy({}, key());
  const auto err = import_snapshot(*d, copy);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, SnapshotErrc::kImport);
  EXPECT_EQ(err->import_error, cache::ExactImportErrc::kParent);
  EXPECT_EQ(copy.shard().blocks(), 0u);
  EXPECT_EQ(copy.block_size(), 0u);
  s = sample(inv);
  s.state.block_size = 0;
  EXPECT_EQ(import_snapshot(s, copy)->import_error, cache::ExactImportErrc::kShape) << "blocks without a block size";
}

}  // namespace
}  // namespace ramjet::companion
