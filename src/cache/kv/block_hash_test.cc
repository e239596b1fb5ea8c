// cache/kv block hash tests: both CBOR algorithms against values computed with vLLM's scheme in
// Python, the published 64-bit form, canonical CBOR heads.
#include "cache/kv/block_hash.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ramjet::cache::kv {
namespace {

std::string hex(const BlockHash& d) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d.bytes()) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

// Expected values computed with vLLM's scheme in Python (Debian python3-cbor2):
// /usr/bin/python3 -c "import cbor2,hashlib; H=lambda o: hashlib.sha256(cbor2.dumps(o,
//   canonical=True)).digest(); n=H('0'); t1=(0,1,23,24,255,256,65535,65536,151000,4294967295,
//   7,8,9,10,11,12); h1=H((n,t1,None)); h2=H((h1,tuple(range(1000,1016)),None));
//   print(n.hex(), h1.hex(), h2.hex(), int.from_bytes(h1,'big') & (2**64-1), H('42').hex())"
constexpr const char* kNoneHashSeed0 =
    "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e";
constexpr const char* kBlock1 = "653d5a6d6623c4c3272ebc636bafd1116d0c4c202013960a4f2ef4217e3c6e59";
constexpr const char* kBlock2 = "3c57b7395e80b5a010fb78e79d724ce861db60acfbae48c6db12c9c3135b878e";
constexpr uint64_t kBlock1External = 5705766202613984857ULL;
constexpr const char* kNoneHashSeed42 =
    "9fa6eb003f14425eb9c8e6baacfbcaab26257357b829c7bfa74ffcc4f31c1780";

// The same with xxhash_cbor (Debian python3-xxhash, the function vLLM calls):
// H=lambda o: xxhash.xxh3_128_digest(cbor2.dumps(o, canonical=True)), the rest as above.
constexpr const char* kXxNoneHashSeed0 = "1ebe36576dcb573f26b99533a20aaeca";
constexpr const char* kXxBlock1 = "207fd058d1a0dc9c3397c96f37c3441f";
constexpr const char* kXxBlock2 = "d60dad4014441fc65d20069436eb6bdc";
constexpr uint64_t kXxBlock1External = 3717661496931730463ULL;
constexpr const char* kXxNoneHashSeed42 = "a9d2e63407fce1a26c9dc9d7fa2d7caf";

const std::vector<uint32_t> kTokens1 = {0,      1,           23, 24, 255, 256, 65535, 65536,
                                        151000, 4294967295u, 7,  8,  9,   10,  11,    12};

std::vector<uint32_t> tokens2() {
  std::vector<uint32_t> t2;
  for (uint32_t t = 1000; t < 1016; ++t) t2.push_back(t);
  return t2;
}

TEST(BlockHasher, NoneHashIsSha256OfTheCborSeedStringLikePythonHashSeed) {
  EXPECT_EQ(hex(BlockHasher(HashAlgo::kSha256Cbor, "0").none_hash()), kNoneHashSeed0);
  EXPECT_EQ(hex(BlockHasher(HashAlgo::kSha256Cbor, "42").none_hash()), kNoneHashSeed42);
}

TEST(BlockHasher, ChainedBlockHashesEqualPythonCbor2Sha256) {
  BlockHasher h(HashAlgo::kSha256Cbor, "0");
  const BlockHash b1 = h.hash_block(h.none_hash(), kTokens1);
  EXPECT_EQ(hex(b1), kBlock1);
  EXPECT_EQ(hex(h.hash_block(b1, tokens2())), kBlock2);
  EXPECT_TRUE(b1.is_bytes());
  EXPECT_EQ(b1.bytes().size(), 32u);
}

TEST(BlockHasher, ExternalHashIsTheLowSixtyFourBitsBigEndian) {
  BlockHasher h(HashAlgo::kSha256Cbor, "0");
  EXPECT_EQ(h.hash_block(h.none_hash(), kTokens1).low64(), kBlock1External);
}

TEST(BlockHasher, XxhashCborNoneHashAndChainEqualPythonXxh3128) {
  BlockHasher h(HashAlgo::kXxhashCbor, "0");
  EXPECT_EQ(hex(h.none_hash()), kXxNoneHashSeed0);
  EXPECT_EQ(hex(BlockHasher(HashAlgo::kXxhashCbor, "42").none_hash()), kXxNoneHashSeed42);
  const BlockHash b1 = h.hash_block(h.none_hash(), kTokens1);
  EXPECT_EQ(hex(b1), kXxBlock1);
  EXPECT_EQ(b1.bytes().size(), 16u);
  EXPECT_EQ(b1.low64(), kXxBlock1External);
  EXPECT_EQ(hex(h.hash_block(b1, tokens2())), kXxBlock2);
}

TEST(BlockHasher, AlgorithmNamesAreVllms) {
  EXPECT_EQ(name(HashAlgo::kSha256Cbor), "sha256_cbor");
  EXPECT_EQ(name(HashAlgo::kXxhashCbor), "xxhash_cbor");
  EXPECT_EQ(hash_algo_from_name("xxhash_cbor"), HashAlgo::kXxhashCbor);
  EXPECT_EQ(hash_algo_from_name("sha256_cbor"), HashAlgo::kSha256Cbor);
  EXPECT_FALSE(hash_algo_from_name("sha256").has_value());  // pickle-based: not reproducible
  EXPECT_EQ(digest_size(HashAlgo::kXxhashCbor), 16u);
}

TEST(BlockHasher, CborHeadsUseTheShortestEncoding) {
  auto enc = [](uint64_t v) {
    std::vector<uint8_t> out;
    cbor_append_head(out, 0, v);
    return out;
  };
  EXPECT_EQ(enc(23), (std::vector<uint8_t>{0x17}));
  EXPECT_EQ(enc(24), (std::vector<uint8_t>{0x18, 24}));
  EXPECT_EQ(enc(256), (std::vector<uint8_t>{0x19, 1, 0}));
  EXPECT_EQ(enc(65536), (std::vector<uint8_t>{0x1a, 0, 1, 0, 0}));
  EXPECT_EQ(enc(1ULL << 32), (std::vector<uint8_t>{0x1b, 0, 0, 0, 1, 0, 0, 0, 0}));
  std::vector<uint8_t> arr;
  cbor_append_head(arr, 4, 3);
  EXPECT_EQ(arr, (std::vector<uint8_t>{0x83}));
}

TEST(BlockHash, FormsCompareAndExposeTheirSixtyFourBits) {
  const BlockHash u = BlockHash::from_uint(0xdab89baa7b5857c0ull);
  EXPECT_EQ(u.form(), BlockHash::Form::kUint);
  EXPECT_EQ(u.low64(), 0xdab89baa7b5857c0ull);
  const BlockHash n = BlockHash::from_int(-5);
  EXPECT_EQ(n.form(), BlockHash::Form::kNegativeInt);
  EXPECT_EQ(n.as_int64(), -5);
  EXPECT_EQ(BlockHash::from_int(5), BlockHash::from_uint(5));
  const std::vector<uint8_t> eight = {0xda, 0xb8, 0x9b, 0xaa, 0x7b, 0x58, 0x57, 0xc0};
  const BlockHash b = BlockHash::from_bytes(eight);
  EXPECT_EQ(b.low64(), u.low64());
  EXPECT_NE(b, u);  // bytes and int are different hashes on the wire
  const std::vector<uint8_t> two = {0x01, 0x02};
  EXPECT_EQ(BlockHash::from_bytes(two).low64(), 0x0102u);
}

}  // namespace
}  // namespace ramjet::cache::kv
