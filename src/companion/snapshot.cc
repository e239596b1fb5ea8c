// companion/snapshot: the envelope is
//   "RJSNAP01" | u32 version | u32 flags (0) | u64 body length | body | SHA-256(all before it)
// and the body, every integer little-endian:
//   challenge[32] key_id[32] u64 generation u8 has_sequence u64 sequence u16 len incarnation
//   u32 block_size u32 groups {u32 dp_rank u32 group u8 main}* u32 loras {u16 len name}*
//   u32 blocks u32 removals {u64 key u32 parent u32 removal_keys}* {u64 key u32 copies}*
#include "companion/snapshot.h"

#include <algorithm>

#include <bit>
#include <cstring>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "companion/wire.h"

namespace ramjet::companion {

static_assert(std::endian::native == std::endian::little, "records are copied as little-endian");

std::string_view reason(SnapshotErrc e) {
  switch (e) {
    case SnapshotErrc::kTruncated: return "truncated";
    case SnapshotErrc::kBadMagic: return "bad_magic";
    case SnapshotErrc::kBadVersion: return "bad_version";
    case SnapshotErrc::kOversized: return "oversized";
    case SnapshotErrc::kBadChecksum: return "bad_checksum";
    case SnapshotErrc::kLimit: return "limit";
    case SnapshotErrc::kMalformed: return "malformed";
    case SnapshotErrc::kWrongChallenge: return "wrong_challenge";
    case SnapshotErrc::kWrongKey: return "wrong_key";
    case SnapshotErrc::kImport: return "import";
  }
  return "unknown";
}

namespace {

constexpr size_t kBlockBytes = 16;
constexpr size_t kRemovalBytes = 12;

std::array<uint8_t, 32> sha256(std::span<const uint8_t> bytes) {
  std::array<uint8_t, 32> out{};
  unsigned len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), out.data(), &len, EVP_sha256(), nullptr) != 1) {
    out.fill(0);  // an OpenSSL failure fails the comparison, closed
    out[0] = 1;
  }
  return out;
}

SnapshotError fail(SnapshotErrc c) { return SnapshotError{c, std::nullopt}; }

}  // namespace

std::string encode_snapshot(const Snapshot& s) {
  const auto& st = s.state;
  std::string out;
  out.reserve(kSnapshotEnvelopeHead + 256 + st.blocks.size() * kBlockBytes + st.removals.size() * kRemovalBytes +
              kSnapshotChecksumBytes);
  WireWriter w(out);
  w.bytes(std::string_view(kSnapshotMagic, sizeof(kSnapshotMagic)));
  w.u32(kSnapshotVersion);
  w.u32(0);
  w.u64(0);  // body length, patched below
  w.bytes(s.header.challenge);
  w.bytes(s.header.key_id);
  w.u64(s.header.generation);
  w.u8(s.header.last_event_sequence ? 1 : 0);
  w.u64(s.header.last_event_sequence.value_or(0));
  w.u16(static_cast<uint16_t>(s.header.incarnation.size()));
  w.bytes(s.header.incarnation);
  w.u32(st.block_size);
  w.u32(static_cast<uint32_t>(st.groups.size()));
  for (const auto& g : st.groups) {
    w.u32(g.dp_rank);
    w.u32(g.group);
    w.u8(g.main ? 1 : 0);
  }
  w.u32(static_cast<uint32_t>(st.loras.size()));
  for (const auto& l : st.loras) {
    w.u16(static_cast<uint16_t>(l.size()));
    w.bytes(l);
  }
  w.u32(static_cast<uint32_t>(st.blocks.size()));
  w.u32(static_cast<uint32_t>(st.removals.size()));
  for (const auto& b : st.blocks) {
    w.u64(b.key);
    w.u32(b.parent);
    w.u32(b.removal_keys);
  }
  for (const auto& r : st.removals) {
    w.u64(r.key);
    w.u32(r.copies);
  }
  const uint64_t body = out.size() - kSnapshotEnvelopeHead;
  for (size_t i = 0; i < 8; ++i) out[16 + i] = static_cast<char>(static_cast<uint8_t>(body >> (8 * i)));
  const auto sum = sha256({reinterpret_cast<const uint8_t*>(out.data()), out.size()});
  w.bytes(sum);
  return out;
}

Result<Snapshot, SnapshotError> decode_snapshot(std::span<const uint8_t> bytes, const SnapshotLimits& limits) {
  if (bytes.size() > limits.max_bytes) return fail(SnapshotErrc::kOversized);
  WireReader head(bytes);
  std::array<uint8_t, 8> magic{};
  uint32_t version = 0, flags = 0;
  uint64_t body_len = 0;
  if (!head.bytes(magic)) return fail(SnapshotErrc::kTruncated);
  if (std::memcmp(magic.data(), kSnapshotMagic, sizeof(kSnapshotMagic)) != 0) return fail(SnapshotErrc::kBadMagic);
  if (!head.u32(version) || !head.u32(flags) || !head.u64(body_len)) return fail(SnapshotErrc::kTruncated);
  if (version != kSnapshotVersion || flags != 0) return fail(SnapshotErrc::kBadVersion);
  if (body_len > limits.max_bytes) return fail(SnapshotErrc::kOversized);
  const size_t total = kSnapshotEnvelopeHead + static_cast<size_t>(body_len) + kSnapshotChecksumBytes;
  if (bytes.size() < total) return fail(SnapshotErrc::kTruncated);
  if (bytes.size() > total) return fail(SnapshotErrc::kMalformed);
  const auto sum = sha256(bytes.first(total - kSnapshotChecksumBytes));
  if (CRYPTO_memcmp(sum.data(), bytes.data() + total - kSnapshotChecksumBytes, sum.size()) != 0) {
    return fail(SnapshotErrc::kBadChecksum);
  }

  WireReader r(bytes.subspan(kSnapshotEnvelopeHead, static_cast<size_t>(body_len)));
  Snapshot s;
  auto& h = s.header;
  auto& st = s.state;
  uint8_t has_seq = 0;
  uint64_t seq = 0;
  uint16_t len16 = 0;
  std::span<const uint8_t> text;
  if (!r.bytes(h.challenge) || !r.bytes(h.key_id) || !r.u64(h.generation) || !r.u8(has_seq) || !r.u64(seq) ||
      !r.u16(len16)) {
    return fail(SnapshotErrc::kTruncated);
  }
  if (has_seq > 1 || (has_seq == 0 && seq != 0)) return fail(SnapshotErrc::kMalformed);
  if (has_seq) h.last_event_sequence = seq;
  if (len16 > limits.max_string_bytes) return fail(SnapshotErrc::kLimit);
  if (!r.view(len16, text)) return fail(SnapshotErrc::kTruncated);
  h.incarnation.assign(reinterpret_cast<const char*>(text.data()), text.size());

  uint32_t count = 0;
  if (!r.u32(st.block_size) || !r.u32(count)) return fail(SnapshotErrc::kTruncated);
  if (st.block_size > limits.max_block_size) return fail(SnapshotErrc::kLimit);
  if (count > limits.max_groups) return fail(SnapshotErrc::kLimit);
  if (r.left() < static_cast<size_t>(count) * 9) return fail(SnapshotErrc::kTruncated);
  st.groups.resize(count);
  for (auto& g : st.groups) {
    uint8_t main = 0;
    (void)(r.u32(g.dp_rank) && r.u32(g.group) && r.u8(main));
    if (main > 1) return fail(SnapshotErrc::kMalformed);
    g.main = main == 1;
  }
  if (!r.u32(count)) return fail(SnapshotErrc::kTruncated);
  if (count > limits.max_loras) return fail(SnapshotErrc::kLimit);
  st.loras.reserve(std::min<size_t>(count, r.left() / 2));
  for (uint32_t i = 0; i < count; ++i) {
    if (!r.u16(len16)) return fail(SnapshotErrc::kTruncated);
    if (len16 > limits.max_string_bytes) return fail(SnapshotErrc::kLimit);
    if (!r.view(len16, text)) return fail(SnapshotErrc::kTruncated);
    st.loras.emplace_back(reinterpret_cast<const char*>(text.data()), text.size());
  }

  uint32_t blocks = 0, removals = 0;
  if (!r.u32(blocks) || !r.u32(removals)) return fail(SnapshotErrc::kTruncated);
  if (blocks > limits.max_records || removals > limits.max_removals) return fail(SnapshotErrc::kLimit);
  const size_t need = static_cast<size_t>(blocks) * kBlockBytes + static_cast<size_t>(removals) * kRemovalBytes;
  if (r.left() < need) return fail(SnapshotErrc::kTruncated);
  if (r.left() > need) return fail(SnapshotErrc::kMalformed);
  st.blocks.resize(blocks);
  const uint8_t* p = r.cursor();
  for (auto& b : st.blocks) {
    std::memcpy(&b.key, p, 8);
    std::memcpy(&b.parent, p + 8, 4);
    std::memcpy(&b.removal_keys, p + 12, 4);
    p += kBlockBytes;
  }
  st.removals.resize(removals);
  for (auto& x : st.removals) {
    std::memcpy(&x.key, p, 8);
    std::memcpy(&x.copies, p + 8, 4);
    p += kRemovalBytes;
  }
  return s;
}

SnapshotLimits snapshot_limits_for(uint64_t max_blocks) {
  SnapshotLimits s;
  s.max_records = static_cast<uint32_t>(std::min<uint64_t>(UINT32_MAX, std::max<uint64_t>(s.max_records, max_blocks)));
  s.max_removals =
      static_cast<uint32_t>(std::min<uint64_t>(UINT32_MAX, std::max<uint64_t>(s.max_removals, 2 * max_blocks)));
  const uint64_t bytes = 16 * uint64_t{s.max_records} + 12 * uint64_t{s.max_removals} + (1u << 20);
  s.max_bytes = static_cast<size_t>(std::clamp<uint64_t>(bytes, s.max_bytes, uint64_t{2} << 30));
  return s;
}

std::optional<SnapshotError> verify_binding(const SnapshotHeader& header, const Challenge& challenge,
                                            const cache::DigestKeyId& key_id) {
  if (CRYPTO_memcmp(header.challenge.data(), challenge.data(), challenge.size()) != 0) {
    return fail(SnapshotErrc::kWrongChallenge);
  }
  if (CRYPTO_memcmp(header.key_id.data(), key_id.data(), key_id.size()) != 0) return fail(SnapshotErrc::kWrongKey);
  return std::nullopt;
}

Snapshot capture_snapshot(const cache::events::Inventory& inventory, SnapshotHeader header) {
  Snapshot s;
  s.header = std::move(header);
  inventory.export_state(s.state);
  return s;
}

std::optional<SnapshotError> import_snapshot(const Snapshot& snapshot, cache::events::Inventory& inventory) {
  const cache::DigestKey* key = inventory.digest_key();
  if (key == nullptr ||
      CRYPTO_memcmp(key->key_id().data(), snapshot.header.key_id.data(), snapshot.header.key_id.size()) != 0) {
    return fail(SnapshotErrc::kWrongKey);
  }
  if (auto err = inventory.import_state(snapshot.state)) return SnapshotError{SnapshotErrc::kImport, err};
  return std::nullopt;
}

}  // namespace ramjet::companion
