// Fuzz target for upstream/peer_codec's datagram decoder (RJ_PEERS: UDP bytes from the network).
// Each input is decoded as it came, and again with a valid MAC appended so the fuzzer reaches the
// fields behind the check. Any input must give a refusal or a message within the limits whose
// encoding is the input itself; nothing may read past the datagram.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <span>
#include <vector>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "upstream/peer_codec.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void decode_and_check(std::span<const uint8_t> bytes, const ramjet::upstream::PeerSecret& secret) {
  using namespace ramjet::upstream;
  const PeerDecoded d = decode_peer_message(bytes, secret);
  if (d.outcome != PeerOutcome::kAccepted) return;
  check(d.message.entries.size() <= kMaxPeerEntries);
  const std::vector<uint8_t> again = encode_peer_message(d.message, secret);
  check(again.size() == bytes.size() && std::equal(again.begin(), again.end(), bytes.begin()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramjet::upstream::PeerSecret secret;
  secret.fill(0x5a);
  decode_and_check(std::span(data, size), secret);
  if (size > ramjet::upstream::kMaxDatagram) return 0;
  std::vector<uint8_t> signed_bytes(data, data + size);
  unsigned char tag[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), data, size, tag, &len);
  signed_bytes.insert(signed_bytes.end(), tag, tag + 32);
  decode_and_check(signed_bytes, secret);
  return 0;
}
