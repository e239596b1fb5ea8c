// upstream/idle_drain: the idle-drain policy (RJ_IDLE_DRAIN_*, the Rust original's idle drain and
// engine parking; issue 30). Pure: from what it is told about each engine at one moment it decides
// which engine to take out of placement (drain), which drained engine to put to sleep, and which
// parked engine to wake. No I/O, no clock: upstream/parking.h does what it says (POST /sleep,
// /wake_up, GET /is_sleeping) and keeps the states; routing reads the fleet's parked flag.
//
// The rules, per model pool (the engines serving the same base models):
//  - resume first, immediately: a request waits for a pool with no warm engine (scale from zero),
//    or the pool's in-flight requests per warm engine exceed RJ_IDLE_DRAIN_RESUME_LOAD_PER_REPLICA:
//    a draining engine goes back to warm at once, else one parked engine is woken (one wake at a
//    time per pool; an engine that failed to wake is tried again only after the cooldown);
//  - a draining engine is put to sleep once RJ_IDLE_DRAIN_GRACE_SECONDS have passed and it has no
//    request in flight;
//  - at most one engine is drained per RJ_IDLE_DRAIN_COOLDOWN_SECONDS across the fleet, never more
//    than RJ_IDLE_DRAIN_MAX_PARKED out of warm at once, never below RJ_IDLE_DRAIN_MIN_WARM warm
//    engines in its pool: an engine with nothing in flight and no request for
//    RJ_IDLE_DRAIN_UPSTREAM_IDLE_AFTER_SECONDS, and, with RJ_IDLE_DRAIN_RELEASE=fleet-idle, only
//    while the whole fleet has had no request for RJ_IDLE_DRAIN_IDLE_AFTER_SECONDS (utilization:
//    whenever the pool's load over the warm engines left stays below half the resume threshold).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace ramjet::upstream {

enum class DrainMode : uint8_t { kOff, kObserve, kDrain };
enum class DrainRelease : uint8_t { kFleetIdle, kUtilization };

// An engine's parking state. Only kWarm is placeable; every other state is out of placement
// (and never a fail-open target). kFailed: it accepted /sleep but did not wake (fenced, counted).
enum class ParkState : uint8_t { kWarm, kDraining, kDrained, kWaking, kFailed, kCount };
std::string_view park_state_label(ParkState s);  // warm|draining|drained|waking|failed

enum class ParkAction : uint8_t { kDrain, kSleep, kWake, kUndrain, kCount };
std::string_view park_action_label(ParkAction a);  // drain|sleep|wake|undrain
enum class ParkReason : uint8_t { kEngineIdle, kFleetIdle, kGraceOver, kLoad, kDemand, kCount };
std::string_view park_reason_label(ParkReason r);  // engine_idle|fleet_idle|grace_over|load|demand

struct IdleDrainConfig {
  DrainMode mode = DrainMode::kOff;              // RJ_IDLE_DRAIN_MODE
  DrainRelease release = DrainRelease::kFleetIdle;  // RJ_IDLE_DRAIN_RELEASE
  int64_t idle_after_ms = 900000;                // RJ_IDLE_DRAIN_IDLE_AFTER_SECONDS (fleet)
  int64_t upstream_idle_after_ms = 300000;       // RJ_IDLE_DRAIN_UPSTREAM_IDLE_AFTER_SECONDS
  double resume_load_per_replica = 4;            // RJ_IDLE_DRAIN_RESUME_LOAD_PER_REPLICA
  uint32_t min_warm = 1;                         // RJ_IDLE_DRAIN_MIN_WARM (per pool)
  int64_t cooldown_ms = 300000;                  // RJ_IDLE_DRAIN_COOLDOWN_SECONDS
  int64_t grace_ms = 30000;                      // RJ_IDLE_DRAIN_GRACE_SECONDS
  int64_t interval_ms = 15000;                   // RJ_IDLE_DRAIN_INTERVAL_SECONDS
  bool sleep_actuator = true;                    // RJ_IDLE_DRAIN_ACTUATOR: sleep (true) | off
  uint32_t sleep_level = 1;                      // RJ_IDLE_DRAIN_SLEEP_LEVEL
  uint32_t max_parked = 1;                       // RJ_IDLE_DRAIN_MAX_PARKED
  int64_t wake_timeout_ms = 60000;               // RJ_IDLE_DRAIN_WAKE_TIMEOUT_SECONDS
};

// One engine as the controller sees it now.
struct ParkFacts {
  bool member = false;           // an active roster slot
  bool healthy = false;          // its health state (probes, fencing), parking aside
  uint32_t pool = 0;             // its model pool (engines serving the same base models)
  ParkState state = ParkState::kWarm;
  int64_t since_ms = 0;          // when it entered `state`
  int64_t last_request_ms = 0;   // its last request (or when the controller started)
  int64_t inflight = 0;          // this process's requests on it
  bool wanted = false;           // a request waits for its pool (no warm engine there)
};

struct ParkStep {
  size_t engine = 0;
  ParkAction action = ParkAction::kDrain;
  ParkReason reason = ParkReason::kEngineIdle;
  bool operator==(const ParkStep&) const = default;
};

struct ParkDecision {
  std::vector<ParkStep> steps;
  bool fleet_idle = false;          // no request anywhere for idle_after_ms
  double max_load_per_warm = 0;     // the busiest pool's in-flight requests per warm engine
};

// `last_drain_ms`: when the last engine was drained (the cooldown's start; far past: never).
// `last_request_ms`: the fleet's last request.
ParkDecision decide_parking(const IdleDrainConfig& config, std::span<const ParkFacts> engines, int64_t now_ms,
                            int64_t last_drain_ms, int64_t last_request_ms);

}  // namespace ramjet::upstream
