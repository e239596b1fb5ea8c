// cache/kv block hashes: canonical CBOR + SHA-256 (OpenSSL EVP, one fetched EVP_MD, a reused
// context) or XXH3-128 (libxxhash).
#include "cache/kv/block_hash.h"

#include <openssl/evp.h>
#include <xxhash.h>

#include <array>
#include <cstdio>
#include <cstdlib>

namespace ramjet::cache::kv {

namespace {

[[noreturn]] void die(const char* what) {
  // An impossible state (OpenSSL without SHA-256): crash loudly rather than publish garbage.
  std::fprintf(stderr, "cache/kv: %s failed\n", what);
  std::abort();
}

}  // namespace

std::string_view name(HashAlgo algo) {
  return algo == HashAlgo::kSha256Cbor ? "sha256_cbor" : "xxhash_cbor";
}

std::optional<HashAlgo> hash_algo_from_name(std::string_view name) {
  if (name == "sha256_cbor") return HashAlgo::kSha256Cbor;
  if (name == "xxhash_cbor") return HashAlgo::kXxhashCbor;
  return std::nullopt;
}

size_t digest_size(HashAlgo algo) {
  return algo == HashAlgo::kSha256Cbor ? 32 : 16;
}

void cbor_append_head(std::vector<uint8_t>& out, uint8_t major, uint64_t value) {
  const auto m = static_cast<uint8_t>(major << 5);
  if (value < 24) {
    out.push_back(static_cast<uint8_t>(m | value));
  } else if (value <= 0xff) {
    out.push_back(m | 24);
    out.push_back(static_cast<uint8_t>(value));
  } else if (value <= 0xffff) {
    out.push_back(m | 25);
    out.push_back(static_cast<uint8_t>(value >> 8));
    out.push_back(static_cast<uint8_t>(value));
  } else if (value <= 0xffffffffULL) {
    out.push_back(m | 26);
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(value >> s));
  } else {
    out.push_back(m | 27);
    for (int s = 56; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(value >> s));
  }
}

BlockHasher::BlockHasher(HashAlgo algo, std::string_view hash_seed) : algo_(algo) {
  if (algo_ == HashAlgo::kSha256Cbor) {
    md_ = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    if (md_ == nullptr) die("EVP_MD_fetch(SHA256)");
    ctx_ = EVP_MD_CTX_new();
    if (ctx_ == nullptr) die("EVP_MD_CTX_new");
  }
  buf_.reserve(64 + 5 * 1024);
  std::vector<uint8_t> seed;
  cbor_append_head(seed, 3, hash_seed.size());
  seed.insert(seed.end(), hash_seed.begin(), hash_seed.end());
  none_hash_ = digest(seed);
}

BlockHasher::~BlockHasher() {
  EVP_MD_CTX_free(ctx_);
  EVP_MD_free(md_);
}

BlockHash BlockHasher::digest(std::span<const uint8_t> bytes) {
  if (algo_ == HashAlgo::kXxhashCbor) {
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH3_128bits(bytes.data(), bytes.size()));
    return BlockHash::from_bytes(canonical.digest);
  }
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  if (EVP_DigestInit_ex2(ctx_, md_, nullptr) != 1 ||
      EVP_DigestUpdate(ctx_, bytes.data(), bytes.size()) != 1 ||
      EVP_DigestFinal_ex(ctx_, out.data(), &len) != 1 || len != out.size()) {
    die("SHA-256");
  }
  return BlockHash::from_bytes(out);
}

BlockHash BlockHasher::hash_block(const BlockHash& parent, std::span<const uint32_t> tokens) {
  const std::span<const uint8_t> p = parent.bytes();
  buf_.clear();
  cbor_append_head(buf_, 4, 3);         // 3-array
  cbor_append_head(buf_, 2, p.size());  // bstr parent digest
  buf_.insert(buf_.end(), p.begin(), p.end());
  cbor_append_head(buf_, 4, tokens.size());  // [uint ...]
  for (uint32_t t : tokens) cbor_append_head(buf_, 0, t);
  buf_.push_back(0xf6);  // extra_keys = null
  return digest(buf_);
}

}  // namespace ramjet::cache::kv
