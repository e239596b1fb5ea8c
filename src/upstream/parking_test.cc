// upstream/parking without I/O: observe mode (states on paper, placement untouched) and drain mode
// with RJ_IDLE_DRAIN_ACTUATOR=off (placement only, no sleep calls), driven tick by tick on a
// manual clock. The sleep and wake calls themselves are tested end to end on ramjet-sim
// (test/integration/test_parking.py).
#include "upstream/parking.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "upstream/fleet_testing.h"

namespace ramjet::upstream {
namespace {

IdleDrainConfig quick(DrainMode mode) {
  IdleDrainConfig c;
  c.mode = mode;
  c.release = DrainRelease::kUtilization;
  c.upstream_idle_after_ms = 60'000;
  c.cooldown_ms = 0;
  c.grace_ms = 0;
  c.min_warm = 1;
  c.max_parked = 2;
  c.resume_load_per_replica = 1;
  c.sleep_actuator = false;
  return c;
}

struct Rig {
  explicit Rig(IdleDrainConfig c) : fleet(test_support::urls(3), clock, 30000), parking(fleet, io, clock, c, "") {}
  ManualClock clock;
  Fleet fleet;
  boost::asio::io_context io;
  EngineParking parking;
  std::string metrics() const {
    metrics::Exposition x;
    parking.write_metrics(x);
    return x.take();
  }
};

TEST(EngineParking, ObserveModeMovesStatesOnPaperAndNeverTouchesPlacement) {
  Rig r(quick(DrainMode::kObserve));
  r.parking.tick();
  EXPECT_EQ(r.parking.state(2), ParkState::kWarm);  // not idle long enough yet
  r.clock.advance_ms(61'000);
  r.parking.tick();
  EXPECT_EQ(r.parking.state(2), ParkState::kDraining);  // the highest ordinal among equals
  r.parking.tick();
  EXPECT_EQ(r.parking.state(2), ParkState::kDrained);
  EXPECT_EQ(r.parking.state(1), ParkState::kDraining);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_FALSE(r.fleet.at(i).parked());
    EXPECT_TRUE(r.fleet.at(i).healthy());
  }
  EXPECT_EQ(r.parking.health_label(2), "drained");
  const std::string text = r.metrics();
  EXPECT_NE(text.find("ramjet_idle_drain_decisions_total{action=\"drain\",reason=\"engine_idle\"} 2"), std::string::npos)
      << text;
  EXPECT_NE(text.find("ramjet_idle_drain_state{upstream=\"2\"} 2"), std::string::npos) << text;
}

TEST(EngineParking, DrainTakesAParkedEngineOutOfPlacementAndLoadBringsItBack) {
  Rig r(quick(DrainMode::kDrain));
  r.clock.advance_ms(61'000);
  r.parking.tick();
  ASSERT_EQ(r.parking.state(2), ParkState::kDraining);
  EXPECT_TRUE(r.fleet.at(2).parked());
  EXPECT_FALSE(r.fleet.at(2).healthy());  // never a candidate, not even to fail open to
  EXPECT_TRUE(r.parking.coming(2));
  EXPECT_EQ(r.fleet.healthy_count(), 3u);  // parking is not ill health (/health stays 200)
  r.parking.tick();
  ASSERT_EQ(r.parking.state(2), ParkState::kDrained);  // actuator off: parked awake
  ASSERT_EQ(r.parking.state(1), ParkState::kDraining);
  // Three requests on the one warm engine: past one per warm engine, the draining one returns first.
  r.fleet.at(0).add_load(3, 3);
  r.parking.tick();
  EXPECT_EQ(r.parking.state(1), ParkState::kWarm);
  EXPECT_FALSE(r.fleet.at(1).parked());
  r.parking.tick();  // still 3 over two warm engines: the drained one wakes too
  EXPECT_EQ(r.parking.state(2), ParkState::kWarm);
  EXPECT_TRUE(r.fleet.at(2).healthy());
  r.fleet.at(0).add_load(-3, -3);
}

TEST(EngineParking, ARequestForAPoolWithEveryEngineParkedWakesOne) {
  IdleDrainConfig c = quick(DrainMode::kDrain);
  c.min_warm = 0;
  c.max_parked = 3;
  Rig r(c);
  r.clock.advance_ms(61'000);
  for (int k = 0; k < 4; ++k) {  // 2, 1, 0 in turn, a millisecond apart
    r.parking.tick();
    r.clock.advance_ms(1);
  }
  for (size_t i = 0; i < 3; ++i) ASSERT_EQ(r.parking.state(i), ParkState::kDrained) << i;
  r.parking.tick();  // nobody waits: they stay parked
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(r.fleet.at(i).parked());
  EngineSet pool;
  for (size_t i = 0; i < 3; ++i) pool.add(i);
  r.parking.want(&pool);
  r.parking.tick();
  EXPECT_EQ(r.parking.state(2), ParkState::kWarm);  // the longest parked
  EXPECT_FALSE(r.fleet.at(2).parked());
  EXPECT_TRUE(r.fleet.at(0).parked());
  EXPECT_TRUE(r.fleet.at(1).parked());
  const std::string text = r.metrics();
  EXPECT_NE(text.find("ramjet_idle_drain_decisions_total{action=\"wake\",reason=\"demand\"} 1"), std::string::npos)
      << text;
}

TEST(EngineParking, AnotherEngineTakingAParkedSlotStartsWarm) {
  ManualClock clock;
  net::Roster roster(test_support::urls(3), 4);
  Fleet fleet(roster, clock, 30000);
  boost::asio::io_context io;
  EngineParking parking(fleet, io, clock, quick(DrainMode::kDrain), "");
  clock.advance_ms(61'000);
  parking.tick();
  ASSERT_EQ(parking.state(2), ParkState::kDraining);
  ASSERT_TRUE(fleet.at(2).parked());
  roster.leave(2);
  fleet.leave(2);
  roster.vacate(2);
  fleet.vacate(2);
  roster.join(2, test_support::urls(4)[3]);
  fleet.join(2);
  parking.tick();
  EXPECT_EQ(parking.state(2), ParkState::kWarm);
  EXPECT_FALSE(fleet.at(2).parked());
}

}  // namespace
}  // namespace ramjet::upstream
