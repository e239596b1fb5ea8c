#include "companion/mac.h"

#include <gtest/gtest.h>

#include <string>

namespace ramjet::companion {
namespace {

std::span<const uint8_t> bytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

// RFC 4231 test case 2.
TEST(HmacSha256, MatchesRfc4231AndReusesItsKey) {
  HmacSha256 mac(bytes("Jefe"));
  const MacTag want = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24, 0x26, 0x08, 0x95, 0x75, 0xc7,
                       0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27, 0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
  EXPECT_EQ(mac.mac(bytes("what do ya want for nothing?")), want);
  mac.begin();
  mac.update(bytes("what do ya want "));
  mac.update(bytes("for nothing?"));
  EXPECT_EQ(mac.finish(), want);
  EXPECT_TRUE(tags_equal(want, want));
  MacTag other = want;
  other[31] ^= 1;
  EXPECT_FALSE(tags_equal(want, other));
  EXPECT_FALSE(tags_equal(want, std::span(want).first(31)));
}

}  // namespace
}  // namespace ramjet::companion
