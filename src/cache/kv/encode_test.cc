// cache/kv encoder tests: msgspec-exact bytes for both layouts (the example batches vLLM's
// layouts are documented with, every array width, int and str forms, bin digests). Moved with
// the encoder from sim/kv; the expected bytes are unchanged.
#include <gtest/gtest.h>

#include <cstring>

#include "cache/kv/codec.h"
#include "cache/kv/codec_testing.h"

namespace ramjet::cache::kv {
namespace {

using namespace testing;

// What ramjet-sim publishes by default: map layout, 64-bit int hashes.
const EncodeOptions kMapU64{Layout::kMap, true, {}};
const EncodeOptions kArrayU64{Layout::kArray, true, {}};

std::string encode(double ts, std::vector<Event> events, std::optional<uint32_t> rank,
                   const EncodeOptions& o) {
  return encode_batch(EventBatch{ts, std::move(events), rank}, o);
}

TEST(KvEncode, Low64IsLastEightBytesBigEndian) {
  EXPECT_EQ(digest(kKthenaHash).low64(), kKthenaHash);
  EXPECT_EQ(digest(7).low64(), 7u);
}

// The example bytes (encoded with msgpack) for a 1-block store, a remove and a clear in the
// 8-field BlockStored / 3-field BlockRemoved array layout (≈v0.10).
TEST(KvEncode, LegacyArrayExampleFromSpec) {
  const std::string expected = spec_bytes(
      "93 cb 41 d9 54 fc 40 20 00 00 93 98 ab \"BlockStored\" 91 cf da b8 9b aa 7b 58 57 c0 c0 94 "
      "01 02 03 04 04 c0 a3 \"GPU\" c0 93 ac \"BlockRemoved\" 91 07 a3 \"GPU\" 91 b0 "
      "\"AllBlocksCleared\" 00");
  const std::vector<Event> events{gpu_stored({kKthenaHash}, std::nullopt, {1, 2, 3, 4}, 4),
                                  gpu_removed({7}), AllBlocksCleared{}};
  const std::string got =
      encode(1700000000.5, events, 0, EncodeOptions{Layout::kArray, true, ArrayLayout{8, 3, true}});
  EXPECT_EQ(hex(got), hex(expected));
}

// The default array layout is the last array_like one: BlockStored 12 fields, BlockRemoved 4.
TEST(KvEncode, ArrayFormatLatestLayout) {
  const std::string expected = spec_bytes(
      "93 cb 41 d9 54 fc 40 20 00 00 93 9c ab \"BlockStored\" 91 cf da b8 9b aa 7b 58 57 c0 c0 94 "
      "01 02 03 04 04 c0 a3 \"GPU\" c0 91 c0 00 ae \"full_attention\" c0 "
      "94 ac \"BlockRemoved\" 91 07 a3 \"GPU\" 00 91 b0 \"AllBlocksCleared\" 00");
  const std::vector<Event> events{gpu_stored({kKthenaHash}, std::nullopt, {1, 2, 3, 4}, 4),
                                  gpu_removed({7}), AllBlocksCleared{}};
  EXPECT_EQ(hex(encode(1700000000.5, events, 0, kArrayU64)), hex(expected));
}

// The map layout as captured from a live vLLM 0.26.0: "93 cb <ts> 93 8b a4 "type" ab
// "BlockStored" ac "block_hashes" 91 cf <8 bytes> …" — with three events.
TEST(KvEncode, MapFormatExampleFromSpec) {
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 16; ++i) tokens.push_back(1000 + i * 17);
  const std::vector<Event> events{gpu_stored({kKthenaHash}, std::nullopt, tokens, 16),
                                  gpu_removed({7}), AllBlocksCleared{}};
  const double ts = 1789095808.83;
  const std::string got = encode(ts, events, 0, kMapU64);
  uint64_t bits;
  std::memcpy(&bits, &ts, 8);
  const std::string prefix = spec_bytes("93 cb") + be64(bits) +
                             spec_bytes(
                                 "93 8b a4 \"type\" ab \"BlockStored\" ac \"block_hashes\" "
                                 "91 cf da b8 9b aa 7b 58 57 c0");
  ASSERT_GE(got.size(), prefix.size());
  EXPECT_EQ(hex(got.substr(0, prefix.size())), hex(prefix));

  std::string tok = spec_bytes("dc 00 10");
  for (uint32_t t : tokens) tok += spec_bytes("cd") + be64(t).substr(6);
  const std::string rest =
      spec_bytes("b1 \"parent_block_hash\" c0 a9 \"token_ids\"") + tok +
      spec_bytes(
          "aa \"block_size\" 10 a7 \"lora_id\" c0 a6 \"medium\" a3 \"GPU\" a9 \"lora_name\" c0 "
          "aa \"extra_keys\" 91 c0 a9 \"group_idx\" 00 b2 \"kv_cache_spec_kind\" "
          "ae \"full_attention\" "
          "84 a4 \"type\" ac \"BlockRemoved\" ac \"block_hashes\" 91 07 a6 \"medium\" "
          "a3 \"GPU\" a9 \"group_idx\" 00 "
          "81 a4 \"type\" b0 \"AllBlocksCleared\" 00");
  EXPECT_EQ(hex(got), hex(prefix + rest));
}

TEST(KvEncode, MapOmitsNoneSpecKindAndKeepsExtraKeysPerBlock) {
  BlockStored s = gpu_stored({1, 2}, 9, {1, 2, 3, 4}, 2);
  s.kv_cache_spec_kind.reset();  // None == default -> omitted
  s.group_idx = 3;
  const std::string got = encode(1.0, {s}, 5, kMapU64);
  const std::string expected = spec_bytes(
      "93 cb 3f f0 00 00 00 00 00 00 91 8a a4 \"type\" ab \"BlockStored\" "
      "ac \"block_hashes\" 92 01 02 b1 \"parent_block_hash\" 09 a9 \"token_ids\" "
      "94 01 02 03 04 aa \"block_size\" 02 a7 \"lora_id\" c0 a6 \"medium\" a3 \"GPU\" "
      "a9 \"lora_name\" c0 aa \"extra_keys\" 92 c0 c0 a9 \"group_idx\" 03 05");
  EXPECT_EQ(hex(got), hex(expected));
  // Array format: every field, None as nil.
  const std::string arr = encode(1.0, {s}, 5, kArrayU64);
  EXPECT_EQ(hex(arr), hex(spec_bytes("93 cb 3f f0 00 00 00 00 00 00 91 9c ab \"BlockStored\" "
                                     "92 01 02 09 94 01 02 03 04 02 c0 a3 \"GPU\" c0 92 c0 c0 03 "
                                     "c0 c0 05")));
}

TEST(KvEncode, BytesHashesAreBin32) {
  const BlockHash d = digest(kKthenaHash);
  const std::string got =
      encode(0.5, {gpu_removed({kKthenaHash})}, 0, EncodeOptions{Layout::kArray, false, {}});
  const std::string expected =
      spec_bytes("93 cb 3f e0 00 00 00 00 00 00 91 94 ac \"BlockRemoved\" 91 c4 20") +
      std::string(reinterpret_cast<const char*>(d.bytes().data()), 32) +
      spec_bytes("a3 \"GPU\" 00 00");
  EXPECT_EQ(hex(got), hex(expected));
}

TEST(KvEncode, ShortestIntForms) {
  struct Case {
    uint64_t v;
    const char* bytes;
  } cases[] = {{0, "00"},
               {0x7f, "7f"},
               {0x80, "cc 80"},
               {0xff, "cc ff"},
               {0x100, "cd 01 00"},
               {0xffff, "cd ff ff"},
               {0x10000, "ce 00 01 00 00"},
               {0xffffffff, "ce ff ff ff ff"},
               {0x100000000, "cf 00 00 00 01 00 00 00 00"},
               {0x7fffffffffffffff, "cf 7f ff ff ff ff ff ff ff"},
               {0x8000000000000000, "cf 80 00 00 00 00 00 00 00"}};
  for (const auto& c : cases) {
    const std::string got = encode(0.0, {gpu_removed({c.v})}, 0, kArrayU64);
    const std::string expected =
        spec_bytes("93 cb 00 00 00 00 00 00 00 00 91 94 ac \"BlockRemoved\" 91 ") +
        spec_bytes(c.bytes) + spec_bytes("a3 \"GPU\" 00 00");
    EXPECT_EQ(hex(got), hex(expected)) << c.v;
  }
}

TEST(KvEncode, LongStringsUseStr8AndManyEventsArray16) {
  BlockRemoved r = gpu_removed({1});
  r.medium = std::string(40, 'M');
  std::vector<Event> events(16, Event{AllBlocksCleared{}});
  events[0] = r;
  const std::string got = encode(0.0, events, 0, kMapU64);
  std::string expected = spec_bytes(
                             "93 cb 00 00 00 00 00 00 00 00 dc 00 10 84 a4 \"type\" "
                             "ac \"BlockRemoved\" ac \"block_hashes\" 91 01 a6 \"medium\" d9 28") +
                         std::string(40, 'M') + spec_bytes("a9 \"group_idx\" 00");
  for (int i = 1; i < 16; ++i) expected += spec_bytes("81 a4 \"type\" b0 \"AllBlocksCleared\"");
  expected += spec_bytes("00");
  EXPECT_EQ(hex(got), hex(expected));
}

TEST(KvEncode, OldestArrayLayoutHasNoRankAndSixFields) {
  const std::string got = encode(0.0, {gpu_stored({1}, std::nullopt, {5}, 1), gpu_removed({2})}, 0,
                                 EncodeOptions{Layout::kArray, true, ArrayLayout{6, 2, false}});
  EXPECT_EQ(hex(got), hex(spec_bytes("92 cb 00 00 00 00 00 00 00 00 92 96 ab \"BlockStored\" 91 01 "
                                     "c0 91 05 01 c0 92 ac \"BlockRemoved\" 91 02")));
}

// Fields the simulator never sets: written in declaration order, None-default ones only when set.
TEST(KvEncode, EveryOptionalFieldInBothLayouts) {
  BlockStored s;
  s.block_hashes = {BlockHash::from_int(-2)};
  s.parent_block_hash = BlockHash::from_uint(300);
  s.token_ids = {7};
  s.block_size = 1;
  s.lora_id = 3;
  s.medium = "CPU";
  s.lora_name = "ad";
  s.extra_keys = ExtraKeys{spec_bytes("91 a2 \"ad\"")};
  s.group_idx = 1;
  s.kv_cache_spec_kind = "sliding_window";
  s.kv_cache_spec_sliding_window = 128;
  s.locality = "LOCAL";
  s.ownership = "t1";
  BlockRemoved r;
  r.block_hashes = {BlockHash::from_uint(1)};
  r.locality = "REMOTE";
  r.ownership = "t1";
  const std::string map = encode(0.0, {s, r}, std::nullopt, kMapU64);
  EXPECT_EQ(
      hex(map),
      hex(spec_bytes(
          "93 cb 00 00 00 00 00 00 00 00 92 8e a4 \"type\" ab \"BlockStored\" "
          "ac \"block_hashes\" 91 fe b1 \"parent_block_hash\" cd 01 2c a9 \"token_ids\" 91 07 "
          "aa \"block_size\" 01 a7 \"lora_id\" 03 a6 \"medium\" a3 \"CPU\" a9 \"lora_name\" "
          "a2 \"ad\" aa \"extra_keys\" 91 91 a2 \"ad\" a9 \"group_idx\" 01 "
          "b2 \"kv_cache_spec_kind\" ae \"sliding_window\" "
          "bc \"kv_cache_spec_sliding_window\" cc 80 a8 \"locality\" a5 \"LOCAL\" "
          "a9 \"ownership\" a2 \"t1\" "
          "85 a4 \"type\" ac \"BlockRemoved\" ac \"block_hashes\" 91 01 a6 \"medium\" c0 "
          "a8 \"locality\" a6 \"REMOTE\" a9 \"ownership\" a2 \"t1\" c0")));
  const std::string arr =
      encode(0.0, {s, r}, 2, EncodeOptions{Layout::kArray, true, ArrayLayout{14, 6, true}});
  EXPECT_EQ(hex(arr), hex(spec_bytes("93 cb 00 00 00 00 00 00 00 00 92 9e ab \"BlockStored\" 91 fe "
                                     "cd 01 2c 91 07 01 03 a3 \"CPU\" a2 \"ad\" 91 91 a2 \"ad\" 01 "
                                     "ae \"sliding_window\" cc 80 a5 \"LOCAL\" a2 \"t1\" "
                                     "96 ac \"BlockRemoved\" 91 01 c0 c0 a6 \"REMOTE\" a2 \"t1\" "
                                     "02")));
}

}  // namespace
}  // namespace ramjet::cache::kv
