// upstream/peer_codec: the RJ_PEERS datagram (upstream/peer_load.h has the whole story and the wire
// format): encoding, the bounded decoder of untrusted UDP bytes (fuzz_peer_load) and the keyed
// engine names. No sockets, no coroutines (the fuzz build links it alone).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace ramjet::upstream {

using PeerSecret = std::array<uint8_t, 32>;

struct PeerEntry {
  uint64_t engine_key = 0;
  uint32_t inflight = 0;
  uint32_t units = 0;
  bool operator==(const PeerEntry&) const = default;
};

struct PeerMessage {
  uint64_t sender = 0;
  uint64_t seq = 0;
  uint64_t sent_unix_ms = 0;
  std::vector<PeerEntry> entries;
};

inline constexpr size_t kPeerHeaderBytes = 36;
inline constexpr size_t kPeerEntryBytes = 16;
inline constexpr size_t kPeerMacBytes = 32;
inline constexpr size_t kMaxPeerEntries = 1024;
inline constexpr size_t kMaxDatagram = kPeerHeaderBytes + kMaxPeerEntries * kPeerEntryBytes + kPeerMacBytes;

// Why a datagram was dropped (label of ramjet_peer_datagrams_total{outcome}), or kAccepted.
enum class PeerOutcome : uint8_t {
  kAccepted, kMalformed, kBadMac, kReplayed, kOutOfTime, kOwn, kNoRoom, kReceiveError, kCount
};
std::string_view label(PeerOutcome o);

std::vector<uint8_t> encode_peer_message(const PeerMessage& m, const PeerSecret& secret);
// The message, or why not: kMalformed (size, magic, version, reserved bytes, count, trailing
// bytes) or kBadMac.
// Never reads past `bytes`; checks the MAC before trusting any field but the length.
struct PeerDecoded {
  PeerOutcome outcome = PeerOutcome::kMalformed;
  PeerMessage message;
};
PeerDecoded decode_peer_message(std::span<const uint8_t> bytes, const PeerSecret& secret);

// The key an engine goes by between replicas: HMAC-SHA256(secret, "engine " + scheme://host:port
// + base path, the host in lower case), first 8 bytes. Replicas must name each engine alike.
uint64_t peer_engine_key(const config::UpstreamUrl& url, const PeerSecret& secret);

}  // namespace ramjet::upstream
