// sim/engine block hashes: vLLM's `sha256_cbor` chained block hash (vllm-contracts.md §3), so the
// simulator's KV events carry the digests a real vLLM with the same PYTHONHASHSEED would publish.
// Owns the CBOR encoding and the OpenSSL digest context; the pool and the scheduler decide what
// to hash. Not thread-safe (one hasher per engine: the context is reused).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "sim/engine/kv_event.h"

struct evp_md_st;
struct evp_md_ctx_st;

namespace ramjet::sim {

// Canonical (shortest-form) CBOR head: major type (0..7) and argument.
void cbor_append_head(std::vector<uint8_t>& out, uint8_t major, uint64_t value);

class BlockHasher {
 public:
  // NONE_HASH = SHA-256(cbor(text string hash_seed)), as vLLM's init_none_hash with
  // PYTHONHASHSEED set to hash_seed.
  explicit BlockHasher(std::string_view hash_seed);
  ~BlockHasher();
  BlockHasher(const BlockHasher&) = delete;
  BlockHasher& operator=(const BlockHasher&) = delete;

  const Digest& none_hash() const { return none_hash_; }

  // H = SHA-256(cbor([bstr parent, [uint tokens...], null])); parent = none_hash() for block 0.
  Digest hash_block(const Digest& parent, std::span<const uint32_t> tokens);

  Digest sha256(std::span<const uint8_t> bytes);

 private:
  evp_md_st* md_ = nullptr;
  evp_md_ctx_st* ctx_ = nullptr;
  std::vector<uint8_t> buf_;  // reused CBOR buffer
  Digest none_hash_{};
};

}  // namespace ramjet::sim
