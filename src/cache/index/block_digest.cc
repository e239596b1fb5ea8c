// cache/index/block_digest: HMAC-SHA256 with precomputed pad states. digest() runs on OpenSSL's
// EVP digest API (copy the inner state, absorb the message, finish; copy the outer state, absorb
// the inner hash, finish); it is the reference. digest_words(), the per-request hot path, runs the
// same HMAC on sha256_lanes when the CPU has SHA extensions: the pad states as raw SHA-256 states,
// each block's padded inner message built in place (only the tokens change from block to block),
// two blocks per pass in interleaved lanes; else it calls digest() per block.
#include "cache/index/block_digest.h"

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "cache/index/exact_index.h"
#include "cache/index/sha256_lanes.h"

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

constexpr uint32_t kIv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                             0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

void put_be32(uint8_t* p, uint32_t v) {
  const uint32_t be = __builtin_bswap32(v);
  std::memcpy(p, &be, 4);
}

void put_be64(uint8_t* p, uint64_t v) {
  const uint64_t be = __builtin_bswap64(v);
  std::memcpy(p, &be, 8);
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
  bool lanes = false;           // sha256_lanes::available(): the raw states below are set
  uint32_t inner_state[8] = {};
  uint32_t outer_state[8] = {};
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
    if (sha256_lanes::available()) {
      uint32_t* state = fill == 0x36 ? impl->inner_state : impl->outer_state;
      std::memcpy(state, kIv, sizeof(kIv));
      sha256_lanes::compress(state, pad, 1);
      impl->lanes = true;
    }
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
  if (impl_->lanes && blocks > 0) {
    // Two lanes, each a padded inner message (domain, count, tokens, 0x80, zeros, bit length of
    // pad block + message) and a padded outer message (inner hash, 0x80, zeros, 768 bits).
    constexpr size_t kHead = sizeof(kDomain) + 4;
    const size_t msg = kHead + static_cast<size_t>(block_size) * 4;
    const size_t inner_blocks = (msg + 9 + 63) / 64;
    thread_local std::vector<uint8_t> buf;
    buf.assign(2 * inner_blocks * 64 + 2 * 64, 0);
    uint8_t* in[2] = {buf.data(), buf.data() + inner_blocks * 64};
    uint8_t* outer[2] = {buf.data() + 2 * inner_blocks * 64, buf.data() + 2 * inner_blocks * 64 + 64};
    for (int l = 0; l < 2; ++l) {
      std::memcpy(in[l], kDomain, sizeof(kDomain));
      std::memcpy(in[l] + sizeof(kDomain), &block_size, 4);
      in[l][msg] = 0x80;
      put_be64(in[l] + inner_blocks * 64 - 8, (64 + msg) * 8);
      outer[l][32] = 0x80;
      put_be64(outer[l] + 56, (64 + 32) * 8);
    }
    uint32_t inner[2][8], outer_state[2][8];
    for (size_t b = 0; b < blocks; b += 2) {
      const int lanes = b + 1 < blocks ? 2 : 1;
      for (int l = 0; l < lanes; ++l) {
        std::memcpy(in[l] + kHead, tokens.data() + (b + static_cast<size_t>(l)) * block_size, block_size * 4u);
        std::memcpy(inner[l], impl_->inner_state, sizeof(inner[l]));
        std::memcpy(outer_state[l], impl_->outer_state, sizeof(outer_state[l]));
      }
      if (lanes == 2) sha256_lanes::compress2(inner[0], in[0], inner[1], in[1], inner_blocks);
      else sha256_lanes::compress(inner[0], in[0], inner_blocks);
      for (int l = 0; l < lanes; ++l) {
        for (int j = 0; j < 8; ++j) put_be32(outer[l] + 4 * j, inner[l][j]);
      }
      if (lanes == 2) sha256_lanes::compress2(outer_state[0], outer[0], outer_state[1], outer[1], 1);
      else sha256_lanes::compress(outer_state[0], outer[0], 1);
      // The digest's bytes are the state's words big-endian; the chain reads them little-endian.
      for (int l = 0; l < lanes; ++l) {
        uint32_t* w = &out[at + (b + static_cast<size_t>(l)) * kDigestWords];
        for (int j = 0; j < 8; ++j) w[j] = __builtin_bswap32(outer_state[l][j]);
      }
    }
    return;
  }
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
