#include "upstream/idle_drain.h"

#include <gtest/gtest.h>

#include <vector>

namespace ramjet::upstream {
namespace {

constexpr int64_t kNow = 10'000'000;

IdleDrainConfig config() {
  IdleDrainConfig c;
  c.mode = DrainMode::kDrain;
  c.release = DrainRelease::kUtilization;
  c.upstream_idle_after_ms = 60'000;
  c.idle_after_ms = 120'000;
  c.cooldown_ms = 30'000;
  c.grace_ms = 5'000;
  c.min_warm = 1;
  c.max_parked = 2;
  c.resume_load_per_replica = 4;
  return c;
}

// A warm, healthy engine quiet since `quiet_ms` before now.
ParkFacts warm(int64_t quiet_ms, int64_t inflight = 0, uint32_t pool = 0) {
  ParkFacts f;
  f.member = true;
  f.healthy = true;
  f.pool = pool;
  f.state = ParkState::kWarm;
  f.last_request_ms = kNow - quiet_ms;
  f.inflight = inflight;
  return f;
}

ParkFacts in_state(ParkState s, int64_t since_ago_ms, uint32_t pool = 0) {
  ParkFacts f = warm(1'000'000, 0, pool);
  f.state = s;
  f.since_ms = kNow - since_ago_ms;
  return f;
}

ParkDecision decide(const IdleDrainConfig& c, const std::vector<ParkFacts>& e, int64_t last_drain_ago = 1'000'000,
                    int64_t fleet_quiet = 1'000'000) {
  return decide_parking(c, e, kNow, kNow - last_drain_ago, kNow - fleet_quiet);
}

TEST(IdleDrainPolicy, DrainsTheQuietestEngineOnceItWasIdleLongEnough) {
  const auto d = decide(config(), {warm(70'000), warm(90'000), warm(10'000)});
  ASSERT_EQ(d.steps.size(), 1u);
  EXPECT_EQ(d.steps[0], (ParkStep{1, ParkAction::kDrain, ParkReason::kEngineIdle}));
}

TEST(IdleDrainPolicy, NeverDrainsAnEngineWithRequestsInFlightOrQuietForLessThanTheThreshold) {
  EXPECT_TRUE(decide(config(), {warm(59'000), warm(90'000, 1), warm(10'000)}).steps.empty());
}

TEST(IdleDrainPolicy, KeepsMinWarmEnginesPerPool) {
  IdleDrainConfig c = config();
  c.min_warm = 2;
  EXPECT_TRUE(decide(c, {warm(90'000), warm(90'000)}).steps.empty());
  // Pools count apart: pool 1's lone engine stays, pool 0 may give one of its three.
  c.min_warm = 1;
  const auto d = decide(c, {warm(90'000, 0, 1), warm(90'000), warm(80'000), warm(10'000)});
  ASSERT_EQ(d.steps.size(), 1u);
  EXPECT_EQ(d.steps[0].engine, 1u);
}

TEST(IdleDrainPolicy, DrainsAtMostOneEnginePerCooldown) {
  EXPECT_TRUE(decide(config(), {warm(90'000), warm(90'000), warm(90'000)}, /*last_drain_ago=*/29'000).steps.empty());
  EXPECT_EQ(decide(config(), {warm(90'000), warm(90'000), warm(90'000)}, 30'000).steps.size(), 1u);
}

TEST(IdleDrainPolicy, NeverHasMoreThanMaxParkedOutOfWarm) {
  const std::vector<ParkFacts> e = {warm(90'000), in_state(ParkState::kDrained, 100'000),
                                    in_state(ParkState::kFailed, 100), warm(90'000)};
  EXPECT_TRUE(decide(config(), e).steps.empty());
}

TEST(IdleDrainPolicy, FleetIdleReleaseDrainsOnlyWhileTheWholeFleetIsQuiet) {
  IdleDrainConfig c = config();
  c.release = DrainRelease::kFleetIdle;
  const std::vector<ParkFacts> e = {warm(90'000), warm(100'000), warm(5'000)};
  auto busy = decide(c, e, 1'000'000, /*fleet_quiet=*/5'000);
  EXPECT_TRUE(busy.steps.empty());
  EXPECT_FALSE(busy.fleet_idle);
  // (the third engine's own request is older than the fleet's in a real run; here only the
  // fleet's clock is tested)
  auto quiet = decide(c, e, 1'000'000, 120'000);
  EXPECT_TRUE(quiet.fleet_idle);
  ASSERT_EQ(quiet.steps.size(), 1u);
  EXPECT_EQ(quiet.steps[0], (ParkStep{1, ParkAction::kDrain, ParkReason::kFleetIdle}));
}

TEST(IdleDrainPolicy, UtilizationReleaseKeepsEnoughWarmEnginesForTheLoad) {
  // 3 in flight over two warm engines; one fewer would leave 3 per engine >= 4 / 2: stays.
  EXPECT_TRUE(decide(config(), {warm(90'000), warm(1, 3)}).steps.empty());
  EXPECT_EQ(decide(config(), {warm(90'000), warm(1, 1), warm(2)}).steps.size(), 1u);
}

TEST(IdleDrainPolicy, PutsADrainingEngineToSleepAfterTheGraceOnceNothingIsInFlight) {
  std::vector<ParkFacts> e = {warm(1), in_state(ParkState::kDraining, 4'000)};
  EXPECT_TRUE(decide(config(), e, 0).steps.empty());
  e[1].since_ms = kNow - 5'000;
  e[1].inflight = 1;
  EXPECT_TRUE(decide(config(), e, 0).steps.empty());
  e[1].inflight = 0;
  const auto d = decide(config(), e, 0);
  ASSERT_EQ(d.steps.size(), 1u);
  EXPECT_EQ(d.steps[0], (ParkStep{1, ParkAction::kSleep, ParkReason::kGraceOver}));
}

TEST(IdleDrainPolicy, WakesAParkedEngineAtOnceWhenLoadPerWarmEnginePassesTheThreshold) {
  const std::vector<ParkFacts> e = {warm(0, 5), in_state(ParkState::kDrained, 50'000),
                                    in_state(ParkState::kDrained, 90'000)};
  const auto d = decide(config(), e, /*last_drain_ago=*/0);
  ASSERT_EQ(d.steps.size(), 1u);
  EXPECT_EQ(d.steps[0], (ParkStep{2, ParkAction::kWake, ParkReason::kLoad}));  // the longest parked
  EXPECT_DOUBLE_EQ(d.max_load_per_warm, 5.0);
  EXPECT_TRUE(decide(config(), {warm(0, 4), in_state(ParkState::kDrained, 1)}).steps.empty());  // not past it
}

TEST(IdleDrainPolicy, UndrainsADrainingEngineBeforeWakingASleepingOne) {
  const std::vector<ParkFacts> e = {warm(0, 9), in_state(ParkState::kDrained, 50'000),
                                    in_state(ParkState::kDraining, 1'000)};
  const auto d = decide(config(), e);
  ASSERT_EQ(d.steps.size(), 1u);
  EXPECT_EQ(d.steps[0], (ParkStep{2, ParkAction::kUndrain, ParkReason::kLoad}));
}

TEST(IdleDrainPolicy, ScalesFromZeroWhenARequestWaitsForAPoolWithNoWarmEngine) {
  IdleDrainConfig c = config();
  c.min_warm = 0;
  std::vector<ParkFacts> e = {in_state(ParkState::kDrained, 10'000), in_state(ParkState::kDrained, 20'000),
                              warm(1'000'000, 0, 1)};
  EXPECT_TRUE(decide(c, e, 0).steps.empty());  // nobody waits: they stay asleep
  e[0].wanted = e[1].wanted = true;
  const auto d = decide(c, e, 0);
  ASSERT_EQ(d.steps.size(), 1u);
  EXPECT_EQ(d.steps[0], (ParkStep{1, ParkAction::kWake, ParkReason::kDemand}));
}

TEST(IdleDrainPolicy, WakesOneEngineAtATimePerPool) {
  std::vector<ParkFacts> e = {in_state(ParkState::kWaking, 100), in_state(ParkState::kDrained, 20'000)};
  e[0].wanted = e[1].wanted = true;
  EXPECT_TRUE(decide(config(), e).steps.empty());
}

TEST(IdleDrainPolicy, AnEngineThatFailedToWakeIsPassedOverForAnotherUntilTheCooldown) {
  std::vector<ParkFacts> e = {in_state(ParkState::kFailed, 1'000), in_state(ParkState::kDrained, 5'000),
                              warm(0, 0, 1)};
  e[0].wanted = e[1].wanted = true;
  auto d = decide(config(), e);
  ASSERT_EQ(d.steps.size(), 1u);
  EXPECT_EQ(d.steps[0], (ParkStep{1, ParkAction::kWake, ParkReason::kDemand}));
  // With nothing else parked, the failed one is tried again only after the cooldown.
  e[1] = warm(0, 0, 2);
  EXPECT_TRUE(decide(config(), e).steps.empty());
  e[0].since_ms = kNow - 30'000;
  d = decide(config(), e);
  ASSERT_EQ(d.steps.size(), 1u);
  EXPECT_EQ(d.steps[0], (ParkStep{0, ParkAction::kWake, ParkReason::kDemand}));
}

TEST(IdleDrainPolicy, NothingIsDrainedWhileSomethingResumes) {
  const std::vector<ParkFacts> e = {warm(0, 9), in_state(ParkState::kDrained, 50'000), warm(90'000, 0, 1),
                                    warm(90'000, 0, 1)};
  const auto d = decide(config(), e);
  ASSERT_EQ(d.steps.size(), 1u);
  EXPECT_EQ(d.steps[0].action, ParkAction::kWake);
}

TEST(IdleDrainPolicy, AnUnhealthyEngineIsNeitherWarmCapacityNorDrained) {
  std::vector<ParkFacts> e = {warm(90'000), warm(90'000)};
  e[0].healthy = false;
  EXPECT_TRUE(decide(config(), e).steps.empty());  // the one healthy engine is the pool's min-warm
}

TEST(IdleDrainPolicy, LabelsAreStable) {
  EXPECT_EQ(park_state_label(ParkState::kDrained), "drained");
  EXPECT_EQ(park_state_label(ParkState::kFailed), "failed");
  EXPECT_EQ(park_action_label(ParkAction::kUndrain), "undrain");
  EXPECT_EQ(park_reason_label(ParkReason::kDemand), "demand");
}

}  // namespace
}  // namespace ramjet::upstream
