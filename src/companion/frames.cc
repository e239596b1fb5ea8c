// companion/frames: a frame is
//   "RJTAIL01" | u8 type | u8 direction | u16 0 | u32 payload length | u64 generation
//   | u64 delivery sequence | payload | HMAC-SHA256(frame key, everything before it)
// and the payloads: Snapshot = the snapshot envelope; Event = u64 vLLM sequence + batch bytes;
// CaughtUp = u8 has + u64 vLLM sequence; Identity = the incarnation's bytes; Disconnect = u8 reason.
// The hello is "RJHELO01" | u32 version | u32 0 | challenge | HMAC-SHA256(session secret,
// "ramjet:companion-hello:v1\0" ‖ everything before the MAC).
#include "companion/frames.h"

#include <cstring>

#include <openssl/crypto.h>

#include "companion/wire.h"

namespace ramjet::companion {

std::string_view reason(FrameErrc e) {
  switch (e) {
    case FrameErrc::kTruncated: return "truncated";
    case FrameErrc::kBadMagic: return "bad_magic";
    case FrameErrc::kBadVersion: return "bad_version";
    case FrameErrc::kUnknownType: return "unknown_type";
    case FrameErrc::kWrongDirection: return "wrong_direction";
    case FrameErrc::kOversized: return "oversized";
    case FrameErrc::kBadMac: return "bad_mac";
    case FrameErrc::kGap: return "gap";
    case FrameErrc::kGenerationChanged: return "generation_changed";
    case FrameErrc::kMalformed: return "malformed";
  }
  return "unknown";
}

namespace {

constexpr char kHelloDomain[] = "ramjet:companion-hello:v1";     // with its NUL
constexpr char kKeyDomain[] = "ramjet:companion-frame-key:v1";  // with its NUL
constexpr size_t kHelloSigned = kHelloBytes - kMacBytes;

std::span<const uint8_t> as_bytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

FrameError fail(FrameErrc c) { return FrameError{c}; }

bool known_type(uint8_t t) { return t >= 1 && t <= 5; }

MacTag hello_mac(const SessionSecret& secret, std::span<const uint8_t> signed_part) {
  HmacSha256 mac(secret);
  mac.begin();
  mac.update(as_bytes(std::string_view(kHelloDomain, sizeof(kHelloDomain))));
  mac.update(signed_part);
  return mac.finish();
}

}  // namespace

std::array<uint8_t, kHelloBytes> seal_hello(const SessionSecret& secret, const Challenge& challenge) {
  std::string out;
  WireWriter w(out);
  w.bytes(std::string_view(kHelloMagic, sizeof(kHelloMagic)));
  w.u32(kProtocolVersion);
  w.u32(0);
  w.bytes(challenge);
  const MacTag tag = hello_mac(secret, as_bytes(out));
  w.bytes(tag);
  std::array<uint8_t, kHelloBytes> hello{};
  std::memcpy(hello.data(), out.data(), hello.size());
  return hello;
}

Result<Challenge, FrameError> open_hello(std::span<const uint8_t> hello, const SessionSecret& secret) {
  if (hello.size() < kHelloBytes) return fail(FrameErrc::kTruncated);
  if (hello.size() > kHelloBytes) return fail(FrameErrc::kMalformed);
  if (std::memcmp(hello.data(), kHelloMagic, sizeof(kHelloMagic)) != 0) return fail(FrameErrc::kBadMagic);
  const MacTag tag = hello_mac(secret, hello.first(kHelloSigned));
  if (!tags_equal(tag, hello.subspan(kHelloSigned))) return fail(FrameErrc::kBadMac);
  WireReader r(hello.subspan(sizeof(kHelloMagic)));
  uint32_t version = 0, flags = 0;
  Challenge c{};
  (void)(r.u32(version) && r.u32(flags) && r.bytes(c));
  if (version != kProtocolVersion || flags != 0) return fail(FrameErrc::kBadVersion);
  return c;
}

std::array<uint8_t, 32> derive_frame_key(const SessionSecret& secret, const Challenge& challenge, uint64_t generation,
                                         Direction direction) {
  std::string info(kKeyDomain, sizeof(kKeyDomain));
  info.append(reinterpret_cast<const char*>(challenge.data()), challenge.size());
  WireWriter w(info);
  w.u64(generation);
  w.u8(static_cast<uint8_t>(direction));
  HmacSha256 mac(secret);
  return mac.mac(as_bytes(info));
}

// ------------------------------------------------------------------------------------- sealer

FrameSealer::FrameSealer(const SessionSecret& secret, const Challenge& challenge, uint64_t generation,
                         Direction direction)
    : mac_(derive_frame_key(secret, challenge, generation, direction)),
      generation_(generation),
      direction_(direction) {}

std::string FrameSealer::seal(FrameType type, std::span<const uint8_t> payload) {
  std::string out;
  out.reserve(kFrameHeaderBytes + payload.size() + kMacBytes);
  WireWriter w(out);
  w.bytes(std::string_view(kFrameMagic, sizeof(kFrameMagic)));
  w.u8(static_cast<uint8_t>(type));
  w.u8(static_cast<uint8_t>(direction_));
  w.u16(0);
  w.u32(static_cast<uint32_t>(payload.size()));
  w.u64(generation_);
  w.u64(next_++);
  w.bytes(payload);
  const MacTag tag = mac_.mac(as_bytes(out));
  w.bytes(tag);
  return out;
}

std::string FrameSealer::snapshot(std::string_view snapshot_bytes) {
  return seal(FrameType::kSnapshot, as_bytes(snapshot_bytes));
}

std::string FrameSealer::event(uint64_t vllm_sequence, std::span<const uint8_t> batch) {
  std::string p;
  p.reserve(8 + batch.size());
  WireWriter w(p);
  w.u64(vllm_sequence);
  w.bytes(batch);
  return seal(FrameType::kEvent, as_bytes(p));
}

std::string FrameSealer::caught_up(std::optional<uint64_t> last_vllm_sequence) {
  std::string p;
  WireWriter w(p);
  w.u8(last_vllm_sequence ? 1 : 0);
  w.u64(last_vllm_sequence.value_or(0));
  return seal(FrameType::kCaughtUp, as_bytes(p));
}

std::string FrameSealer::identity(std::string_view incarnation) { return seal(FrameType::kIdentity, as_bytes(incarnation)); }

std::string FrameSealer::disconnect(DisconnectReason reason) {
  const uint8_t b = static_cast<uint8_t>(reason);
  return seal(FrameType::kDisconnect, std::span<const uint8_t>(&b, 1));
}

// ------------------------------------------------------------------------------------- opener

FrameOpener::FrameOpener(const SessionSecret& secret, const Challenge& challenge, Direction direction,
                         FrameLimits limits)
    : secret_(secret), challenge_(challenge), direction_(direction), limits_(limits) {}

FrameOpener::~FrameOpener() { OPENSSL_cleanse(secret_.data(), secret_.size()); }

Result<size_t, FrameError> FrameOpener::frame_size(std::span<const uint8_t> header) const {
  if (header.size() < kFrameHeaderBytes) return fail(FrameErrc::kTruncated);
  if (std::memcmp(header.data(), kFrameMagic, sizeof(kFrameMagic)) != 0) return fail(FrameErrc::kBadMagic);
  WireReader r(header.subspan(sizeof(kFrameMagic)));
  uint8_t type = 0, dir = 0;
  uint16_t reserved = 0;
  uint32_t len = 0;
  (void)(r.u8(type) && r.u8(dir) && r.u16(reserved) && r.u32(len));
  if (reserved != 0) return fail(FrameErrc::kBadVersion);
  if (!known_type(type)) return fail(FrameErrc::kUnknownType);
  if (dir != static_cast<uint8_t>(direction_)) return fail(FrameErrc::kWrongDirection);
  const size_t total = kFrameHeaderBytes + static_cast<size_t>(len) + kMacBytes;
  const size_t max = type == static_cast<uint8_t>(FrameType::kSnapshot)
                         ? kFrameHeaderBytes + limits_.max_snapshot_bytes + kMacBytes
                         : limits_.max_tail_frame;
  if (total > max) return fail(FrameErrc::kOversized);
  return total;
}

Result<Frame, FrameError> FrameOpener::open(std::span<const uint8_t> bytes) {
  auto size = frame_size(bytes);
  if (!size.ok()) return size.error();
  if (bytes.size() < *size) return fail(FrameErrc::kTruncated);
  if (bytes.size() > *size) return fail(FrameErrc::kMalformed);
  WireReader r(bytes.subspan(sizeof(kFrameMagic)));
  uint8_t type = 0, dir = 0;
  uint16_t reserved = 0;
  uint32_t len = 0;
  Frame f;
  (void)(r.u8(type) && r.u8(dir) && r.u16(reserved) && r.u32(len) && r.u64(f.generation) &&
         r.u64(f.delivery_sequence));
  // The first frame's generation names the key (kept only if the frame is authentic). A frame of
  // another generation is checked under that generation's key: only an authentic one is reported
  // as a generation change, anything else is a bad MAC.
  const bool changed = generation_ && *generation_ != f.generation;
  std::unique_ptr<HmacSha256> other_key;
  HmacSha256* mac = mac_.get();
  if (!mac || changed) {
    other_key = std::make_unique<HmacSha256>(derive_frame_key(secret_, challenge_, f.generation, direction_));
    mac = other_key.get();
  }
  const size_t signed_bytes = bytes.size() - kMacBytes;
  const MacTag tag = mac->mac(bytes.first(signed_bytes));
  if (!tags_equal(tag, bytes.subspan(signed_bytes))) return fail(FrameErrc::kBadMac);
  if (changed) return fail(FrameErrc::kGenerationChanged);
  std::unique_ptr<HmacSha256>& first_key = other_key;
  if (f.delivery_sequence != next_) return fail(FrameErrc::kGap);

  f.type = static_cast<FrameType>(type);
  f.payload = bytes.subspan(kFrameHeaderBytes, len);
  WireReader p(f.payload);
  switch (f.type) {
    case FrameType::kSnapshot:
      break;
    case FrameType::kEvent:
      if (!p.u64(f.event_sequence)) return fail(FrameErrc::kMalformed);
      f.has_event_sequence = true;
      if (p.left() == 0) return fail(FrameErrc::kMalformed);
      if (p.left() > limits_.max_batch_payload) return fail(FrameErrc::kOversized);
      (void)p.view(p.left(), f.batch);
      break;
    case FrameType::kCaughtUp: {
      uint8_t has = 0;
      if (f.payload.size() != 9 || !p.u8(has) || !p.u64(f.event_sequence) || has > 1 ||
          (has == 0 && f.event_sequence != 0)) {
        return fail(FrameErrc::kMalformed);
      }
      f.has_event_sequence = has == 1;
      break;
    }
    case FrameType::kIdentity:
      if (f.payload.size() > limits_.max_identity_bytes) return fail(FrameErrc::kOversized);
      f.identity = std::string_view(reinterpret_cast<const char*>(f.payload.data()), f.payload.size());
      break;
    case FrameType::kDisconnect:
      if (f.payload.size() != 1 || f.payload[0] > kMaxDisconnectReason) return fail(FrameErrc::kMalformed);
      f.reason = static_cast<DisconnectReason>(f.payload[0]);
      break;
  }
  if (first_key) {
    mac_ = std::move(first_key);
    generation_ = f.generation;
  }
  ++next_;
  return f;
}

}  // namespace ramjet::companion
