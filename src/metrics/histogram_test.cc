#include "metrics/histogram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace ramjet::metrics {
namespace {

std::string render(const Histogram& h) {
  Exposition x;
  h.write(x, "h", "a=\"1\"");
  return x.take();
}

TEST(Histogram, AValueOnABoundCountsInThatBucketAndBucketsAreCumulative) {
  Histogram h({1, 2, 4});
  for (double v : {0.5, 1.0, 1.5, 2.0, 3.0, 5.0}) h.observe(v);
  EXPECT_EQ(render(h),
            "h_bucket{a=\"1\",le=\"1\"} 2\n"
            "h_bucket{a=\"1\",le=\"2\"} 4\n"
            "h_bucket{a=\"1\",le=\"4\"} 5\n"
            "h_bucket{a=\"1\",le=\"+Inf\"} 6\n"
            "h_sum{a=\"1\"} 13\n"
            "h_count{a=\"1\"} 6\n");
  EXPECT_EQ(h.count(), 6u);
  EXPECT_EQ(h.sum(), 13);
}

TEST(Histogram, NanAndNegativeValuesCountAsZeroAndInfinityLandsInTheInfBucket) {
  Histogram h({0, 10});
  h.observe(std::numeric_limits<double>::quiet_NaN());
  h.observe(-3);
  h.observe(std::numeric_limits<double>::infinity());
  h.observe(1e300);
  std::vector<uint64_t> per;
  uint64_t total = 0;
  h.read(per, total);
  EXPECT_EQ(per, (std::vector<uint64_t>{2, 0}));
  EXPECT_EQ(total, 4u);
  EXPECT_EQ(h.count(), 4u);
  EXPECT_TRUE(std::isfinite(h.sum()));
}

TEST(Histogram, ReadGivesPerBucketCountsAndATotalWithTheOverflow) {
  Histogram h(exponential_buckets(1, 2, 4));  // 1 2 4 8
  EXPECT_EQ(h.bounds(), (std::vector<double>{1, 2, 4, 8}));
  for (double v : {1.0, 3.0, 3.0, 100.0}) h.observe(v);
  std::vector<uint64_t> per;
  uint64_t total = 0;
  h.read(per, total);
  EXPECT_EQ(per, (std::vector<uint64_t>{1, 0, 2, 0}));
  EXPECT_EQ(total, 4u);
}

}  // namespace
}  // namespace ramjet::metrics
