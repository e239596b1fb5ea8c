// render::RenderPrefixCache: entries are found by the whole 128-bit key, the LRU entry goes
// first when a limit is passed, and an entry larger than the byte limit is not stored.
#include "render/template/render_prefix_cache.h"

#include <memory>
#include <string>

#include <gtest/gtest.h>

namespace ramjet::render {
namespace {

TEST(RenderPrefixCache, StaysWithinItsEntryAndByteLimits) {
  RenderPrefixCache cache(RenderPrefixLimits{.max_entries = 2, .max_bytes = 1u << 20});
  auto text = std::make_shared<const std::string>(1000, 'x');
  for (uint64_t i = 0; i < 5; ++i) cache.store(PrefixKey{i, i}, text, 10);
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_EQ(cache.stats().evictions, 3u);
  EXPECT_FALSE(cache.find(PrefixKey{0, 0}));
  EXPECT_TRUE(cache.find(PrefixKey{4, 4}));
  EXPECT_FALSE(cache.find(PrefixKey{4, 5})) << "the high half of the key is checked";
  RenderPrefixCache tiny(RenderPrefixLimits{.max_entries = 8, .max_bytes = 100});
  tiny.store(PrefixKey{1, 1}, text, 10);
  EXPECT_EQ(tiny.stats().not_stored, 1u);
  EXPECT_EQ(tiny.stats().entries, 0u);
}

TEST(RenderPrefixCache, AFindMakesAnEntryTheMostRecent) {
  RenderPrefixCache cache(RenderPrefixLimits{.max_entries = 2, .max_bytes = 1u << 20});
  auto text = std::make_shared<const std::string>("abc");
  cache.store(PrefixKey{1, 1}, text, 2);
  cache.store(PrefixKey{2, 2}, text, 3);
  auto hit = cache.find(PrefixKey{1, 1});
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->bytes, 2u);
  cache.store(PrefixKey{3, 3}, text, 1);
  EXPECT_TRUE(cache.find(PrefixKey{1, 1}));
  EXPECT_FALSE(cache.find(PrefixKey{2, 2}));
  cache.clear();
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().bytes, 0u);
}

}  // namespace
}  // namespace ramjet::render
