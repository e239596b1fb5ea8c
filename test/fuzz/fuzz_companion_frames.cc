// Fuzz target for companion/'s decoders of untrusted bytes: the hello, the authenticated frames
// and the snapshot envelope. The first input byte picks what the rest is:
//   0: a byte stream of frames, opened in order (frame_size, then open) until the first error;
//   1: a type byte + payload, sealed with the test secret, then opened: the payload parsers
//      behind the MAC (an authentic peer's bytes are untrusted too);
//   2: a hello;
//   3: a snapshot envelope, decoded as is (mostly the checksum and head checks);
//   4: a snapshot envelope whose body length and checksum are fixed up first, so the body parser
//      and the import behind it (a small digest inventory) are reached.
// Invariants: nothing crashes; errors carry a known reason; whatever decodes re-encodes to the
// same bytes; an imported inventory satisfies the shard's invariants.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <span>
#include <string>

#include <openssl/evp.h>

#include "companion/frames.h"
#include "companion/snapshot.h"

namespace {

namespace co = ramjet::companion;

void check(bool ok) {
  if (!ok) std::abort();
}

co::SessionSecret test_secret() {
  co::SessionSecret s{};
  std::iota(s.begin(), s.end(), uint8_t{1});
  return s;
}

co::Challenge test_challenge() {
  co::Challenge c{};
  c.fill(0xab);
  return c;
}

const std::shared_ptr<const ramjet::cache::DigestKey>& digest_key() {
  static const auto k = [] {
    std::array<uint8_t, 32> s{};
    std::iota(s.begin(), s.end(), uint8_t{9});
    return ramjet::cache::DigestKey::from_secret(s);
  }();
  return k;
}

co::FrameLimits small_frame_limits() {
  co::FrameLimits l;
  l.max_tail_frame = 4096;
  l.max_batch_payload = 1024;
  l.max_snapshot_bytes = 1 << 16;
  l.max_identity_bytes = 32;
  return l;
}

void frames(std::span<const uint8_t> in) {
  co::FrameOpener opener(test_secret(), test_challenge(), co::Direction::kToRamjet, small_frame_limits());
  while (!in.empty()) {
    auto size = opener.frame_size(in.first(std::min(in.size(), co::kFrameHeaderBytes)));
    if (!size.ok()) {
      check(size.error().reason() != "unknown");
      return;
    }
    check(*size >= co::kFrameHeaderBytes + co::kMacBytes);
    auto f = opener.open(in.first(std::min(in.size(), *size)));
    if (!f.ok()) {
      check(f.error().reason() != "unknown");
      return;
    }
    check(f->delivery_sequence + 1 == opener.expected_sequence());
    if (f->type == co::FrameType::kSnapshot) (void)co::decode_snapshot(f->payload);
    in = in.subspan(*size);
  }
}

void sealed(std::span<const uint8_t> in) {
  if (in.empty()) return;
  const auto type = static_cast<co::FrameType>(in[0]);
  const auto payload = in.subspan(1);
  co::FrameSealer sealer(test_secret(), test_challenge(), 5, co::Direction::kToRamjet);
  const std::string frame = sealer.seal(type, payload);
  co::FrameOpener opener(test_secret(), test_challenge(), co::Direction::kToRamjet, small_frame_limits());
  auto f = opener.open({reinterpret_cast<const uint8_t*>(frame.data()), frame.size()});
  if (!f.ok()) {
    check(f.error().reason() != "unknown");
    check(f.error().code != co::FrameErrc::kBadMac && f.error().code != co::FrameErrc::kGap);
    return;
  }
  check(f->type == type && f->generation == 5 && f->delivery_sequence == 0);
  check(f->payload.size() == payload.size() && std::memcmp(f->payload.data(), payload.data(), payload.size()) == 0);
  if (type == co::FrameType::kEvent) {
    check(f->batch.size() + 8 == payload.size());
    co::FrameSealer again(test_secret(), test_challenge(), 5, co::Direction::kToRamjet);
    check(again.event(f->event_sequence, f->batch) == frame);
  }
}

void hello(std::span<const uint8_t> in) {
  auto c = co::open_hello(in, test_secret());
  if (!c.ok()) {
    check(c.error().reason() != "unknown");
    return;
  }
  const auto again = co::seal_hello(test_secret(), *c);
  check(in.size() == again.size() && std::memcmp(in.data(), again.data(), in.size()) == 0);
}

void snapshot(std::span<const uint8_t> in) {
  co::SnapshotLimits small;
  small.max_bytes = 1 << 16;
  small.max_records = 64;
  small.max_removals = 96;
  small.max_groups = 8;
  small.max_loras = 4;
  small.max_string_bytes = 16;
  for (const co::SnapshotLimits& limits : {co::SnapshotLimits{}, small}) {
    auto s = co::decode_snapshot(in, limits);
    if (!s.ok()) {
      check(s.error().reason() != "unknown");
      continue;
    }
    const std::string again = co::encode_snapshot(*s);
    check(again.size() == in.size() && std::memcmp(again.data(), in.data(), in.size()) == 0);
    ramjet::cache::events::Inventory inv({.shard = {.max_blocks = 64}}, digest_key());
    co::Snapshot bound = *s;
    bound.header.key_id = digest_key()->key_id();
    if (auto err = co::import_snapshot(bound, inv)) {
      check(err->reason() != "unknown");
      check(inv.shard().blocks() == 0 && inv.block_size() == 0);
    } else {
      check(inv.shard().blocks() == s->state.blocks.size());
    }
    check(inv.shard().check_invariants());
  }
}

void fixed_snapshot(std::span<const uint8_t> in) {
  if (in.size() < co::kSnapshotEnvelopeHead) return;
  std::string b(reinterpret_cast<const char*>(in.data()), in.size());
  const uint64_t body = b.size() - co::kSnapshotEnvelopeHead;
  for (size_t i = 0; i < 8; ++i) b[16 + i] = static_cast<char>(static_cast<uint8_t>(body >> (8 * i)));
  unsigned char sum[32];
  unsigned len = 0;
  check(EVP_Digest(b.data(), b.size(), sum, &len, EVP_sha256(), nullptr) == 1);
  b.append(reinterpret_cast<const char*>(sum), sizeof(sum));
  snapshot({reinterpret_cast<const uint8_t*>(b.data()), b.size()});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  switch (data[0] % 5) {
    case 0: frames(rest); break;
    case 1: sealed(rest); break;
    case 2: hello(rest); break;
    case 3: snapshot(rest); break;
    case 4: fixed_snapshot(rest); break;
  }
  return 0;
}
