// Outlier detection in Fleet (outlier.h): consecutive failures eject, the backoff doubles and
// resets, the readiness gate applies on return, the ejection share is capped, and routing's
// failing flag. Probing and the gate itself are in fleet_test.cc.
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "upstream/fleet.h"
#include "upstream/fleet_testing.h"
#include "upstream/outlier.h"

namespace ramjet::upstream {
namespace {

using test_support::urls;

constexpr Readiness kGateOff{1, 0};
constexpr Readiness kGate{3, 1000};
// Three failures in a row eject for 1 s, 2 s, 4 s, ... up to 5 s; half the fleet at most.
constexpr OutlierConfig kOutlier{3, 1000, 5000, 50, 10000};

void fail(Fleet& f, size_t i, int n, Failure why = Failure::kStatus5xx) {
  for (int k = 0; k < n; ++k) f.on_failure(i, why);
}

boost::json::object health(const Fleet& f) { return boost::json::parse(f.health_json()).as_object(); }

TEST(OutlierConfig, EjectionTimeDoublesPerLevelUpToTheMax) {
  EXPECT_EQ(kOutlier.ejection_ms(0), 1000);
  EXPECT_EQ(kOutlier.ejection_ms(1), 2000);
  EXPECT_EQ(kOutlier.ejection_ms(2), 4000);
  EXPECT_EQ(kOutlier.ejection_ms(3), 5000);
  EXPECT_EQ(kOutlier.ejection_ms(62), 5000);
  EXPECT_EQ(kOutlier.ejection_ms(1000), 5000);
  EXPECT_EQ((OutlierConfig{3, 1000, 10, 50, 0}).ejection_ms(0), 1000) << "max below base means base";
}

TEST(OutlierConfig, AtMostTheShareRoundedDownButOneUnlessZero) {
  EXPECT_EQ(kOutlier.max_ejected(1), 1u);
  EXPECT_EQ(kOutlier.max_ejected(2), 1u);
  EXPECT_EQ(kOutlier.max_ejected(3), 1u);
  EXPECT_EQ(kOutlier.max_ejected(4), 2u);
  EXPECT_EQ(kOutlier.max_ejected(9), 4u);
  EXPECT_EQ((OutlierConfig{3, 1000, 5000, 0, 0}).max_ejected(8), 0u);
  EXPECT_EQ((OutlierConfig{3, 1000, 5000, 100, 0}).max_ejected(8), 8u);
  EXPECT_EQ((OutlierConfig{3, 1000, 5000, 250, 0}).max_ejected(8), 8u);
}

TEST(Outlier, ConsecutiveFailuresEjectAHealthyEngine) {
  ManualClock clock;
  Fleet f(urls(3), clock, 30000, kGateOff, kOutlier);
  fail(f, 0, 2);
  EXPECT_TRUE(f.at(0).healthy()) << "two of three is not yet an outlier";
  EXPECT_EQ(f.at(0).consecutive_failures(), 2u);
  f.on_failure(0, Failure::kDropped);
  EXPECT_EQ(f.at(0).state(), EngineState::kEjected);
  EXPECT_FALSE(f.at(0).healthy());
  EXPECT_EQ(f.ejected_count(), 1u);
  EXPECT_EQ(f.healthy_count(), 2u);
}

TEST(Outlier, ASuccessBetweenFailuresResetsTheCount) {
  ManualClock clock;
  Fleet f(urls(3), clock, 30000, kGateOff, kOutlier);
  for (int round = 0; round < 10; ++round) {
    fail(f, 0, 2);
    f.on_success(0);
  }
  EXPECT_TRUE(f.at(0).healthy());
  EXPECT_EQ(f.at(0).consecutive_failures(), 0u);
  f.on_response(0, 404);  // a complete 4xx is the engine answering: a success
  f.on_success(0);
  fail(f, 0, 2);
  f.on_response(0, 429);
  f.on_success(0);
  fail(f, 0, 2);
  EXPECT_TRUE(f.at(0).healthy());
}

TEST(Outlier, AResponseHeadIsNotASuccessUntilTheExchangeCompletes) {
  // Streams that answer 200 and then stall or are cut add up (their heads do not reset the run).
  ManualClock clock;
  Fleet f(urls(2), clock, 30000, kGateOff, kOutlier);
  for (int k = 0; k < 3; ++k) {
    f.on_response(0, 200);
    f.on_failure(0, Failure::kTimeout);
  }
  EXPECT_EQ(f.at(0).state(), EngineState::kEjected);
}

TEST(Outlier, FiveHundredAnswersCountAsFailures) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000, kGateOff, kOutlier);
  f.on_response(0, 500);
  f.on_response(0, 503);
  f.on_response(0, 504);
  EXPECT_EQ(f.at(0).state(), EngineState::kEjected);
}

TEST(Outlier, ProbesDoNotReadmitBeforeTheEjectionIsOver) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000, kGateOff, kOutlier);
  fail(f, 0, 3);
  clock.advance_ms(999);
  f.on_probe_success(0);
  f.on_response(0, 200);  // a fail-open answer does not shorten it either
  EXPECT_EQ(f.at(0).state(), EngineState::kEjected);
  clock.advance_ms(1);
  f.on_probe_success(0);
  EXPECT_TRUE(f.at(0).healthy());
  EXPECT_EQ(f.ejected_count(), 0u);
}

TEST(Outlier, TheReadinessGateAppliesWhenTheEjectionEnds) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000, kGate, kOutlier);
  fail(f, 0, 3);
  for (int k = 0; k < 5; ++k) f.on_probe_success(0);  // passes during the ejection do not count
  EXPECT_EQ(f.at(0).state(), EngineState::kEjected);
  clock.advance_ms(1000);
  f.on_probe_success(0);
  f.on_probe_success(0);
  EXPECT_EQ(f.at(0).state(), EngineState::kEjected);
  f.on_probe_success(0);
  EXPECT_EQ(f.at(0).state(), EngineState::kWarming);
  EXPECT_EQ(f.ejected_count(), 0u);
  clock.advance_ms(1000);
  f.on_probe_success(0);
  EXPECT_TRUE(f.at(0).healthy());
}

TEST(Outlier, BackOnProbationTheNextFailureEjectsAgainForTwiceAsLong) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000, kGateOff, kOutlier);
  fail(f, 0, 3);
  clock.advance_ms(1000);
  f.on_probe_success(0);
  ASSERT_TRUE(f.at(0).healthy());
  f.on_failure(0, Failure::kTimeout);
  EXPECT_EQ(f.at(0).state(), EngineState::kEjected) << "one failure on probation";
  EXPECT_EQ(health(f).at("replicas").as_array()[0].at("ejection_ms_left").as_int64(), 2000);
  clock.advance_ms(1999);
  f.on_probe_success(0);
  EXPECT_FALSE(f.at(0).healthy());
  clock.advance_ms(1);
  f.on_probe_success(0);
  EXPECT_TRUE(f.at(0).healthy());
  f.on_failure(0, Failure::kCut);
  EXPECT_EQ(health(f).at("replicas").as_array()[0].at("ejection_ms_left").as_int64(), 4000);
  clock.advance_ms(4000);
  f.on_probe_success(0);
  f.on_failure(0, Failure::kCut);
  EXPECT_EQ(health(f).at("replicas").as_array()[0].at("ejection_ms_left").as_int64(), 5000) << "capped";
}

TEST(Outlier, ASuccessOnProbationEndsItAndALongHealthyStretchResetsTheBackoff) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000, kGateOff, kOutlier);
  fail(f, 0, 3);
  clock.advance_ms(1000);
  f.on_probe_success(0);
  f.on_success(0);
  fail(f, 0, 2);
  EXPECT_TRUE(f.at(0).healthy()) << "the success ended the probation";
  clock.advance_ms(5001);  // longer than the max ejection since it was readmitted
  f.on_failure(0, Failure::kStatus5xx);
  EXPECT_EQ(f.at(0).state(), EngineState::kEjected);
  EXPECT_EQ(health(f).at("replicas").as_array()[0].at("ejection_ms_left").as_int64(), 1000)
      << "the backoff starts again from the base";
}

TEST(Outlier, AtMostTheShareOfTheFleetIsEjectedAndTheRestKeepServing) {
  ManualClock clock;
  Fleet f(urls(4), clock, 30000, kGateOff, kOutlier);
  for (size_t i = 0; i < 4; ++i) fail(f, i, 3);
  EXPECT_EQ(f.ejected_count(), 2u);
  EXPECT_EQ(f.healthy_count(), 2u) << "outliers cannot empty the fleet";
  EXPECT_TRUE(f.at(2).healthy() && f.at(3).healthy());
  metrics::Exposition x;
  f.write_metrics(x);
  const std::string text = x.take();
  EXPECT_NE(text.find(R"(ramjet_upstream_ejections_capped_total{upstream="2"} 1)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(ramjet_upstream_ejections_total{upstream="0"} 1)"), std::string::npos);
  // Once one returns, another may go.
  clock.advance_ms(1000);
  f.on_probe_success(0);
  f.on_failure(2, Failure::kStatus5xx);
  EXPECT_EQ(f.at(2).state(), EngineState::kEjected);
  EXPECT_EQ(f.ejected_count(), 2u);
}

TEST(Outlier, AFencedOrWarmingEngineIsNotEjectedAndAnEjectedOneFailingItsProbeIsUnhealthy) {
  ManualClock clock;
  Fleet f(urls(3), clock, 30000, kGateOff, kOutlier);
  f.fence(0, FenceReason::kConnect);
  fail(f, 0, 5);
  EXPECT_EQ(f.at(0).state(), EngineState::kUnhealthy);
  EXPECT_EQ(f.ejected_count(), 0u);
  fail(f, 1, 3);
  f.on_probe_failure(1, ProbeFailure::kHttp);
  EXPECT_EQ(f.at(1).state(), EngineState::kUnhealthy);
  EXPECT_EQ(f.ejected_count(), 0u) << "its slot is free";
  f.on_probe_success(1);
  EXPECT_EQ(f.at(1).state(), EngineState::kUnhealthy) << "its ejection time still holds";
  clock.advance_ms(1000);
  f.on_probe_success(1);
  EXPECT_TRUE(f.at(1).healthy());
}

TEST(Outlier, ZeroConsecutiveFailuresNeverEjects) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000, kGateOff, OutlierConfig{0, 1000, 5000, 50, 10000});
  fail(f, 0, 100);
  EXPECT_TRUE(f.at(0).healthy());
  EXPECT_EQ(f.at(0).consecutive_failures(), 100u);
}

// A penalty of 0 turns the ranking off, also for a caller whose time is the coarse clock's, a tick
// behind the failure's stamp (the fleet snapshot's: now - at is then negative).
TEST(Outlier, APenaltyOfZeroNeverRanksAnEngineFailing) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000, kGateOff, OutlierConfig{10, 1000, 5000, 50, 0});
  f.on_failure(0, Failure::kStatus5xx);
  f.on_failure(0, Failure::kStatus5xx);
  EXPECT_FALSE(f.failing(0));
  EXPECT_FALSE(f.failing(0, clock.now_ms() - 4));
}

TEST(Outlier, AnEngineIsFailingFromItsSecondFailureUntilASuccessOrThePenaltyTime) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000, kGateOff, OutlierConfig{10, 1000, 5000, 50, 10000});
  EXPECT_FALSE(f.failing(0));
  f.on_failure(0, Failure::kStatus5xx);
  EXPECT_FALSE(f.failing(0)) << "one stray error does not count";
  f.on_failure(0, Failure::kStatus5xx);
  EXPECT_TRUE(f.failing(0));
  EXPECT_FALSE(f.failing(1));
  clock.advance_ms(9999);
  EXPECT_TRUE(f.failing(0));
  clock.advance_ms(1);
  EXPECT_FALSE(f.failing(0)) << "it gets another chance after the penalty time";
  f.on_failure(0, Failure::kStatus5xx);
  EXPECT_TRUE(f.failing(0));
  f.on_response(0, 200);
  EXPECT_TRUE(f.failing(0)) << "a head is not yet a success";
  f.on_success(0);
  EXPECT_FALSE(f.failing(0));
  Fleet off(urls(1), clock, 30000, kGateOff, OutlierConfig{10, 1000, 5000, 50, 0});
  off.on_failure(0, Failure::kStatus5xx);
  off.on_failure(0, Failure::kStatus5xx);
  EXPECT_FALSE(off.failing(0));
}

TEST(Outlier, TheListenerHearsOfEnginesThatSurelyDoNotAnswerButNotOfEjectionsOrOneTimeout) {
  ManualClock clock;
  Fleet f(urls(4), clock, 0, kGateOff, kOutlier);
  std::vector<size_t> told;
  f.set_fence_listener([&](size_t i) { told.push_back(i); });
  fail(f, 0, 3);                             // ejected: it answers, badly
  f.fence(1, FenceReason::kConnect);         // refused
  f.on_probe_failure(2, ProbeFailure::kHttp);  // answered 503
  f.on_probe_failure(3, ProbeFailure::kTimeout);  // busy or hung: not yet
  EXPECT_EQ(told, (std::vector<size_t>{1, 2}));
  f.on_probe_failure(3, ProbeFailure::kTimeout);  // a whole interval without an answer: hung
  EXPECT_EQ(told, (std::vector<size_t>{1, 2, 3}));
  f.fence(1, FenceReason::kTimeout);  // a connect timeout on an engine already fenced
  EXPECT_EQ(told, (std::vector<size_t>{1, 2, 3, 1}));
}

TEST(Outlier, HealthAndMetricsShowTheEjectedShareAndTheEvidence) {
  ManualClock clock;
  Fleet f(urls(2), clock, 30000, kGateOff, kOutlier);
  f.on_failure(0, Failure::kDropped);
  f.on_failure(0, Failure::kTimeout);
  f.on_response(0, 502);
  auto h = health(f);
  EXPECT_EQ(h.at("status").as_string(), "degraded");
  EXPECT_EQ(h.at("ejected_replicas").as_int64(), 1);
  const auto& r0 = h.at("replicas").as_array()[0].as_object();
  EXPECT_EQ(r0.at("state").as_string(), "ejected");
  EXPECT_EQ(r0.at("ejections").as_int64(), 1);
  EXPECT_EQ(r0.at("consecutive_failures").as_int64(), 2) << "probation: the next failure ejects again";
  EXPECT_EQ(r0.at("ejection_ms_left").as_int64(), 1000);
  EXPECT_FALSE(h.at("replicas").as_array()[1].as_object().contains("ejection_ms_left"));
  metrics::Exposition x;
  f.write_metrics(x);
  const std::string text = x.take();
  for (const char* want : {R"(ramjet_upstream_state{upstream="0",state="ejected"} 1)",
                           R"(ramjet_upstream_failures_total{upstream="0",kind="dropped"} 1)",
                           R"(ramjet_upstream_failures_total{upstream="0",kind="timeout"} 1)",
                           R"(ramjet_upstream_failures_total{upstream="0",kind="status_5xx"} 1)",
                           R"(ramjet_upstream_failures_total{upstream="1",kind="cut"} 0)",
                           R"(ramjet_upstream_consecutive_failures{upstream="0"} 2)",
                           R"(ramjet_upstream_ejections_total{upstream="0"} 1)"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want;
  }
  EXPECT_EQ(text.find("engine-host"), std::string::npos);
}

}  // namespace
}  // namespace ramjet::upstream
