#include "upstream/fleet.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace ramjet::upstream {
namespace {

std::vector<config::UpstreamUrl> urls(size_t n) {
  std::vector<config::UpstreamUrl> v(n);
  for (size_t i = 0; i < n; ++i) v[i].host = "engine-host-" + std::to_string(i), v[i].port = 8000;
  return v;
}

TEST(Fleet, AllReplicasStartHealthy) {
  ManualClock clock;
  Fleet f(urls(3), clock, 30000);
  EXPECT_EQ(f.healthy_count(), 3u);
}

TEST(Fleet, ProbeTimeoutDoesNotFenceAnEngineThatServedWithinTheWindow) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000);
  f.on_response(0, 200);
  clock.advance_ms(29000);
  f.on_probe_failure(0, ProbeFailure::kTimeout);
  EXPECT_TRUE(f.at(0).healthy());
  f.on_probe_failure(0, ProbeFailure::kConnect);
  EXPECT_TRUE(f.at(0).healthy());
}

TEST(Fleet, ProbeTimeoutFencesOnceTheRecentSuccessExpires) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000);
  f.on_response(0, 200);
  clock.advance_ms(30001);
  f.on_probe_failure(0, ProbeFailure::kTimeout);
  EXPECT_FALSE(f.at(0).healthy());
}

TEST(Fleet, AnsweredButBadProbeFencesEvenAfterRecentSuccess) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000);
  f.on_response(0, 200);
  f.on_probe_failure(0, ProbeFailure::kHttp);
  EXPECT_FALSE(f.at(0).healthy());
}

TEST(Fleet, FiveHundredsNeverCountAsLiveness) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000);
  f.fence(0, FenceReason::kConnect);
  f.on_response(0, 503);
  EXPECT_FALSE(f.at(0).healthy());
  f.on_probe_failure(0, ProbeFailure::kTimeout);  // no recent success: stays fenced
  EXPECT_FALSE(f.at(0).healthy());
  f.on_response(0, 404);
  EXPECT_TRUE(f.at(0).healthy());
}

TEST(Fleet, OnePassingProbeReadmits) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000);
  f.fence(1, FenceReason::kRetryableStatus);
  EXPECT_EQ(f.healthy_count(), 1u);
  f.on_probe_success(1);
  EXPECT_EQ(f.healthy_count(), 2u);
}

TEST(Fleet, HealthJsonReportsStatusAndOrdinalsWithoutHostnames) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000);
  auto ok = boost::json::parse(f.health_json()).as_object();
  EXPECT_EQ(ok.at("status").as_string(), "ok");
  f.fence(0, FenceReason::kConnect);
  auto degraded = boost::json::parse(f.health_json()).as_object();
  EXPECT_EQ(degraded.at("status").as_string(), "degraded");
  EXPECT_EQ(degraded.at("healthy_replicas").as_int64(), 1);
  EXPECT_EQ(degraded.at("replicas").as_array()[0].at("index").as_int64(), 0);
  EXPECT_FALSE(degraded.at("replicas").as_array()[0].at("healthy").as_bool());
  f.fence(1, FenceReason::kConnect);
  auto bad = f.health_json();
  EXPECT_NE(bad.find("\"unhealthy\""), std::string::npos);
  EXPECT_EQ(bad.find("engine-host"), std::string::npos);
}

}  // namespace
}  // namespace ramjet::upstream
