// cache/kv round trips: encode_batch() then decode_batch() gives the batch back, for every event
// type and every combination of optional fields, in the map layout and every array width.
#include <gtest/gtest.h>

#include "cache/kv/codec.h"
#include "cache/kv/codec_testing.h"

namespace ramjet::cache::kv {
namespace {

using namespace testing;

BlockHash hash_form(uint32_t i) {
  switch (i % 5) {
    case 0:
      return BlockHash::from_uint(0xdab89baa7b5857c0ull + i);
    case 1:
      return BlockHash::from_int(-static_cast<int64_t>(i) - 1);
    case 2:
      return digest(i);
    case 3: {
      std::vector<uint8_t> b(16, static_cast<uint8_t>(i));
      return BlockHash::from_bytes(b);
    }
    default: {
      const uint8_t one[1] = {static_cast<uint8_t>(i)};
      return BlockHash::from_bytes(one);
    }
  }
}

// Optional BlockStored fields in declaration order; bit i of `mask` sets field i.
constexpr int kStoredOptional = 10;
BlockStored stored_with(uint32_t mask) {
  BlockStored s;
  s.block_hashes = {hash_form(mask), hash_form(mask + 1)};
  s.token_ids = {0, 127, 128, 65536, 4294967295u, 5};
  s.block_size = 3;
  if (mask & 1) s.parent_block_hash = hash_form(mask + 2);
  if (mask & 2) s.lora_id = (mask & 4) ? -7 : 123456789012;
  if (mask & 4) s.medium = "GPU";
  if (mask & 8) s.lora_name = "adapter-é";
  if (mask & 16) s.extra_keys = ExtraKeys{std::nullopt, spec_bytes("92 a2 \"mm\" 05")};
  if (mask & 32) s.group_idx = mask;
  if (mask & 64) s.kv_cache_spec_kind = "full_attention";
  if (mask & 128) s.kv_cache_spec_sliding_window = 4096;
  if (mask & 256) s.locality = "LOCAL";
  if (mask & 512) s.ownership = "tier-2";
  return s;
}

constexpr int kRemovedOptional = 4;
BlockRemoved removed_with(uint32_t mask) {
  BlockRemoved r;
  for (uint32_t i = 0; i < mask % 3; ++i) r.block_hashes.push_back(hash_form(mask + i));
  if (mask & 1) r.medium = "CPU";
  if (mask & 2) r.group_idx = 70000;
  if (mask & 4) r.locality = "REMOTE";
  if (mask & 8) r.ownership = "t";
  return r;
}

EventBatch round_trip(const EventBatch& b, const EncodeOptions& o) {
  const std::string bytes = encode_batch(b, o);
  auto decoded = decode_batch(bytes);
  EXPECT_TRUE(decoded.ok()) << (decoded.ok() ? "" : decoded.error().message);
  return decoded.ok() ? decoded.value() : EventBatch{};
}

const EncodeOptions kMap{Layout::kMap, false, {}};
const EncodeOptions kWidestArray{Layout::kArray, false, ArrayLayout{14, 6, true}};

TEST(KvCodecRoundTrip, EveryBlockStoredFieldCombinationInBothLayouts) {
  for (uint32_t mask = 0; mask < (1u << kStoredOptional); ++mask) {
    const EventBatch b{1789095808.83, {stored_with(mask)}, mask % 4};
    EXPECT_EQ(round_trip(b, kMap), b) << "map, mask " << mask;
    EXPECT_EQ(round_trip(b, kWidestArray), b) << "array, mask " << mask;
  }
}

TEST(KvCodecRoundTrip, EveryBlockRemovedFieldCombinationInBothLayouts) {
  for (uint32_t mask = 0; mask < (1u << kRemovedOptional); ++mask) {
    const EventBatch b{0.5, {removed_with(mask)}, std::nullopt};
    EXPECT_EQ(round_trip(b, kMap), b) << "map, mask " << mask;
    EXPECT_EQ(round_trip(b, kWidestArray), b) << "array, mask " << mask;
  }
}

TEST(KvCodecRoundTrip, AllBlocksClearedAndMixedBatches) {
  EventBatch b{-3.25, {AllBlocksCleared{}}, 0};
  EXPECT_EQ(round_trip(b, kMap), b);
  EXPECT_EQ(round_trip(b, kWidestArray), b);
  b.events = {stored_with(1023), removed_with(15), AllBlocksCleared{}, stored_with(0),
              removed_with(0)};
  EXPECT_EQ(round_trip(b, kMap), b);
  EXPECT_EQ(round_trip(b, kWidestArray), b);
  const EventBatch empty{7.0, {}, 1};
  EXPECT_EQ(round_trip(empty, kMap), empty);
  EXPECT_EQ(round_trip(empty, kWidestArray), empty);
}

// Each older array width carries the fields of its release; the later ones decode as None.
TEST(KvCodecRoundTrip, EveryArrayWidthKeepsTheFieldsItHas) {
  const BlockStored full = stored_with((1u << kStoredOptional) - 1);
  const BlockRemoved full_r = removed_with((1u << kRemovedOptional) - 1);
  for (int width = 6; width <= 14; ++width) {
    BlockStored expect = full;
    if (width < 7) expect.medium.reset();
    if (width < 8) expect.lora_name.reset();
    if (width < 9) expect.extra_keys.reset();
    if (width < 10) expect.group_idx.reset();
    if (width < 11) expect.kv_cache_spec_kind.reset();
    if (width < 12) expect.kv_cache_spec_sliding_window.reset();
    if (width < 13) expect.locality.reset();
    if (width < 14) expect.ownership.reset();
    const int removed_width = std::min(6, width - 4);  // 2..6
    BlockRemoved expect_r = full_r;
    if (removed_width < 3) expect_r.medium.reset();
    if (removed_width < 4) expect_r.group_idx.reset();
    if (removed_width < 5) expect_r.locality.reset();
    if (removed_width < 6) expect_r.ownership.reset();
    for (bool rank : {false, true}) {
      const EncodeOptions o{Layout::kArray, false, ArrayLayout{width, removed_width, rank}};
      const EventBatch got = round_trip(EventBatch{2.0, {full, full_r}, 3}, o);
      const EventBatch want{
          2.0, {expect, expect_r}, rank ? std::optional<uint32_t>(3) : std::nullopt};
      EXPECT_EQ(got, want) << "width " << width << " rank " << rank;
    }
  }
}

TEST(KvCodecRoundTrip, IntBlockHashesPublishTheLowSixtyFourBits) {
  const BlockStored s = gpu_stored({kKthenaHash, 9}, 7, {1, 2}, 1);
  const EventBatch got = round_trip(EventBatch{0.0, {s}, 0}, EncodeOptions{Layout::kMap, true, {}});
  ASSERT_EQ(got.events.size(), 1u);
  const auto& e = std::get<BlockStored>(got.events[0]);
  EXPECT_EQ(e.block_hashes,
            (std::vector<BlockHash>{BlockHash::from_uint(kKthenaHash), BlockHash::from_uint(9)}));
  EXPECT_EQ(e.parent_block_hash, BlockHash::from_uint(7));
  EXPECT_EQ(e.extra_keys, ExtraKeys(2));
}

}  // namespace
}  // namespace ramjet::cache::kv
