#include "companion/mac.h"

#include <cstdio>
#include <cstdlib>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

namespace ramjet::companion {

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "companion/mac: %s failed\n", what);
  std::abort();
}

EVP_MAC* hmac() {
  static EVP_MAC* m = [] {
    EVP_MAC* x = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    if (x == nullptr) die("EVP_MAC_fetch(HMAC)");
    return x;
  }();
  return m;
}

}  // namespace

HmacSha256::HmacSha256(std::span<const uint8_t> key) {
  ctx_ = EVP_MAC_CTX_new(hmac());
  if (ctx_ == nullptr) die("EVP_MAC_CTX_new");
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  if (EVP_MAC_init(ctx_, key.data(), key.size(), params) != 1) die("EVP_MAC_init");
}

HmacSha256::~HmacSha256() { EVP_MAC_CTX_free(ctx_); }

void HmacSha256::begin() {
  if (EVP_MAC_init(ctx_, nullptr, 0, nullptr) != 1) die("EVP_MAC_init");  // the same key again
}

void HmacSha256::update(std::span<const uint8_t> bytes) {
  if (EVP_MAC_update(ctx_, bytes.data(), bytes.size()) != 1) die("EVP_MAC_update");
}

MacTag HmacSha256::finish() {
  MacTag t{};
  size_t len = 0;
  if (EVP_MAC_final(ctx_, t.data(), &len, t.size()) != 1 || len != t.size()) die("EVP_MAC_final");
  return t;
}

bool tags_equal(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace ramjet::companion
