#include "stats.h"

#include <gtest/gtest.h>

namespace ramjet::bench {
namespace {

TEST(Percentile, InterpolatesLinearlyBetweenClosestRanksLikeNumpy) {
  std::vector<double> v{1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(percentile(v, 95), 3.85);  // numpy.percentile([1,2,3,4], 95)
  std::vector<double> hundred;
  for (int i = 100; i >= 1; --i) hundred.push_back(i);  // unsorted input
  EXPECT_DOUBLE_EQ(percentile(hundred, 99), 99.01);
  EXPECT_DOUBLE_EQ(percentile(hundred, 50), 50.5);
}

TEST(Percentile, SingleValueIsEveryPercentileAndEmptyIsNaN) {
  EXPECT_DOUBLE_EQ(percentile({7}, 1), 7);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  EXPECT_TRUE(std::isnan(percentile({}, 50)));
}

Sample ok(double start, double end, double ttft, uint32_t tokens, int64_t prompt, int64_t cached,
          std::string engine) {
  Sample s;
  s.start_s = start;
  s.end_s = end;
  s.latency_s = end - start;
  s.ttft_s = ttft;
  s.tpot_s = 0.01;
  s.output_tokens = tokens;
  s.prompt_tokens = prompt;
  s.cached_tokens = cached;
  s.engine = std::move(engine);
  return s;
}

TEST(Aggregate, ComputesRatesPercentilesCachedShareAndEngineSplit) {
  std::vector<Sample> v{ok(0, 1, 0.1, 10, 100, 50, "0"), ok(0.5, 2, 0.3, 20, 100, 100, "1"),
                        ok(1, 2, 0.2, 30, 200, 0, "1")};
  Sample err;
  err.start_s = 1;
  err.end_s = 1.5;
  err.error = "http_503";
  v.push_back(err);
  StepReport r = aggregate(v, 8);
  EXPECT_EQ(r.x, 8);
  EXPECT_EQ(r.ok, 3u);
  EXPECT_EQ(r.errors, 1u);
  EXPECT_EQ(r.error_reasons.at("http_503"), 1u);
  EXPECT_DOUBLE_EQ(r.elapsed_s, 2);
  EXPECT_EQ(r.output_tokens, 60u);
  EXPECT_DOUBLE_EQ(r.output_tok_s, 30);
  EXPECT_DOUBLE_EQ(r.req_s, 1.5);
  EXPECT_DOUBLE_EQ(r.ttft_p50_ms, 200);
  EXPECT_DOUBLE_EQ(r.cached_pct, 100.0 * 150 / 400);
  EXPECT_EQ(r.engines.at("0"), 1u);
  EXPECT_EQ(r.engines.at("1"), 2u);
  EXPECT_DOUBLE_EQ(r.tpot_p50_ms, 10);
}

TEST(Timeline, BucketsByCompletionTimeWithEmptyWindowsListed) {
  std::vector<Sample> v{ok(0, 0.5, 0.1, 10, 100, 80, "0"), ok(0.2, 1.9, 0.3, 10, 100, 20, "1"),
                        ok(3, 4.5, 0.2, 10, 200, 0, "1")};
  Sample err;
  err.start_s = 1;
  err.end_s = 1.2;
  err.error = "connect";
  v.push_back(err);
  const std::vector<Window> t = timeline(v, 2);
  ASSERT_EQ(t.size(), 3u);  // [0,2) [2,4) [4,6)
  EXPECT_EQ(t[0].t_s, 0);
  EXPECT_EQ(t[0].ok, 2u);
  EXPECT_EQ(t[0].errors, 1u);
  EXPECT_DOUBLE_EQ(t[0].cached_pct, 50);
  EXPECT_DOUBLE_EQ(t[0].ttft_p50_ms, 200);
  EXPECT_EQ(t[1].t_s, 2);
  EXPECT_EQ(t[1].ok + t[1].errors, 0u);  // nothing ended then: listed, empty
  EXPECT_TRUE(std::isnan(t[1].cached_pct));
  EXPECT_EQ(t[2].ok, 1u);
  EXPECT_DOUBLE_EQ(t[2].cached_pct, 0);
  EXPECT_TRUE(timeline(v, 0).empty());
  EXPECT_TRUE(timeline({}, 1).empty());
}

TEST(Aggregate, WarmupWindowExcludesEarlierStartsAndShiftsElapsed) {
  std::vector<Sample> v{ok(0, 1, 0.1, 10, -1, -1, ""), ok(2, 4, 0.1, 10, -1, -1, "")};
  StepReport r = aggregate(v, 1, 1.0);
  EXPECT_EQ(r.ok, 1u);
  EXPECT_DOUBLE_EQ(r.elapsed_s, 3);
  EXPECT_TRUE(std::isnan(r.cached_pct));  // no usage reported
  EXPECT_EQ(r.engines.at("direct"), 1u);
}

TEST(Aggregate, EmptyStepHasZeroRatesAndNaNPercentiles) {
  StepReport r = aggregate({}, 4);
  EXPECT_EQ(r.ok, 0u);
  EXPECT_EQ(r.output_tok_s, 0);
  EXPECT_TRUE(std::isnan(r.ttft_p95_ms));
}

}  // namespace
}  // namespace ramjet::bench

namespace ramjet::bench {
namespace {

TEST(Goodput, CountsAnsweredRequestsWhoseFirstTokenCameInTime) {
  std::vector<Sample> s(5);
  for (size_t i = 0; i < s.size(); ++i) {
    s[i].start_s = 0;
    s[i].end_s = 2;
    s[i].ttft_s = 0.1 * static_cast<double>(i + 1);  // 100 .. 500 ms
  }
  s[4].error = "http_429";  // refused: a miss, whatever its timing
  const StepReport r = aggregate(s, 4, 0, 350);
  EXPECT_EQ(r.good, 3u);
  EXPECT_DOUBLE_EQ(r.goodput_req_s, 1.5);
  EXPECT_DOUBLE_EQ(r.attainment_pct, 60.0);
  EXPECT_TRUE(std::isnan(aggregate(s, 4).goodput_req_s));  // no target
}

}  // namespace
}  // namespace ramjet::bench
