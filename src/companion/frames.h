// companion/frames: the authenticated byte protocol between ramjet (the client) and a companion.
//  1. ramjet sends a hello: magic, a fresh 32-byte challenge, HMAC-SHA256 under the 32-byte
//     session secret. The companion checks it before doing any work.
//  2. The companion answers with frames: one Snapshot (companion/snapshot's envelope, bound to the
//     same challenge), then the tail: Event (a real vLLM sequence + the KV-event batch payload
//     bytes exactly as the engine published them), CaughtUp, Identity, Disconnect.
// Every frame carries a dense delivery sequence (0, 1, 2, ... strictly) separate from vLLM's sparse
// sequences, the companion's generation, and a MAC under a key derived from (session secret,
// challenge, generation, direction), so frames are bound to one connection and cannot be replayed
// into another or reflected. What a frame means for trust (apply, fence, publish) is the client's;
// sockets, deadlines and the challenge ledger are the companion process's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/result.h"
#include "companion/mac.h"
#include "companion/snapshot.h"

namespace ramjet::companion {

using SessionSecret = std::array<uint8_t, 32>;

inline constexpr char kHelloMagic[8] = {'R', 'J', 'H', 'E', 'L', 'O', '0', '1'};
inline constexpr char kFrameMagic[8] = {'R', 'J', 'T', 'A', 'I', 'L', '0', '1'};
inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kHelloBytes = 80;        // magic, u32 version, u32 flags, challenge, MAC
inline constexpr size_t kFrameHeaderBytes = 32;  // magic, type, direction, u16 0, u32 length, u64 generation, u64 seq
inline constexpr size_t kMacBytes = 32;

enum class Direction : uint8_t { kToRamjet = 1, kToCompanion = 2 };
enum class FrameType : uint8_t { kSnapshot = 1, kEvent = 2, kCaughtUp = 3, kIdentity = 4, kDisconnect = 5 };
enum class DisconnectReason : uint8_t { kShutdown = 0, kReset = 1, kSlowClient = 2, kIdentityChanged = 3, kError = 4 };
inline constexpr uint8_t kMaxDisconnectReason = 4;

struct FrameLimits {
  size_t max_tail_frame = 8392704;        // a whole non-snapshot frame: header + payload + MAC
  size_t max_batch_payload = 8u << 20;    // an Event's KV-event batch bytes
  size_t max_snapshot_bytes = 32u << 20;  // a Snapshot frame's payload
  size_t max_identity_bytes = 256;
};

enum class FrameErrc : uint8_t {
  kTruncated,     // shorter than the header or its length says
  kBadMagic,
  kBadVersion,    // another protocol version, or reserved bits set
  kUnknownType,
  kWrongDirection,
  kOversized,     // a length beyond the limits
  kBadMac,
  kGap,           // a delivery sequence other than the expected next one
  kGenerationChanged,
  kMalformed,     // a payload that does not parse as its type, or bytes after the frame
};
std::string_view reason(FrameErrc e);

struct FrameError {
  FrameErrc code = FrameErrc::kMalformed;
  std::string_view reason() const { return companion::reason(code); }
};

// One opened frame; spans and views point into the bytes given to FrameOpener::open().
struct Frame {
  FrameType type = FrameType::kDisconnect;
  uint64_t delivery_sequence = 0;
  uint64_t generation = 0;
  std::span<const uint8_t> payload{};
  uint64_t event_sequence = 0;          // kEvent: its vLLM sequence; kCaughtUp: the last one applied
  bool has_event_sequence = false;      // kCaughtUp before any event: false
  std::span<const uint8_t> batch{};     // kEvent: the KV-event batch payload as vLLM published it
  std::string_view identity{};          // kIdentity: the engine incarnation now served
  DisconnectReason reason = DisconnectReason::kShutdown;  // kDisconnect
};

// ---- hello (ramjet -> companion) ----
std::array<uint8_t, kHelloBytes> seal_hello(const SessionSecret& secret, const Challenge& challenge);
// The challenge of an authentic hello; the caller checks it was never seen before (its ledger).
Result<Challenge, FrameError> open_hello(std::span<const uint8_t> hello, const SessionSecret& secret);

// The MAC key of one direction of one connection (HMAC-SHA256 of the session secret over a domain,
// the challenge, the generation and the direction).
std::array<uint8_t, 32> derive_frame_key(const SessionSecret& secret, const Challenge& challenge, uint64_t generation,
                                         Direction direction);

// The sending side of one connection's direction: numbers and seals frames.
class FrameSealer {
 public:
  FrameSealer(const SessionSecret& secret, const Challenge& challenge, uint64_t generation, Direction direction);

  std::string seal(FrameType type, std::span<const uint8_t> payload);  // any type byte (tests, fuzzing)
  std::string snapshot(std::string_view snapshot_bytes);
  std::string event(uint64_t vllm_sequence, std::span<const uint8_t> batch);
  std::string caught_up(std::optional<uint64_t> last_vllm_sequence);
  std::string identity(std::string_view incarnation);
  std::string disconnect(DisconnectReason reason);
  uint64_t next_sequence() const { return next_; }

 private:
  HmacSha256 mac_;
  uint64_t generation_;
  Direction direction_;
  uint64_t next_ = 0;
};

// The receiving side of one connection's direction: checks and opens frames in order. The first
// frame fixes the companion generation; any later change is an error. After an error the
// connection is done (the caller fences): the opener does not resynchronise.
class FrameOpener {
 public:
  FrameOpener(const SessionSecret& secret, const Challenge& challenge, Direction direction, FrameLimits limits = {});
  ~FrameOpener();  // wipes its copy of the secret
  FrameOpener(const FrameOpener&) = delete;
  FrameOpener& operator=(const FrameOpener&) = delete;

  // How many bytes the frame starting with `header` (at least kFrameHeaderBytes) occupies: a
  // stream reader reads the header, then the rest. Fails on a bad header or an oversized length.
  Result<size_t, FrameError> frame_size(std::span<const uint8_t> header) const;
  // Exactly one whole frame.
  Result<Frame, FrameError> open(std::span<const uint8_t> frame);
  uint64_t expected_sequence() const { return next_; }
  std::optional<uint64_t> generation() const { return generation_; }

 private:
  SessionSecret secret_;
  Challenge challenge_;
  Direction direction_;
  FrameLimits limits_;
  std::unique_ptr<HmacSha256> mac_;  // keyed at the first frame's generation
  std::optional<uint64_t> generation_;
  uint64_t next_ = 0;
};

}  // namespace ramjet::companion
