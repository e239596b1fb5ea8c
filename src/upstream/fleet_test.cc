#include "upstream/fleet.h"
#include "upstream/fleet_testing.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace ramjet::upstream {
namespace {

using test_support::urls;

// The reference behaviour: one passing probe or one non-5xx response readmits.
constexpr Readiness kGateOff{1, 0};
// The product gate with a short window: three passes, then 1 s of stability.
constexpr Readiness kGate{3, 1000};

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

TEST(Fleet, AForgivenProbeFailureStillTellsTheDataPlane) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000);
  std::vector<size_t> unresponsive, fenced;
  f.set_unresponsive_listener([&](size_t i) { unresponsive.push_back(i); });
  f.set_fence_listener([&](size_t i) { fenced.push_back(i); });
  f.on_response(1, 200);
  f.on_probe_success(1);
  EXPECT_TRUE(unresponsive.empty());
  f.on_probe_failure(1, ProbeFailure::kTimeout);  // forgiven (served moments ago), but said
  f.on_probe_failure(1, ProbeFailure::kConnect);
  EXPECT_TRUE(f.at(1).healthy());
  EXPECT_EQ(unresponsive, (std::vector<size_t>{1, 1}));
  EXPECT_TRUE(fenced.empty());
  clock.advance_ms(30001);  // the grace is over: a fence, not an unresponsive notice
  f.on_probe_failure(1, ProbeFailure::kTimeout);
  EXPECT_FALSE(f.at(1).healthy());
  EXPECT_EQ(unresponsive.size(), 2u);
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
  Fleet f(urls(1), clock, 30000, kGateOff);
  f.fence(0, FenceReason::kConnect);
  f.on_response(0, 503);
  EXPECT_FALSE(f.at(0).healthy());
  f.on_probe_failure(0, ProbeFailure::kTimeout);  // no recent success: stays fenced
  EXPECT_FALSE(f.at(0).healthy());
  f.on_response(0, 404);
  EXPECT_TRUE(f.at(0).healthy());
}

TEST(Fleet, OnePassingProbeReadmitsWhenTheGateIsOff) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000, kGateOff);
  f.fence(1, FenceReason::kConnect);
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

TEST(Fleet, HealthJsonCarriesEachReplicasExtraFlagsAndLabels) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000);
  f.add_replica_flag({"kv_trusted", [](size_t i) { return i == 1; }});
  f.add_replica_label({"inventory", [](size_t i) -> std::string_view { return i == 0 ? "companion" : "events"; }});
  auto h = boost::json::parse(f.health_json()).as_object();
  const auto& r = h.at("replicas").as_array();
  EXPECT_FALSE(r[0].at("kv_trusted").as_bool());
  EXPECT_EQ(r[0].at("inventory").as_string(), "companion");
  EXPECT_TRUE(r[1].at("kv_trusted").as_bool());
  EXPECT_EQ(r[1].at("inventory").as_string(), "events");
}

TEST(Fleet, DefaultReadinessIsThreePassesAndThirtySeconds) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000);
  EXPECT_EQ(f.readiness().successes, 3u);
  EXPECT_EQ(f.readiness().stable_ms, 30000);
}

TEST(Fleet, AnEngineKnownAtStartupIsHealthyWithoutPassingTheGate) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000, kGate);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(f.at(i).state(), EngineState::kHealthy);
    EXPECT_TRUE(f.at(i).healthy());
  }
  EXPECT_EQ(f.healthy_count(), 2u);
}

TEST(Fleet, AFencedEngineNeedsNConsecutivePassesAndIsThenWarmingNotEligible) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000, kGate);
  f.fence(1, FenceReason::kConnect);
  EXPECT_EQ(f.at(1).state(), EngineState::kUnhealthy);
  f.on_probe_success(1);
  f.on_probe_success(1);
  EXPECT_EQ(f.at(1).state(), EngineState::kUnhealthy) << "two passes are not three";
  f.on_probe_success(1);
  EXPECT_EQ(f.at(1).state(), EngineState::kWarming);
  EXPECT_FALSE(f.at(1).healthy()) << "a warming engine is not serving-eligible";
  EXPECT_EQ(f.healthy_count(), 1u);
}

TEST(Fleet, AFailingProbeBetweenPassesRestartsTheCount) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000, kGate);
  f.fence(0, FenceReason::kConnect);
  f.on_probe_success(0);
  f.on_probe_success(0);
  f.on_probe_failure(0, ProbeFailure::kHttp);
  f.on_probe_success(0);
  f.on_probe_success(0);
  EXPECT_EQ(f.at(0).state(), EngineState::kUnhealthy) << "the count is consecutive";
  f.on_probe_success(0);
  EXPECT_EQ(f.at(0).state(), EngineState::kWarming);
}

TEST(Fleet, AFailureWhileWarmingResetsToUnhealthyWithCountZero) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000, kGate);
  f.fence(0, FenceReason::kConnect);
  for (int k = 0; k < 3; ++k) f.on_probe_success(0);
  ASSERT_EQ(f.at(0).state(), EngineState::kWarming);
  f.on_probe_failure(0, ProbeFailure::kHttp);
  EXPECT_EQ(f.at(0).state(), EngineState::kUnhealthy);
  clock.advance_ms(5000);
  f.on_probe_success(0);
  f.on_probe_success(0);
  EXPECT_EQ(f.at(0).state(), EngineState::kUnhealthy) << "the count restarted from zero";
  f.on_probe_success(0);
  EXPECT_EQ(f.at(0).state(), EngineState::kWarming);
}

TEST(Fleet, TheRecentSuccessRuleDoesNotProtectAWarmingEngine) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000, kGate);
  f.fence(0, FenceReason::kConnect);
  for (int k = 0; k < 3; ++k) f.on_probe_success(0);
  f.on_response(0, 200);  // e.g. a fail-open dispatch: liveness, but no readmission
  f.on_probe_failure(0, ProbeFailure::kTimeout);
  EXPECT_EQ(f.at(0).state(), EngineState::kUnhealthy);
}

TEST(Fleet, AFenceWhileWarmingResetsToUnhealthy) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000, kGate);
  f.fence(0, FenceReason::kConnect);
  for (int k = 0; k < 3; ++k) f.on_probe_success(0);
  ASSERT_EQ(f.at(0).state(), EngineState::kWarming);
  f.fence(0, FenceReason::kConnect);
  EXPECT_EQ(f.at(0).state(), EngineState::kUnhealthy);
  f.on_probe_success(0);
  EXPECT_EQ(f.at(0).state(), EngineState::kUnhealthy);
}

TEST(Fleet, TheStableWindowIsMeasuredFromTheNthPass) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000, kGate);
  f.fence(0, FenceReason::kConnect);
  f.on_probe_success(0);
  clock.advance_ms(800);
  f.on_probe_success(0);
  clock.advance_ms(800);
  f.on_probe_success(0);  // the third pass: the window starts here, not at the first
  ASSERT_EQ(f.at(0).state(), EngineState::kWarming);
  clock.advance_ms(999);
  f.on_probe_success(0);
  EXPECT_EQ(f.at(0).state(), EngineState::kWarming) << "999 ms after the third pass";
  clock.advance_ms(1);
  f.on_probe_success(0);
  EXPECT_EQ(f.at(0).state(), EngineState::kHealthy);
  EXPECT_TRUE(f.at(0).healthy());
}

TEST(Fleet, TheWindowIsCheckedOnProbesOnly) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000, kGate);
  f.fence(0, FenceReason::kConnect);
  for (int k = 0; k < 3; ++k) f.on_probe_success(0);
  clock.advance_ms(5000);
  EXPECT_EQ(f.at(0).state(), EngineState::kWarming) << "no probe has seen the window pass yet";
  f.on_probe_success(0);
  EXPECT_EQ(f.at(0).state(), EngineState::kHealthy);
}

TEST(Fleet, OneSuccessRequiredMeansWarmingAfterTheFirstPass) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000, Readiness{1, 1000});
  f.fence(0, FenceReason::kConnect);
  f.on_probe_success(0);
  EXPECT_EQ(f.at(0).state(), EngineState::kWarming);
  clock.advance_ms(1000);
  f.on_probe_success(0);
  EXPECT_EQ(f.at(0).state(), EngineState::kHealthy);
}

TEST(Fleet, ZeroSuccessesIsTreatedAsOne) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000, Readiness{0, 0});
  EXPECT_EQ(f.readiness().successes, 1u);
  f.fence(0, FenceReason::kConnect);
  f.on_probe_success(0);
  EXPECT_EQ(f.at(0).state(), EngineState::kHealthy);
}

TEST(Fleet, ZeroStableWindowMakesTheEngineHealthyAsSoonAsTheCountIsReached) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000, Readiness{3, 0});
  f.fence(0, FenceReason::kConnect);
  f.on_probe_success(0);
  f.on_probe_success(0);
  EXPECT_EQ(f.at(0).state(), EngineState::kUnhealthy);
  f.on_probe_success(0);
  EXPECT_EQ(f.at(0).state(), EngineState::kHealthy);
}

TEST(Fleet, WithTheGateOffANonFiveHundredResponseReadmits) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000, kGateOff);
  f.fence(0, FenceReason::kConnect);
  f.on_response(0, 200);
  EXPECT_EQ(f.at(0).state(), EngineState::kHealthy);
}

TEST(Fleet, WithTheGateOnAResponseDoesNotReadmit) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000, kGate);
  f.fence(0, FenceReason::kConnect);
  f.on_response(0, 200);
  EXPECT_EQ(f.at(0).state(), EngineState::kUnhealthy) << "a fail-open dispatch must not bypass the gate";
  for (int k = 0; k < 3; ++k) f.on_probe_success(0);
  f.on_response(0, 200);
  clock.advance_ms(999);
  f.on_response(0, 200);
  EXPECT_EQ(f.at(0).state(), EngineState::kWarming) << "nor cut the stable window short";
}

TEST(Fleet, TheRecentSuccessRuleStillProtectsAHealthyEngineWithTheGateOn) {
  ManualClock clock;
  Fleet f(urls(1), clock, 30000, kGate);
  f.on_response(0, 200);
  clock.advance_ms(29000);
  f.on_probe_failure(0, ProbeFailure::kConnect);
  EXPECT_EQ(f.at(0).state(), EngineState::kHealthy);
  clock.advance_ms(1001);
  f.on_probe_failure(0, ProbeFailure::kConnect);
  EXPECT_EQ(f.at(0).state(), EngineState::kUnhealthy);
}

TEST(Fleet, HealthJsonShowsWarmingStateAndCountsOnlyHealthyAsServing) {
  ManualClock clock;
  Fleet f(urls(3), clock, 30000, kGate);
  f.fence(1, FenceReason::kConnect);
  f.fence(2, FenceReason::kConnect);
  for (int k = 0; k < 3; ++k) f.on_probe_success(1);
  auto h = boost::json::parse(f.health_json()).as_object();
  EXPECT_EQ(h.at("status").as_string(), "degraded");
  EXPECT_EQ(h.at("healthy_replicas").as_int64(), 1);
  EXPECT_EQ(h.at("warming_replicas").as_int64(), 1);
  EXPECT_EQ(h.at("total_replicas").as_int64(), 3);
  const auto& r = h.at("replicas").as_array();
  EXPECT_EQ(r[0].at("state").as_string(), "healthy");
  EXPECT_TRUE(r[0].at("healthy").as_bool());
  EXPECT_EQ(r[1].at("state").as_string(), "warming");
  EXPECT_FALSE(r[1].at("healthy").as_bool());
  EXPECT_EQ(r[2].at("state").as_string(), "unhealthy");
  EXPECT_FALSE(r[2].at("healthy").as_bool());

  f.fence(0, FenceReason::kConnect);
  auto none = boost::json::parse(f.health_json()).as_object();
  EXPECT_EQ(none.at("status").as_string(), "unhealthy") << "a warming engine does not make the fleet serving";
  EXPECT_EQ(none.at("healthy_replicas").as_int64(), 0);
  EXPECT_EQ(f.healthy_count(), 0u);  // /health answers 503
  EXPECT_EQ(f.health_json().find("engine-host"), std::string::npos);
}

// name{labels} -> value, from Prometheus text.
std::map<std::string, std::string> samples(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = line.substr(sp + 1);
  }
  return out;
}

TEST(Fleet, MetricsHaveTheStateGaugeAndTheReadmissionCounter) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000, kGate);
  f.fence(1, FenceReason::kConnect);
  for (int k = 0; k < 3; ++k) f.on_probe_success(1);
  metrics::Exposition x;
  f.write_metrics(x);
  std::string text = x.take();
  EXPECT_NE(text.find("# TYPE ramjet_upstream_state gauge"), std::string::npos);
  EXPECT_NE(text.find("# TYPE ramjet_upstream_readmissions_total counter"), std::string::npos);
  EXPECT_EQ(text.find("engine-host"), std::string::npos);
  auto s = samples(text);
  EXPECT_EQ(s[R"(ramjet_upstream_state{upstream="0",state="healthy"})"], "1");
  EXPECT_EQ(s[R"(ramjet_upstream_state{upstream="0",state="warming"})"], "0");
  EXPECT_EQ(s[R"(ramjet_upstream_state{upstream="0",state="unhealthy"})"], "0");
  EXPECT_EQ(s[R"(ramjet_upstream_state{upstream="1",state="healthy"})"], "0");
  EXPECT_EQ(s[R"(ramjet_upstream_state{upstream="1",state="warming"})"], "1");
  EXPECT_EQ(s[R"(ramjet_upstream_state{upstream="1",state="unhealthy"})"], "0");
  EXPECT_EQ(s[R"(ramjet_upstream_up{upstream="1"})"], "0") << "warming is not up";
  EXPECT_EQ(s[R"(ramjet_upstream_readmissions_total{upstream="1"})"], "0");

  clock.advance_ms(1000);
  f.on_probe_success(1);
  metrics::Exposition y;
  f.write_metrics(y);
  auto t = samples(y.take());
  EXPECT_EQ(t[R"(ramjet_upstream_state{upstream="1",state="healthy"})"], "1");
  EXPECT_EQ(t[R"(ramjet_upstream_state{upstream="1",state="warming"})"], "0");
  EXPECT_EQ(t[R"(ramjet_upstream_up{upstream="1"})"], "1");
  EXPECT_EQ(t[R"(ramjet_upstream_readmissions_total{upstream="1"})"], "1");
  EXPECT_EQ(t[R"(ramjet_upstream_readmissions_total{upstream="0"})"], "0");
}

}  // namespace
}  // namespace ramjet::upstream
