// cache/index/sha256_lanes: the state is kept as SHA-NI wants it (ABEF, CDGH); each 4-round step
// adds 4 round constants to 4 schedule words and runs sha256rnds2 twice; the schedule is extended
// with sha256msg1/msg2 (Intel, "New Instructions Supporting the Secure Hash Algorithm on Intel
// Architecture Processors", 2013). The lanes loop is written once over an array of lanes and
// unrolled by the compiler.
#include "cache/index/sha256_lanes.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace ramjet::cache::sha256_lanes {

#if defined(__x86_64__)

namespace {

alignas(16) constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

template <int L>
__attribute__((target("sha,sse4.1"))) void compress_lanes(uint32_t* const state[L], const uint8_t* const data[L],
                                                          size_t blocks) {
  const __m128i kSwap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
  __m128i abef[L], cdgh[L];
  for (int l = 0; l < L; ++l) {
    __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[l][0]));
    __m128i s1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[l][4]));
    tmp = _mm_shuffle_epi32(tmp, 0xB1);             // CDAB
    s1 = _mm_shuffle_epi32(s1, 0x1B);               // EFGH
    abef[l] = _mm_alignr_epi8(tmp, s1, 8);          // ABEF
    cdgh[l] = _mm_blend_epi16(s1, tmp, 0xF0);       // CDGH
  }
  for (size_t b = 0; b < blocks; ++b) {
    __m128i save0[L], save1[L], w[L][4];
    for (int l = 0; l < L; ++l) {
      save0[l] = abef[l];
      save1[l] = cdgh[l];
      const uint8_t* p = data[l] + b * 64;
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        w[l][i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)), kSwap);
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      const __m128i k = _mm_load_si128(reinterpret_cast<const __m128i*>(&kK[4 * i]));
#pragma GCC unroll 2
      for (int l = 0; l < L; ++l) {
        if (i >= 4) {  // w[t] = s1(w[t-2]) + w[t-7] + s0(w[t-15]) + w[t-16], four at a time
          __m128i t = _mm_sha256msg1_epu32(w[l][i & 3], w[l][(i + 1) & 3]);
          t = _mm_add_epi32(t, _mm_alignr_epi8(w[l][(i + 3) & 3], w[l][(i + 2) & 3], 4));
          w[l][i & 3] = _mm_sha256msg2_epu32(t, w[l][(i + 3) & 3]);
        }
        __m128i m = _mm_add_epi32(w[l][i & 3], k);
        cdgh[l] = _mm_sha256rnds2_epu32(cdgh[l], abef[l], m);
        m = _mm_shuffle_epi32(m, 0x0E);
        abef[l] = _mm_sha256rnds2_epu32(abef[l], cdgh[l], m);
      }
    }
    for (int l = 0; l < L; ++l) {
      abef[l] = _mm_add_epi32(abef[l], save0[l]);
      cdgh[l] = _mm_add_epi32(cdgh[l], save1[l]);
    }
  }
  for (int l = 0; l < L; ++l) {
    const __m128i feba = _mm_shuffle_epi32(abef[l], 0x1B);
    const __m128i dchg = _mm_shuffle_epi32(cdgh[l], 0xB1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[l][0]), _mm_blend_epi16(feba, dchg, 0xF0));  // DCBA
    _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[l][4]), _mm_alignr_epi8(dchg, feba, 8));     // HGFE
  }
}

bool detect() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_SSE4_1) == 0 || (c & bit_SSSE3) == 0) return false;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  return (b & (1u << 29)) != 0;  // SHA
}

}  // namespace

bool available() {
  static const bool yes = detect();
  return yes;
}

void compress(uint32_t state[8], const uint8_t* data, size_t blocks) {
  uint32_t* const s[1] = {state};
  const uint8_t* const d[1] = {data};
  compress_lanes<1>(s, d, blocks);
}

void compress2(uint32_t state_a[8], const uint8_t* data_a, uint32_t state_b[8], const uint8_t* data_b, size_t blocks) {
  uint32_t* const s[2] = {state_a, state_b};
  const uint8_t* const d[2] = {data_a, data_b};
  compress_lanes<2>(s, d, blocks);
}

#else

bool available() { return false; }
void compress(uint32_t*, const uint8_t*, size_t) {}
void compress2(uint32_t*, const uint8_t*, uint32_t*, const uint8_t*, size_t) {}

#endif

}  // namespace ramjet::cache::sha256_lanes
