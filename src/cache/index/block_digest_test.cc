#include "cache/index/block_digest.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "cache/index/exact_index.h"

namespace ramjet::cache {
namespace {

std::array<uint8_t, 32> secret_of(uint8_t start) {
  std::array<uint8_t, 32> s{};
  std::iota(s.begin(), s.end(), start);
  return s;
}

std::string hex(std::span<const uint8_t> b) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) s += {kHex[x >> 4], kHex[x & 15]};
  return s;
}

// Frozen vectors from Python's hmac/hashlib (secret = bytes(range(32)), tokens 1000..1015).
TEST(BlockDigest, MatchesTheFrozenPythonVectors) {
  const auto secret = secret_of(0);
  const auto key = DigestKey::from_secret(secret);
  ASSERT_TRUE(key);
  std::vector<uint32_t> tokens(16);
  std::iota(tokens.begin(), tokens.end(), 1000u);
  EXPECT_EQ(hex(key->digest(tokens)), "ada015c9ecd88a946d87365661e941cb29b4ac86dbf41eb8d0caf146d39a6dd1");
  EXPECT_EQ(hex(key->key_id()), "26ed84b239269f3584dc20a4e6cdfec5cdf0cc8af9122c11b2bbf7e8b4614c3b");
}

TEST(BlockDigest, EqualsOpenSslHmacForEveryBlockLength) {
  const auto secret = secret_of(7);
  const auto key = DigestKey::from_secret(secret);
  for (uint32_t n : {0u, 1u, 9u, 16u, 17u, 32u, 64u, 257u}) {
    std::vector<uint32_t> tokens(n);
    std::iota(tokens.begin(), tokens.end(), n * 31u);
    std::string msg("ramjet:block-digest:v1", sizeof("ramjet:block-digest:v1"));
    msg.append(reinterpret_cast<const char*>(&n), 4);
    msg.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
    uint8_t want[32];
    unsigned len = 0;
    HMAC(EVP_sha256(), secret.data(), 32, reinterpret_cast<const uint8_t*>(msg.data()), msg.size(), want, &len);
    const BlockDigest got = key->digest(tokens);
    EXPECT_EQ(hex(got), hex(want)) << n;
  }
}

// digest_words() runs its own SHA-256 lanes when the CPU has SHA extensions (one or two blocks per
// pass, inner messages of one to several SHA-256 blocks): every case equals OpenSSL's digest().
TEST(BlockDigest, WordsOfEveryBlockEqualTheOpenSslDigestForEveryGeometry) {
  const auto key = DigestKey::from_secret(secret_of(11));
  for (uint32_t bs : {1u, 7u, 8u, 9u, 16u, 22u, 23u, 24u, 31u, 32u, 64u, 100u, 300u}) {
    for (size_t blocks : {1u, 2u, 3u, 8u}) {
      std::vector<uint32_t> tokens(bs * blocks + bs / 2);  // and a partial block
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 2654435761u + bs);
      std::vector<uint32_t> words{0xdead};  // appended after what is there
      key->digest_words(tokens, bs, words);
      ASSERT_EQ(words.size(), 1 + blocks * kDigestWords);
      EXPECT_EQ(words[0], 0xdeadu);
      for (size_t b = 0; b < blocks; ++b) {
        const auto want = digest_words(key->digest(std::span(tokens).subspan(b * bs, bs)));
        for (uint32_t j = 0; j < kDigestWords; ++j) {
          ASSERT_EQ(words[1 + b * kDigestWords + j], want[j]) << "block size " << bs << " block " << b;
        }
      }
    }
  }
}

TEST(BlockDigest, RejectsASecretThatIsNotThirtyTwoBytes) {
  std::array<uint8_t, 33> long_secret{};
  EXPECT_FALSE(DigestKey::from_secret(std::span(long_secret).first(31)));
  EXPECT_FALSE(DigestKey::from_secret(long_secret));
  EXPECT_TRUE(DigestKey::from_secret(std::span(long_secret).first(32)));
}

TEST(BlockDigest, AnotherSecretGivesOtherDigestsAndAnotherKeyId) {
  const auto a = DigestKey::from_secret(secret_of(0));
  const auto b = DigestKey::from_secret(secret_of(1));
  const std::vector<uint32_t> tokens(16, 5);
  EXPECT_NE(a->digest(tokens), b->digest(tokens));
  EXPECT_NE(a->key_id(), b->key_id());
}

TEST(BlockDigest, ChainIsExactChainOverTheDigestWordsOfFullBlocksOnly) {
  const auto key = DigestKey::from_secret(secret_of(3));
  std::vector<uint32_t> tokens(16 * 5 + 7);
  std::iota(tokens.begin(), tokens.end(), 1u);
  const uint64_t root = exact_root_seed(16, "lora", "salt");
  std::vector<uint64_t> chain;
  digest_chain(*key, tokens, 16, root, chain);
  ASSERT_EQ(chain.size(), 5u);
  uint64_t seed = root;
  for (size_t b = 0; b < 5; ++b) {
    const auto words = digest_words(key->digest(std::span(tokens).subspan(b * 16, 16)));
    seed = exact_next(seed, words);
    EXPECT_EQ(chain[b], seed);
  }
  std::vector<uint32_t> words;
  key->digest_words(tokens, 16, words);
  EXPECT_EQ(words.size(), 5u * kDigestWords);
}

}  // namespace
}  // namespace ramjet::cache
