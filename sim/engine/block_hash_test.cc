#include "sim/engine/block_hash.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ramjet::sim {
namespace {

std::string hex(const Digest& d) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
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

const std::vector<uint32_t> kTokens1 = {0, 1, 23, 24, 255, 256, 65535, 65536, 151000, 4294967295u,
                                        7, 8, 9, 10, 11, 12};

TEST(BlockHasher, NoneHashIsSha256OfTheCborSeedStringLikePythonHashSeed) {
  EXPECT_EQ(hex(BlockHasher("0").none_hash()), kNoneHashSeed0);
  EXPECT_EQ(hex(BlockHasher("42").none_hash()), kNoneHashSeed42);
}

TEST(BlockHasher, ChainedBlockHashesEqualPythonCbor2Sha256) {
  BlockHasher h("0");
  const Digest b1 = h.hash_block(h.none_hash(), kTokens1);
  EXPECT_EQ(hex(b1), kBlock1);
  std::vector<uint32_t> t2;
  for (uint32_t t = 1000; t < 1016; ++t) t2.push_back(t);
  EXPECT_EQ(hex(h.hash_block(b1, t2)), kBlock2);
}

TEST(BlockHasher, ExternalHashIsTheLowSixtyFourBitsBigEndian) {
  BlockHasher h("0");
  EXPECT_EQ(external_u64(h.hash_block(h.none_hash(), kTokens1)), kBlock1External);
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

}  // namespace
}  // namespace ramjet::sim
