#include "sim/engine/block_hash.h"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>

namespace ramjet::sim {

namespace {

[[noreturn]] void die(const char* what) {
  // An impossible state (OpenSSL without SHA-256): crash loudly rather than publish garbage.
  std::fprintf(stderr, "sim/engine: %s failed\n", what);
  std::abort();
}

}  // namespace

uint64_t external_u64(const Digest& d) {
  uint64_t v = 0;
  for (size_t i = d.size() - 8; i < d.size(); ++i) v = (v << 8) | d[i];
  return v;
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

BlockHasher::BlockHasher(std::string_view hash_seed) {
  md_ = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  if (md_ == nullptr) die("EVP_MD_fetch(SHA256)");
  ctx_ = EVP_MD_CTX_new();
  if (ctx_ == nullptr) die("EVP_MD_CTX_new");
  buf_.reserve(64 + 5 * 1024);
  std::vector<uint8_t> seed;
  cbor_append_head(seed, 3, hash_seed.size());
  seed.insert(seed.end(), hash_seed.begin(), hash_seed.end());
  none_hash_ = sha256(seed);
}

BlockHasher::~BlockHasher() {
  EVP_MD_CTX_free(ctx_);
  EVP_MD_free(md_);
}

Digest BlockHasher::sha256(std::span<const uint8_t> bytes) {
  Digest out{};
  unsigned int len = 0;
  if (EVP_DigestInit_ex2(ctx_, md_, nullptr) != 1 ||
      EVP_DigestUpdate(ctx_, bytes.data(), bytes.size()) != 1 ||
      EVP_DigestFinal_ex(ctx_, out.data(), &len) != 1 || len != out.size()) {
    die("SHA-256");
  }
  return out;
}

Digest BlockHasher::hash_block(const Digest& parent, std::span<const uint32_t> tokens) {
  buf_.clear();
  cbor_append_head(buf_, 4, 3);              // 3-array
  cbor_append_head(buf_, 2, parent.size());  // bstr parent digest
  buf_.insert(buf_.end(), parent.begin(), parent.end());
  cbor_append_head(buf_, 4, tokens.size());  // [uint ...]
  for (uint32_t t : tokens) cbor_append_head(buf_, 0, t);
  buf_.push_back(0xf6);                      // extra_keys = null
  return sha256(buf_);
}

}  // namespace ramjet::sim
