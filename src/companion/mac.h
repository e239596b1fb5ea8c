// companion/mac: HMAC-SHA256 under one key (OpenSSL EVP_MAC), reused across messages, and the
// protocol's key derivation. The key is held by OpenSSL only; nothing here prints it.
#pragma once

#include <array>
#include <cstdint>
#include <span>

typedef struct evp_mac_ctx_st EVP_MAC_CTX;

namespace ramjet::companion {

using MacTag = std::array<uint8_t, 32>;

class HmacSha256 {
 public:
  explicit HmacSha256(std::span<const uint8_t> key);
  ~HmacSha256();
  HmacSha256(const HmacSha256&) = delete;
  HmacSha256& operator=(const HmacSha256&) = delete;

  // One message: begin(), update()*, finish(). begin() may start another after finish().
  void begin();
  void update(std::span<const uint8_t> bytes);
  MacTag finish();
  MacTag mac(std::span<const uint8_t> bytes) {
    begin();
    update(bytes);
    return finish();
  }

 private:
  EVP_MAC_CTX* ctx_ = nullptr;
};

// Constant-time equality of two tags (CRYPTO_memcmp).
bool tags_equal(std::span<const uint8_t> a, std::span<const uint8_t> b);

}  // namespace ramjet::companion
