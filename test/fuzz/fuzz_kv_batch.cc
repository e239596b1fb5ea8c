// Fuzz target for cache/kv's KV-event batch decoder: engine payloads are untrusted bytes. Any
// input must decode or fail with a typed error (never crash, never read out of bounds); a batch
// that decodes must come back unchanged from re-encoding, in the map layout and in the widest
// array layout, and re-encoding it again must give the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <span>
#include <string>

#include "cache/kv/codec.h"

namespace {

namespace kv = ramjet::cache::kv;

void check(bool ok) {
  if (!ok) std::abort();
}

kv::DecodeLimits small_limits() {
  kv::DecodeLimits l;  // small enough that the fuzzer reaches every limit
  l.max_events = 8;
  l.max_block_hashes_per_event = 16;
  l.max_block_hashes_per_batch = 32;
  l.max_token_ids_per_event = 64;
  l.max_token_ids_per_batch = 128;
  l.max_extra_keys_per_event = 16;
  l.max_extra_keys_per_batch = 32;
  l.max_extra_key_bytes = 64;
  l.max_string_bytes = 32;
  l.max_event_fields = 24;
  l.max_depth = 4;
  return l;
}

void round_trip(const kv::EventBatch& batch, const kv::DecodeLimits& limits) {
  // Re-encoding can grow a batch (map keys, nil fields): only the payload size is relaxed.
  kv::DecodeLimits again = limits;
  again.max_payload_bytes = std::numeric_limits<size_t>::max();
  for (const kv::EncodeOptions& o :
       {kv::EncodeOptions{kv::Layout::kMap, false, {}},
        kv::EncodeOptions{kv::Layout::kArray, false, kv::ArrayLayout{14, 6, true}}}) {
    const std::string bytes = kv::encode_batch(batch, o);
    const auto decoded = kv::decode_batch(bytes, again);
    check(decoded.ok());
    check(*decoded == batch);
    check(kv::encode_batch(*decoded, o) == bytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  for (const kv::DecodeLimits& limits : {kv::DecodeLimits{}, small_limits()}) {
    const auto r = kv::decode_batch(input, limits);
    if (!r.ok()) {
      check(!r.error().message.empty());
      check(r.error().reason() != "unknown");
      continue;
    }
    check(r->events.size() <= limits.max_events);
    round_trip(*r, limits);
  }
  return 0;
}
