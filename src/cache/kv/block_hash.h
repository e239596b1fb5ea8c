// cache/kv block hashes: vLLM's chained prefix-cache block hash for the two CBOR-based algorithms
// (`--prefix-caching-hash-algo sha256_cbor | xxhash_cbor`), so a simulator publishes, and a
// balancer can recompute, the digests a real vLLM with the same PYTHONHASHSEED produces. The
// pickle-based `sha256` / `xxhash` algorithms (vLLM's default) hash Python pickles and are not
// reproducible outside Python. Owns the canonical CBOR encoding and the digest state; which blocks
// to hash is the caller's business. Not thread-safe: one hasher per thread (its state is reused).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cache/kv/event.h"

struct evp_md_st;
struct evp_md_ctx_st;

namespace ramjet::cache::kv {

enum class HashAlgo : uint8_t {
  kSha256Cbor,  // SHA-256 over canonical CBOR: 32-byte digests
  kXxhashCbor,  // XXH3-128 over canonical CBOR, canonical (big-endian) bytes: 16-byte digests
};
std::string_view name(HashAlgo algo);  // "sha256_cbor" | "xxhash_cbor", as vLLM spells them
std::optional<HashAlgo> hash_algo_from_name(std::string_view name);
size_t digest_size(HashAlgo algo);

// Canonical (shortest-form) CBOR head: major type (0..7) and argument.
void cbor_append_head(std::vector<uint8_t>& out, uint8_t major, uint64_t value);

class BlockHasher {
 public:
  // NONE_HASH = hash_fn(cbor(text string hash_seed)), as vLLM's init_none_hash with
  // PYTHONHASHSEED set to hash_seed.
  BlockHasher(HashAlgo algo, std::string_view hash_seed);
  ~BlockHasher();
  BlockHasher(const BlockHasher&) = delete;
  BlockHasher& operator=(const BlockHasher&) = delete;

  HashAlgo algo() const { return algo_; }
  const BlockHash& none_hash() const { return none_hash_; }

  // vLLM's hash_block_tokens with no extra keys: H = hash_fn(cbor([bstr parent, [uint tokens...],
  // null])); parent = none_hash() for block 0, else the previous block's digest (a bytes hash).
  BlockHash hash_block(const BlockHash& parent, std::span<const uint32_t> tokens);

  // hash_fn over raw bytes (the digest of this hasher's algorithm).
  BlockHash digest(std::span<const uint8_t> bytes);

 private:
  HashAlgo algo_;
  evp_md_st* md_ = nullptr;  // SHA-256 only
  evp_md_ctx_st* ctx_ = nullptr;
  std::vector<uint8_t> buf_;  // reused CBOR buffer
  BlockHash none_hash_{};
};

}  // namespace ramjet::cache::kv
