#include "upstream/peer_codec.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>

namespace ramjet::upstream {

namespace {

constexpr std::array<uint8_t, 4> kMagic = {'R', 'J', 'P', 'L'};
constexpr uint8_t kVersion = 1;

void put64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::array<uint8_t, 32> hmac(const PeerSecret& key, std::span<const uint8_t> bytes) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), bytes.data(), bytes.size(), out.data(), &len);
  return out;
}

}  // namespace

std::string_view label(PeerOutcome o) {
  switch (o) {
    case PeerOutcome::kAccepted: return "accepted";
    case PeerOutcome::kMalformed: return "malformed";
    case PeerOutcome::kBadMac: return "bad_mac";
    case PeerOutcome::kReplayed: return "replayed";
    case PeerOutcome::kOutOfTime: return "out_of_time";
    case PeerOutcome::kOwn: return "own";
    case PeerOutcome::kNoRoom: return "no_room";
    case PeerOutcome::kReceiveError: return "receive_error";
    case PeerOutcome::kCount: break;
  }
  return "unknown";
}

std::vector<uint8_t> encode_peer_message(const PeerMessage& m, const PeerSecret& secret) {
  const size_t n = std::min(m.entries.size(), kMaxPeerEntries);
  std::vector<uint8_t> out;
  out.reserve(kPeerHeaderBytes + n * kPeerEntryBytes + kPeerMacBytes);
  out.insert(out.end(), kMagic.begin(), kMagic.end());
  out.push_back(kVersion);
  out.insert(out.end(), 3, 0);
  put64(out, m.sender);
  put64(out, m.seq);
  put64(out, m.sent_unix_ms);
  put32(out, static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    put64(out, m.entries[i].engine_key);
    put32(out, m.entries[i].inflight);
    put32(out, m.entries[i].units);
  }
  const auto tag = hmac(secret, out);
  out.insert(out.end(), tag.begin(), tag.end());
  return out;
}

PeerDecoded decode_peer_message(std::span<const uint8_t> bytes, const PeerSecret& secret) {
  PeerDecoded d;
  if (bytes.size() < kPeerHeaderBytes + kPeerMacBytes || bytes.size() > kMaxDatagram) return d;
  const uint8_t* p = bytes.data();
  if (std::memcmp(p, kMagic.data(), kMagic.size()) != 0 || p[4] != kVersion || p[5] != 0 || p[6] != 0 || p[7] != 0) {
    return d;
  }
  const uint32_t n = get32(p + 32);
  if (n > kMaxPeerEntries || bytes.size() != kPeerHeaderBytes + size_t{n} * kPeerEntryBytes + kPeerMacBytes) return d;
  const size_t body = bytes.size() - kPeerMacBytes;
  const auto tag = hmac(secret, bytes.first(body));
  if (CRYPTO_memcmp(tag.data(), p + body, kPeerMacBytes) != 0) {
    d.outcome = PeerOutcome::kBadMac;
    return d;
  }
  d.message.sender = get64(p + 8);
  if (d.message.sender == 0) return d;  // no process sends as 0 (signed, but not a sender)
  d.message.seq = get64(p + 16);
  d.message.sent_unix_ms = get64(p + 24);
  d.message.entries.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t* e = p + kPeerHeaderBytes + size_t{i} * kPeerEntryBytes;
    d.message.entries[i] = PeerEntry{get64(e), get32(e + 8), get32(e + 12)};
  }
  d.outcome = PeerOutcome::kAccepted;
  return d;
}

uint64_t peer_engine_key(const config::UpstreamUrl& url, const PeerSecret& secret) {
  std::string host = url.host;
  std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return std::tolower(c); });
  const std::string name = std::string("engine ") + (url.tls ? "https://" : "http://") + host + ":" +
                           std::to_string(url.port) + url.base_path;
  const auto tag = hmac(secret, std::span(reinterpret_cast<const uint8_t*>(name.data()), name.size()));
  return get64(tag.data());
}

}  // namespace ramjet::upstream
