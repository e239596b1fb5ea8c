// cache/index/sha256_lanes: the SHA-256 compression function on x86 SHA extensions, for
// block_digest's hot path only (everything else hashes through OpenSSL). Hashing two independent
// messages in interleaved lanes hides the latency of the round instructions, which bounds a
// single stream (OpenSSL's): block_digest needs three compressions per 16-token block and
// thousands of blocks per request. Verified against OpenSSL in block_digest_test.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ramjet::cache::sha256_lanes {

// Whether this CPU has the SHA extensions and SSE4.1 (checked once).
bool available();

// Compresses `blocks` consecutive 64-byte blocks of `data` into `state` (h0..h7, as FIPS 180-4
// numbers them). Only when available().
void compress(uint32_t state[8], const uint8_t* data, size_t blocks);
// Two independent messages of `blocks` blocks each, interleaved.
void compress2(uint32_t state_a[8], const uint8_t* data_a, uint32_t state_b[8], const uint8_t* data_b, size_t blocks);

}  // namespace ramjet::cache::sha256_lanes
