// request/prepare/canonical: the canonical prompt bytes of a request (the prompt-bearing fields
// in a fixed order, byte-compatible with ramjet 0.4.0; docs/life-of-a-request.md, "Prepare") and
// their chained 64-bit XXH3 fingerprints, one per chunk of RJ_ROUTE_CHUNK_BYTES. Pure functions of
// the post-shim parsed body and its bytes. Storing fingerprints per engine is cache/index; scoring the overlap is route/prefix_load.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/fwd.hpp>

#include "request/ingress/endpoint.h"

namespace ramjet::request {

struct FingerprintLimits {
  // Nesting deeper than this in the serialised part of the body falls back to the raw bytes.
  // prepare() parses with max_json_depth 128, so this bound only matters for values built by hand.
  uint32_t max_depth = 256;
};

struct FingerprintConfig {
  uint64_t chunk_bytes = 2048;           // RJ_ROUTE_CHUNK_BYTES (0 yields no fingerprints)
  uint64_t max_prefix_bytes = 2u << 20;  // RJ_ROUTE_MAX_PREFIX_BYTES
  FingerprintLimits limits;
};

struct Fingerprints {
  std::vector<uint64_t> chain;   // one per chunk_bytes chunk of the (truncated) canonical bytes
  uint64_t canonical_bytes = 0;  // bytes hashed, after truncation to max_prefix_bytes
  bool raw_fallback = false;     // the raw body was hashed instead of a canonical prompt
};

// The fingerprints of one request. `root` is the post-shim parsed body (any kind: a non-object
// falls back to the raw bytes) and `body` the post-shim bytes that will be forwarded.
//
// Canonical bytes, exactly as the reference: an Anthropic top-level `system` as a synthetic
// system message; the leading run of system/developer messages; the top-level fields tools,
// functions, tool_choice, function_call, parallel_tool_calls, reasoning_effort, thinking,
// response_format; the remaining object messages. A message is `message\0` then, for each of
// role, name, content, reasoning_content, reasoning, tool_calls, function_call, tool_call_id that
// is present and non-null, `key\0<canonical JSON>\0`; top-level fields use the same key encoding.
// Canonical JSON sorts object keys by bytes, recursively, with serde_json's compact escaping and
// number formatting. Raw fallback: not an object; `messages` neither array nor null; neither
// `messages` nor a non-null `system`; or a non-finite number (Boost.JSON reads 1e400 as infinity
// where serde_json rejects the body) in the serialised part.
//
// The endpoint does not change the bytes (the reference hashes every endpoint alike; `other`
// requests usually have empty bodies and so no fingerprints). The canonical bytes are streamed
// straight into the hash chain; hashing stops at max_prefix_bytes.
Fingerprints fingerprint_request(Endpoint endpoint, const boost::json::value& root,
                                 std::string_view body, const FingerprintConfig& config);

// The canonical bytes themselves (same rules, same truncation), for tests and debugging.
std::string canonical_prompt_bytes(const boost::json::value& root, std::string_view body,
                                   const FingerprintConfig& config, bool* raw_fallback = nullptr);

// The chain rule alone: for each chunk, XXH3-64 of the chunk seeded with the previous
// fingerprint, the previous fingerprint starting at 0 (XXH3_64bits_withSeed(chunk, previous)).
// The reference (ramjet 0.4.0) chained FNV-1a over (previous as 8 little-endian bytes) ++ chunk:
// a byte-serial multiply chain, ~4 cycles a byte (2.3 ms of one core for a 2 MiB prompt), where
// XXH3 reads 16 bytes a step. Fingerprints never leave the process (the index is memory only,
// peers share load, not fingerprints), so only their speed is visible; the canonical bytes stay
// the reference's, byte for byte (canonical_test checks its FNV goldens over them).
std::vector<uint64_t> chain_fingerprints(std::string_view bytes, uint64_t chunk_bytes);

// Puts a request's fingerprints in its prefix-cache namespace, as vLLM keys its blocks: a LoRA
// adapter's requests (`adapter`: its name) and a salted request's (`cache_salt`) never hit blocks
// another namespace cached, so their fingerprints must not match that namespace's either. Every
// fingerprint is xor-ed with a hash of the two; the default namespace (both empty) keeps the
// fingerprints unchanged.
void namespace_fingerprints(Fingerprints& f, std::string_view adapter, std::string_view cache_salt);

// serde_json's (ryu) rendering of a finite double: shortest round-trip digits, "1.0", "1e300",
// "0.001", "1e-7", "1.5e16". Exposed for tests.
std::string format_double_like_serde(double d);

}  // namespace ramjet::request
