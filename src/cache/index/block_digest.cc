// cache/index/block_digest: HMAC-SHA256 with precomputed pad states on OpenSSL's EVP digest API
// (the low-level SHA256_* calls would save one context copy per hash but are deprecated in
// OpenSSL 3). A block: copy the inner state, absorb the message, finish; copy the outer state,
// absorb the inner hash, finish.
#include "cache/index/block_digest.h"

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "cache/index/exact_index.h"

namespace ramjet::cache {

static_assert(std::endian::native == std::endian::little, "digest words and tokens are little-endian");

namespace {

constexpr char kDomain[] = "ramjet:block-digest:v1";             // hashed with its NUL
constexpr char kKeyIdDomain[] = "ramjet:block-digest-key-id:v1";  // hashed with its NUL

[[noreturn]] void die(const char* what) {
  // An allocation or provider failure in OpenSSL: no digest can be trusted after it.
  std::fprintf(stderr, "block_digest: %s failed\n", what);
  std::abort();
}

void check(int rc, const char* what) {
  if (rc != 1) die(what);
}

const EVP_MD* sha256() {
  static EVP_MD* md = [] {
    EVP_MD* m = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    if (m == nullptr) die("EVP_MD_fetch(SHA256)");
    return m;
  }();
  return md;
}

// One working context per thread, reused by every block it digests.
struct Work {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  Work() {
    if (ctx == nullptr) die("EVP_MD_CTX_new");
  }
  ~Work() { EVP_MD_CTX_free(ctx); }
};
EVP_MD_CTX* work_ctx() {
  thread_local Work w;
  return w.ctx;
}

}  // namespace

struct DigestKey::Impl {
  EVP_MD_CTX* inner = nullptr;  // after key ^ ipad
  EVP_MD_CTX* outer = nullptr;  // after key ^ opad
  ~Impl() {
    EVP_MD_CTX_free(inner);
    EVP_MD_CTX_free(outer);
  }
};

DigestKey::DigestKey(std::unique_ptr<Impl> impl, const DigestKeyId& id) : impl_(std::move(impl)), key_id_(id) {}
DigestKey::~DigestKey() = default;

std::shared_ptr<const DigestKey> DigestKey::from_secret(std::span<const uint8_t> secret) {
  if (secret.size() != kDigestSecretBytes) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->inner = EVP_MD_CTX_new();
  impl->outer = EVP_MD_CTX_new();
  if (impl->inner == nullptr || impl->outer == nullptr) die("EVP_MD_CTX_new");
  uint8_t pad[64];
  for (uint8_t fill : {uint8_t{0x36}, uint8_t{0x5c}}) {
    std::memset(pad, fill, sizeof(pad));
    for (size_t i = 0; i < secret.size(); ++i) pad[i] ^= secret[i];
    EVP_MD_CTX* c = fill == 0x36 ? impl->inner : impl->outer;
    check(EVP_DigestInit_ex2(c, sha256(), nullptr), "EVP_DigestInit_ex2");
    check(EVP_DigestUpdate(c, pad, sizeof(pad)), "EVP_DigestUpdate");
  }
  OPENSSL_cleanse(pad, sizeof(pad));

  DigestKeyId id{};
  EVP_MD_CTX* c = work_ctx();
  unsigned len = 0;
  check(EVP_DigestInit_ex2(c, sha256(), nullptr), "EVP_DigestInit_ex2");
  check(EVP_DigestUpdate(c, kKeyIdDomain, sizeof(kKeyIdDomain)), "EVP_DigestUpdate");
  check(EVP_DigestUpdate(c, secret.data(), secret.size()), "EVP_DigestUpdate");
  check(EVP_DigestFinal_ex(c, id.data(), &len), "EVP_DigestFinal_ex");
  return std::shared_ptr<const DigestKey>(new DigestKey(std::move(impl), id));
}

BlockDigest DigestKey::digest(std::span<const uint32_t> block_tokens) const {
  // The message's fixed head (domain, NUL, count) in one update; then the tokens' bytes as they lie.
  uint8_t head[sizeof(kDomain) + 4];
  std::memcpy(head, kDomain, sizeof(kDomain));
  const uint32_t count = static_cast<uint32_t>(block_tokens.size());
  std::memcpy(head + sizeof(kDomain), &count, 4);
  EVP_MD_CTX* c = work_ctx();
  BlockDigest d{};
  unsigned len = 0;
  check(EVP_MD_CTX_copy_ex(c, impl_->inner), "EVP_MD_CTX_copy_ex");
  check(EVP_DigestUpdate(c, head, sizeof(head)), "EVP_DigestUpdate");
  check(EVP_DigestUpdate(c, block_tokens.data(), block_tokens.size_bytes()), "EVP_DigestUpdate");
  check(EVP_DigestFinal_ex(c, d.data(), &len), "EVP_DigestFinal_ex");
  check(EVP_MD_CTX_copy_ex(c, impl_->outer), "EVP_MD_CTX_copy_ex");
  check(EVP_DigestUpdate(c, d.data(), d.size()), "EVP_DigestUpdate");
  check(EVP_DigestFinal_ex(c, d.data(), &len), "EVP_DigestFinal_ex");
  return d;
}

void DigestKey::digest_words(std::span<const uint32_t> tokens, uint32_t block_size, std::vector<uint32_t>& out) const {
  if (block_size == 0) return;
  const size_t blocks = tokens.size() / block_size;
  const size_t at = out.size();
  out.resize(at + blocks * kDigestWords);
  for (size_t b = 0; b < blocks; ++b) {
    const BlockDigest d = digest(tokens.subspan(b * block_size, block_size));
    std::memcpy(&out[at + b * kDigestWords], d.data(), d.size());
  }
}

std::array<uint32_t, kDigestWords> digest_words(const BlockDigest& d) {
  std::array<uint32_t, kDigestWords> w{};
  std::memcpy(w.data(), d.data(), d.size());
  return w;
}

void digest_chain(const DigestKey& key, std::span<const uint32_t> tokens, uint32_t block_size, uint64_t root_seed,
                  std::vector<uint64_t>& out) {
  if (block_size == 0) return;
  thread_local std::vector<uint32_t> words;
  words.clear();
  key.digest_words(tokens, block_size, words);
  exact_chain(words, kDigestWords, root_seed, out);
}

}  // namespace ramjet::cache
