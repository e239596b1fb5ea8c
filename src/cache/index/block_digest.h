// cache/index/block_digest: keyed digests of token blocks, for the digest index (issue 16). A
// companion keeps an engine's exact state without holding token IDs: each block is replaced by
// HMAC-SHA256(secret, "ramjet:block-digest:v1\0" ‖ u32le token count ‖ tokens as u32le), and the
// digest's 8 little-endian words take the tokens' place in the exact chain (exact_next), so an
// ExactShard holds digest chains unchanged. Who holds the secret and how it is loaded is the
// caller's (the companion and ramjet read the same 32-byte file); this module never logs it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace ramjet::cache {

inline constexpr size_t kDigestSecretBytes = 32;
inline constexpr uint32_t kDigestWords = 8;  // a digest in the chain: 8 uint32 "tokens"
using BlockDigest = std::array<uint8_t, 32>;
using DigestKeyId = std::array<uint8_t, 32>;

// An immutable HMAC key: the SHA-256 states after the key's inner and outer pads are absorbed
// once, so a block costs only its own compressions (2 inner + 1 outer for a 16-token block).
// Thread-safe: digest() may run on any number of threads at once (each uses a thread-local
// working context).
class DigestKey {
 public:
  // nullptr unless `secret` is exactly 32 bytes.
  static std::shared_ptr<const DigestKey> from_secret(std::span<const uint8_t> secret);
  ~DigestKey();
  DigestKey(const DigestKey&) = delete;
  DigestKey& operator=(const DigestKey&) = delete;

  // SHA-256("ramjet:block-digest-key-id:v1\0" ‖ secret): names the key in snapshots and logs
  // without revealing it.
  const DigestKeyId& key_id() const { return key_id_; }

  BlockDigest digest(std::span<const uint32_t> block_tokens) const;
  // Appends kDigestWords words per full block of `tokens` (the partial tail is not a block).
  void digest_words(std::span<const uint32_t> tokens, uint32_t block_size, std::vector<uint32_t>& out) const;

  struct Impl;

 private:
  explicit DigestKey(std::unique_ptr<Impl> impl, const DigestKeyId& id);
  std::unique_ptr<Impl> impl_;
  DigestKeyId key_id_{};
};

// A block's digest as the words the chain hashes (little-endian reads of its 32 bytes).
std::array<uint32_t, kDigestWords> digest_words(const BlockDigest& d);

// The digest twin of exact_chain: the key of every full block of `tokens`, chained over the
// blocks' digests (exact_next(previous key, digest words)) from `root_seed`
// (exact_root_seed(block_size, namespace) as for raw tokens).
void digest_chain(const DigestKey& key, std::span<const uint32_t> tokens, uint32_t block_size, uint64_t root_seed,
                  std::vector<uint64_t>& out);

}  // namespace ramjet::cache
