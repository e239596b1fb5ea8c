// cache/kv decoder tests: hand-written payloads (map fields in any order, unknown fields, the
// documented example bytes of both layouts), every limit and every malformed shape giving its
// typed error, and truncation at every byte offset.
#include <gtest/gtest.h>

#include "cache/kv/codec.h"
#include "cache/kv/codec_testing.h"

namespace ramjet::cache::kv {
namespace {

using namespace testing;

const std::string kTs1 = spec_bytes("cb 3f f0 00 00 00 00 00 00");  // 1.0

EventBatch ok(std::string_view bytes, const DecodeLimits& limits = {}) {
  auto r = decode_batch(bytes, limits);
  EXPECT_TRUE(r.ok()) << (r.ok() ? ""
                                 : std::string(r.error().reason()) + ": " +
                                       std::string(r.error().message));
  return r.ok() ? r.value() : EventBatch{};
}

DecodeErrc err(std::string_view bytes, const DecodeLimits& limits = {}) {
  auto r = decode_batch(bytes, limits);
  EXPECT_FALSE(r.ok());
  if (r.ok()) return DecodeErrc::kTooDeep;  // any: the EXPECT above failed already
  EXPECT_FALSE(r.error().message.empty());
  return r.error().code;
}

std::string batch_of(std::string_view event) {
  return spec_bytes("93") + kTs1 + spec_bytes("91") + std::string(event) + spec_bytes("00");
}

TEST(KvDecode, MapFieldsAreReadByNameInAnyOrderAndUnknownOnesAreSkipped) {
  // type last, fields reversed, unknown keys holding nested values, bytes + int hashes.
  const std::string event = spec_bytes(
      "8f a9 \"ownership\" a1 \"o\" a8 \"locality\" a5 \"LOCAL\" "
      "a7 \"future1\" 82 a1 \"x\" 93 01 c0 92 c3 c2 a1 \"y\" c7 02 05 aa bb "
      "bc \"kv_cache_spec_sliding_window\" cd 10 00 b2 \"kv_cache_spec_kind\" a6 \"mamba_\" "
      "a9 \"group_idx\" 02 aa \"extra_keys\" 92 c0 92 a1 \"s\" 01 a9 \"lora_name\" a1 \"L\" "
      "a6 \"medium\" a3 \"CPU\" a7 \"lora_id\" d0 fb aa \"block_size\" 02 "
      "a9 \"token_ids\" 94 01 02 03 04 b1 \"parent_block_hash\" c4 02 ab cd "
      "ac \"block_hashes\" 92 cf da b8 9b aa 7b 58 57 c0 d3 ff ff ff ff ff ff ff fe "
      "a4 \"type\" ab \"BlockStored\"");
  const EventBatch b = ok(batch_of(event));
  ASSERT_EQ(b.events.size(), 1u);
  const auto& s = std::get<BlockStored>(b.events[0]);
  EXPECT_EQ(s.block_hashes,
            (std::vector<BlockHash>{BlockHash::from_uint(kKthenaHash), BlockHash::from_int(-2)}));
  const uint8_t parent[] = {0xab, 0xcd};
  EXPECT_EQ(s.parent_block_hash, BlockHash::from_bytes(parent));
  EXPECT_EQ(s.token_ids, (std::vector<uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(s.block_size, 2u);
  EXPECT_EQ(s.lora_id, -5);
  EXPECT_EQ(s.medium, "CPU");
  EXPECT_EQ(s.lora_name, "L");
  EXPECT_EQ(s.extra_keys, (ExtraKeys{std::nullopt, spec_bytes("92 a1 \"s\" 01")}));
  EXPECT_EQ(s.group_idx, 2u);
  EXPECT_EQ(s.kv_cache_spec_kind, "mamba_");
  EXPECT_EQ(s.kv_cache_spec_sliding_window, 4096u);
  EXPECT_EQ(s.locality, "LOCAL");
  EXPECT_EQ(s.ownership, "o");
  EXPECT_EQ(b.ts, 1.0);
  EXPECT_EQ(b.data_parallel_rank, 0u);
}

TEST(KvDecode, MapWithOnlyTheFieldsWithoutDefaultsLeavesTheRestNone) {
  const EventBatch b = ok(batch_of(
      spec_bytes("85 a9 \"token_ids\" 90 a4 \"type\" ab \"BlockStored\" aa \"block_size\" 00 "
                 "a5 \"extra\" c0 ac \"block_hashes\" 90")));
  const auto& s = std::get<BlockStored>(b.events[0]);
  EXPECT_EQ(s, BlockStored{});
}

// vLLM's OffloadingConnector without self-describing events (offloading/events.py
// _placeholder_stored and _take_removed_event), as msgspec encodes them: the hash only, a null
// parent, no token ids, block_size 0, medium CPU; the removal names the same hash and medium.
TEST(KvDecode, AnOffloadTiersHashOnlyStoreAndItsRemoval) {
  const std::string bytes =
      spec_bytes("93") + kTs1 +
      spec_bytes(
          "92 89 a4 \"type\" ab \"BlockStored\" ac \"block_hashes\" 91 cf da b8 9b aa 7b 58 57 c0 "
          "b1 \"parent_block_hash\" c0 a9 \"token_ids\" 90 aa \"block_size\" 00 a7 \"lora_id\" c0 "
          "a6 \"medium\" a3 \"CPU\" a9 \"lora_name\" c0 a9 \"group_idx\" 00 "
          "84 a4 \"type\" ac \"BlockRemoved\" ac \"block_hashes\" 91 cf da b8 9b aa 7b 58 57 c0 "
          "a6 \"medium\" a3 \"CPU\" a9 \"group_idx\" 00 "
          "00");
  const EventBatch b = ok(bytes);
  ASSERT_EQ(b.events.size(), 2u);
  const auto& s = std::get<BlockStored>(b.events[0]);
  EXPECT_EQ(s.block_hashes, std::vector<BlockHash>{BlockHash::from_uint(kKthenaHash)});
  EXPECT_FALSE(s.parent_block_hash);
  EXPECT_TRUE(s.token_ids.empty());
  EXPECT_EQ(s.block_size, 0u);
  EXPECT_EQ(s.medium, "CPU");
  EXPECT_EQ(s.group_idx, 0u);
  const auto& r = std::get<BlockRemoved>(b.events[1]);
  EXPECT_EQ(r.block_hashes, std::vector<BlockHash>{BlockHash::from_uint(kKthenaHash)});
  EXPECT_EQ(r.medium, "CPU");
}

TEST(KvDecode, BlockRemovedAndAllBlocksClearedMapsWithUnknownFields) {
  const std::string bytes =
      spec_bytes("93") + kTs1 +
      spec_bytes(
          "92 84 a9 \"group_idx\" 01 a3 \"new\" 91 91 91 80 a4 \"type\" ac \"BlockRemoved\" "
          "ac \"block_hashes\" 91 07 "
          "82 a4 \"zzzz\" ca 3f 80 00 00 a4 \"type\" b0 \"AllBlocksCleared\" c0");
  const EventBatch b = ok(bytes);
  ASSERT_EQ(b.events.size(), 2u);
  const auto& r = std::get<BlockRemoved>(b.events[0]);
  EXPECT_EQ(r.block_hashes, (std::vector<BlockHash>{BlockHash::from_uint(7)}));
  EXPECT_EQ(r.group_idx, 1u);
  EXPECT_FALSE(r.medium.has_value());
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(b.events[1]));
  EXPECT_FALSE(b.data_parallel_rank.has_value());
}

// The legacy example bytes (8-field BlockStored, 3-field BlockRemoved) and the map capture.
TEST(KvDecode, DocumentedExamplesOfBothLayouts) {
  const EventBatch legacy = ok(spec_bytes(
      "93 cb 41 d9 54 fc 40 20 00 00 93 98 ab \"BlockStored\" 91 cf da b8 9b aa 7b 58 57 c0 c0 94 "
      "01 02 03 04 04 c0 a3 \"GPU\" c0 93 ac \"BlockRemoved\" 91 07 a3 \"GPU\" 91 b0 "
      "\"AllBlocksCleared\" 00"));
  EXPECT_EQ(legacy.ts, 1700000000.5);
  ASSERT_EQ(legacy.events.size(), 3u);
  BlockStored s;
  s.block_hashes = {BlockHash::from_uint(kKthenaHash)};
  s.token_ids = {1, 2, 3, 4};
  s.block_size = 4;
  s.medium = "GPU";
  EXPECT_EQ(std::get<BlockStored>(legacy.events[0]), s);
  EXPECT_EQ(std::get<BlockRemoved>(legacy.events[1]),
            (BlockRemoved{{BlockHash::from_uint(7)}, "GPU", {}, {}, {}}));

  const EventBatch map = ok(
      spec_bytes("93 cb 3f f0 00 00 00 00 00 00 91 8a a4 \"type\" ab \"BlockStored\" "
                 "ac \"block_hashes\" 92 01 02 b1 \"parent_block_hash\" 09 a9 \"token_ids\" "
                 "94 01 02 03 04 aa \"block_size\" 02 a7 \"lora_id\" c0 a6 \"medium\" a3 \"GPU\" "
                 "a9 \"lora_name\" c0 aa \"extra_keys\" 92 c0 c0 a9 \"group_idx\" 03 05"));
  const auto& m = std::get<BlockStored>(map.events[0]);
  EXPECT_EQ(m.parent_block_hash, BlockHash::from_uint(9));
  EXPECT_EQ(m.extra_keys, ExtraKeys(2));
  EXPECT_EQ(m.group_idx, 3u);
  EXPECT_FALSE(m.kv_cache_spec_kind.has_value());
  EXPECT_EQ(map.data_parallel_rank, 5u);
}

TEST(KvDecode, TimestampsMayBeFloat32OrIntButMustBeFinite) {
  EXPECT_EQ(ok(spec_bytes("92 ca 3f c0 00 00 90")).ts, 1.5);
  EXPECT_EQ(ok(spec_bytes("92 cd 01 00 90")).ts, 256.0);
  EXPECT_EQ(ok(spec_bytes("92 ff 90")).ts, -1.0);
  EXPECT_EQ(err(spec_bytes("92 cb 7f f0 00 00 00 00 00 00 90")), DecodeErrc::kBadTimestamp);
  EXPECT_EQ(err(spec_bytes("92 cb 7f f8 00 00 00 00 00 00 90")), DecodeErrc::kBadTimestamp);
  EXPECT_EQ(err(spec_bytes("92 a1 \"1\" 90")), DecodeErrc::kBadTimestamp);
}

TEST(KvDecode, MalformedShapesGiveTheirErrors) {
  EXPECT_EQ(err(""), DecodeErrc::kTruncated);
  EXPECT_EQ(err(spec_bytes("c1")), DecodeErrc::kInvalidMsgpack);
  EXPECT_EQ(err(spec_bytes("80")), DecodeErrc::kBadBatch);
  EXPECT_EQ(err(spec_bytes("91") + kTs1), DecodeErrc::kBadBatch);
  EXPECT_EQ(err(spec_bytes("94") + kTs1 + spec_bytes("90 00 00")), DecodeErrc::kBadBatch);
  EXPECT_EQ(err(spec_bytes("92") + kTs1 + spec_bytes("80")), DecodeErrc::kBadBatch);
  EXPECT_EQ(err(spec_bytes("93") + kTs1 + spec_bytes("90 ff")), DecodeErrc::kBadBatch);
  EXPECT_EQ(err(spec_bytes("93") + kTs1 + spec_bytes("90 cf 00 00 00 01 00 00 00 00")),
            DecodeErrc::kBadBatch);
  EXPECT_EQ(err(spec_bytes("93") + kTs1 + spec_bytes("90 00 00")), DecodeErrc::kTrailingBytes);
  EXPECT_EQ(err(batch_of(spec_bytes("01"))), DecodeErrc::kBadEvent);
  EXPECT_EQ(err(batch_of(spec_bytes("90"))), DecodeErrc::kBadEvent);
  EXPECT_EQ(err(batch_of(spec_bytes("91 01"))), DecodeErrc::kBadEvent);
  EXPECT_EQ(err(batch_of(spec_bytes("91 a4 \"Nope\""))), DecodeErrc::kUnknownEventType);
  EXPECT_EQ(err(batch_of(spec_bytes("81 a4 \"type\" a4 \"Nope\""))), DecodeErrc::kUnknownEventType);
  EXPECT_EQ(err(batch_of(spec_bytes("92 b0 \"AllBlocksCleared\" c0"))), DecodeErrc::kBadEvent);
  EXPECT_EQ(err(batch_of(spec_bytes("95 ab \"BlockStored\" 90 c0 90 01"))), DecodeErrc::kBadEvent);
  EXPECT_EQ(err(batch_of(spec_bytes("91 ac \"BlockRemoved\""))), DecodeErrc::kBadEvent);
  EXPECT_EQ(err(batch_of(spec_bytes("97 ac \"BlockRemoved\" 90 c0 c0 c0 c0 c0"))),
            DecodeErrc::kBadEvent);
  // Maps: no type, a repeated type or field, a non-str key, a missing required field.
  EXPECT_EQ(err(batch_of(spec_bytes("80"))), DecodeErrc::kMissingField);
  EXPECT_EQ(err(batch_of(spec_bytes("81 a1 \"x\" 01"))), DecodeErrc::kMissingField);
  EXPECT_EQ(err(batch_of(spec_bytes("82 a4 \"type\" b0 \"AllBlocksCleared\" a4 \"type\" "
                                    "b0 \"AllBlocksCleared\""))),
            DecodeErrc::kDuplicateField);
  EXPECT_EQ(
      err(batch_of(spec_bytes("83 a1 \"x\" 01 a4 \"type\" b0 \"AllBlocksCleared\" a4 \"type\" "
                              "b0 \"AllBlocksCleared\""))),
      DecodeErrc::kDuplicateField);
  EXPECT_EQ(err(batch_of(spec_bytes("83 a4 \"type\" ac \"BlockRemoved\" ac \"block_hashes\" 90 "
                                    "ac \"block_hashes\" 90"))),
            DecodeErrc::kDuplicateField);
  EXPECT_EQ(err(batch_of(spec_bytes("82 a4 \"type\" b0 \"AllBlocksCleared\" 01 02"))),
            DecodeErrc::kBadEvent);
  EXPECT_EQ(err(batch_of(spec_bytes("81 a4 \"type\" ac \"BlockRemoved\""))),
            DecodeErrc::kMissingField);
  EXPECT_EQ(err(batch_of(spec_bytes("83 a4 \"type\" ab \"BlockStored\" ac \"block_hashes\" 90 "
                                    "a9 \"token_ids\" 90"))),
            DecodeErrc::kMissingField);
  EXPECT_EQ(err(batch_of(spec_bytes("81 a4 \"type\" 01"))), DecodeErrc::kBadEvent);
}

TEST(KvDecode, KnownFieldsOfTheWrongTypeOrRangeAreBadFields) {
  auto removed = [](std::string_view hashes, std::string_view rest = "") {
    return batch_of(spec_bytes("94 ac \"BlockRemoved\" ") + std::string(hashes) +
                    (rest.empty() ? spec_bytes("c0 c0") : std::string(rest)));
  };
  EXPECT_EQ(err(removed(spec_bytes("c0"))), DecodeErrc::kBadField);
  EXPECT_EQ(err(removed(spec_bytes("91 a1 \"h\""))), DecodeErrc::kBadBlockHash);
  EXPECT_EQ(err(removed(spec_bytes("91 c4 00"))), DecodeErrc::kBadBlockHash);
  EXPECT_EQ(err(removed(spec_bytes("91 c4 21") + std::string(33, 'x'))), DecodeErrc::kBadBlockHash);
  EXPECT_EQ(err(removed(spec_bytes("91 c3"))), DecodeErrc::kBadBlockHash);
  EXPECT_EQ(err(removed(spec_bytes("90"), spec_bytes("01 c0"))), DecodeErrc::kBadField);
  EXPECT_EQ(err(removed(spec_bytes("90"), spec_bytes("c0 ff"))), DecodeErrc::kBadField);
  EXPECT_EQ(err(removed(spec_bytes("90"), spec_bytes("c0 cf 00 00 00 01 00 00 00 00"))),
            DecodeErrc::kBadField);
  EXPECT_EQ(ok(removed(spec_bytes("90"), spec_bytes("c0 ce ff ff ff ff"))).events.size(), 1u);

  // BlockStored in the array layout: [tag, hashes, parent, tokens, block_size, lora_id, ...].
  auto stored = [](std::string_view fields) {
    return batch_of(spec_bytes("97 ab \"BlockStored\" ") + std::string(fields));
  };
  EXPECT_EQ(ok(stored(spec_bytes("90 c0 91 01 01 c0 c0"))).events.size(), 1u);
  EXPECT_EQ(err(stored(spec_bytes("90 a1 \"p\" 91 01 01 c0 c0"))), DecodeErrc::kBadBlockHash);
  EXPECT_EQ(err(stored(spec_bytes("90 c0 c0 01 c0 c0"))), DecodeErrc::kBadField);
  EXPECT_EQ(err(stored(spec_bytes("90 c0 91 ff 01 c0 c0"))), DecodeErrc::kBadField);
  EXPECT_EQ(err(stored(spec_bytes("90 c0 91 cf 00 00 00 01 00 00 00 00 01 c0 c0"))),
            DecodeErrc::kBadField);
  EXPECT_EQ(err(stored(spec_bytes("90 c0 91 01 cb 3f f0 00 00 00 00 00 00 c0 c0"))),
            DecodeErrc::kBadField);
  EXPECT_EQ(err(stored(spec_bytes("90 c0 91 01 c0 c0 c0"))), DecodeErrc::kBadField);
  EXPECT_EQ(err(stored(spec_bytes("90 c0 91 01 01 cf 80 00 00 00 00 00 00 00 c0"))),
            DecodeErrc::kBadField);
  EXPECT_EQ(err(stored(spec_bytes("90 c0 91 01 01 a1 \"x\" c0"))), DecodeErrc::kBadField);
  EXPECT_EQ(err(stored(spec_bytes("90 c0 91 01 01 c0 07"))), DecodeErrc::kBadField);
  // extra_keys: nil, or a list of nil | tuple.
  auto with_extra = [](std::string_view extra) {
    return batch_of(spec_bytes("99 ab \"BlockStored\" 90 c0 90 00 c0 c0 c0 ") + std::string(extra));
  };
  EXPECT_EQ(ok(with_extra(spec_bytes("c0"))).events.size(), 1u);
  EXPECT_EQ(err(with_extra(spec_bytes("a1 \"k\""))), DecodeErrc::kBadField);
  EXPECT_EQ(err(with_extra(spec_bytes("91 a1 \"k\""))), DecodeErrc::kBadField);
  EXPECT_EQ(err(with_extra(spec_bytes("91 91 c1"))), DecodeErrc::kInvalidMsgpack);
}

// --------------------------------------------------------------------------------- limits

TEST(KvDecodeLimits, EveryLimitExceededGivesItsError) {
  EncodeOptions map{Layout::kMap, false, {}};
  BlockStored s = gpu_stored({1, 2, 3}, std::nullopt, {1, 2, 3, 4, 5, 6}, 2);
  s.lora_name = "adapter";
  s.extra_keys = ExtraKeys{spec_bytes("91 a7 \"adapter\""), std::nullopt, std::nullopt};
  const std::string one = encode_batch(EventBatch{1.0, {s}, 0}, map);
  const std::string two = encode_batch(EventBatch{1.0, {s, s}, 0}, map);
  ok(one);
  ok(two);
  auto exceeded = [&](const std::string& bytes, auto set) {
    DecodeLimits limits;
    set(limits);
    return err(bytes, limits);
  };
  EXPECT_EQ(exceeded(one, [&](DecodeLimits& l) { l.max_payload_bytes = one.size() - 1; }),
            DecodeErrc::kPayloadTooLarge);
  EXPECT_EQ(exceeded(two, [](DecodeLimits& l) { l.max_events = 1; }), DecodeErrc::kTooManyEvents);
  EXPECT_EQ(exceeded(one, [](DecodeLimits& l) { l.max_block_hashes_per_event = 2; }),
            DecodeErrc::kTooManyBlockHashes);
  EXPECT_EQ(exceeded(two, [](DecodeLimits& l) { l.max_block_hashes_per_batch = 5; }),
            DecodeErrc::kTooManyBlockHashes);
  EXPECT_EQ(exceeded(one, [](DecodeLimits& l) { l.max_token_ids_per_event = 5; }),
            DecodeErrc::kTooManyTokenIds);
  EXPECT_EQ(exceeded(two, [](DecodeLimits& l) { l.max_token_ids_per_batch = 11; }),
            DecodeErrc::kTooManyTokenIds);
  EXPECT_EQ(exceeded(one, [](DecodeLimits& l) { l.max_extra_keys_per_event = 2; }),
            DecodeErrc::kTooManyExtraKeys);
  EXPECT_EQ(exceeded(two, [](DecodeLimits& l) { l.max_extra_keys_per_batch = 5; }),
            DecodeErrc::kTooManyExtraKeys);
  EXPECT_EQ(exceeded(one, [](DecodeLimits& l) { l.max_extra_key_bytes = 8; }),
            DecodeErrc::kExtraKeyTooLarge);
  EXPECT_EQ(exceeded(one, [](DecodeLimits& l) { l.max_string_bytes = 6; }),  // "adapter"
            DecodeErrc::kStringTooLong);
  EXPECT_EQ(exceeded(one, [](DecodeLimits& l) { l.max_event_fields = 10; }),
            DecodeErrc::kTooManyFields);
  EXPECT_EQ(exceeded(one, [](DecodeLimits& l) { l.max_depth = 0; }), DecodeErrc::kTooDeep);
  // Exactly at each limit decodes.
  DecodeLimits at;
  at.max_payload_bytes = two.size();
  at.max_events = 2;
  at.max_block_hashes_per_event = 3;
  at.max_block_hashes_per_batch = 6;
  at.max_token_ids_per_event = 6;
  at.max_token_ids_per_batch = 12;
  at.max_extra_keys_per_event = 3;
  at.max_extra_keys_per_batch = 6;
  at.max_extra_key_bytes = 9;
  at.max_string_bytes = 18;  // "kv_cache_spec_kind"
  at.max_event_fields = 11;
  at.max_depth = 1;
  ok(two, at);
}

TEST(KvDecodeLimits, KeysAndSkippedValuesAreBoundedToo) {
  const std::string long_key = batch_of(spec_bytes("82 a4 \"type\" b0 \"AllBlocksCleared\" d9 28") +
                                        std::string(40, 'k') + spec_bytes("c0"));
  DecodeLimits l;
  l.max_string_bytes = 39;
  EXPECT_EQ(err(long_key, l), DecodeErrc::kStringTooLong);
  std::string deep = spec_bytes("82 a4 \"type\" b0 \"AllBlocksCleared\" a1 \"d\"");
  for (int i = 0; i < 20; ++i) deep += spec_bytes("91");
  deep += spec_bytes("c0");
  EXPECT_EQ(err(batch_of(deep)), DecodeErrc::kTooDeep);  // default max_depth 16
  l = DecodeLimits{};
  l.max_depth = 20;
  ok(batch_of(deep), l);
}

// Container counts larger than what is left are truncation, found before anything is reserved.
TEST(KvDecodeLimits, HugeCountsInShortPayloadsAreTruncated) {
  EXPECT_EQ(err(spec_bytes("dd ff ff ff ff")), DecodeErrc::kTruncated);
  EXPECT_EQ(err(spec_bytes("93") + kTs1 + spec_bytes("dd 7f ff ff ff 00")), DecodeErrc::kTruncated);
  EXPECT_EQ(err(batch_of(spec_bytes("df 80 00 00 00 00"))), DecodeErrc::kTruncated);
  EXPECT_EQ(err(batch_of(spec_bytes("82 a4 \"type\" b0 \"AllBlocksCleared\" a1 \"x\" "
                                    "db ff ff ff ff 00"))),
            DecodeErrc::kTruncated);
  EXPECT_EQ(err(batch_of(spec_bytes("92 ac \"BlockRemoved\" dd 00 10 00 00 01"))),
            DecodeErrc::kTruncated);
}

// Truncation at every byte offset of payloads that use every field: an error, never a crash
// (the sanitizers watch the reads).
TEST(KvDecodeTruncation, EveryPrefixFailsCleanly) {
  BlockStored s = gpu_stored({kKthenaHash, 2}, 1, {1, 300, 70000, 5}, 2);
  s.lora_id = -3;
  s.lora_name = "a";
  s.extra_keys = ExtraKeys{spec_bytes("92 a1 \"m\" cd 01 00"), std::nullopt};
  s.kv_cache_spec_sliding_window = 64;
  s.locality = "LOCAL";
  s.ownership = "o";
  BlockRemoved r = gpu_removed({BlockHash::from_int(-9).low64()});
  r.block_hashes.push_back(BlockHash::from_int(-9));
  const EventBatch b{1789095808.83, {s, r, AllBlocksCleared{}}, 3};
  for (const EncodeOptions& o :
       {EncodeOptions{Layout::kMap, false, {}}, EncodeOptions{Layout::kArray, false, {14, 6, true}},
        EncodeOptions{Layout::kArray, true, {6, 2, false}}}) {
    const std::string bytes = encode_batch(b, o);
    ok(bytes);
    for (size_t n = 0; n < bytes.size(); ++n) {
      // A copy of exactly n bytes, so ASan sees a read past the end.
      const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
      const auto res = decode_batch(std::span<const uint8_t>(prefix));
      ASSERT_FALSE(res.ok()) << "prefix " << n;
      EXPECT_EQ(res.error().code, DecodeErrc::kTruncated) << "prefix " << n;
    }
  }
}

TEST(KvDecode, ReasonsAreStableSnakeCaseLabels) {
  EXPECT_EQ(reason(DecodeErrc::kTooManyTokenIds), "too_many_token_ids");
  EXPECT_EQ(reason(DecodeErrc::kTruncated), "truncated");
  const auto r = decode_batch(spec_bytes("c1"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "invalid_msgpack");
}

}  // namespace
}  // namespace ramjet::cache::kv
