#include "upstream/idle_drain.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>

namespace ramjet::upstream {

std::string_view park_state_label(ParkState s) {
  switch (s) {
    case ParkState::kWarm: return "warm";
    case ParkState::kDraining: return "draining";
    case ParkState::kDrained: return "drained";
    case ParkState::kWaking: return "waking";
    case ParkState::kFailed: return "failed";
    case ParkState::kCount: break;
  }
  return "warm";
}

std::string_view park_action_label(ParkAction a) {
  switch (a) {
    case ParkAction::kDrain: return "drain";
    case ParkAction::kSleep: return "sleep";
    case ParkAction::kWake: return "wake";
    case ParkAction::kUndrain: return "undrain";
    case ParkAction::kCount: break;
  }
  return "drain";
}

std::string_view park_reason_label(ParkReason r) {
  switch (r) {
    case ParkReason::kEngineIdle: return "engine_idle";
    case ParkReason::kFleetIdle: return "fleet_idle";
    case ParkReason::kGraceOver: return "grace_over";
    case ParkReason::kLoad: return "load";
    case ParkReason::kDemand: return "demand";
    case ParkReason::kCount: break;
  }
  return "engine_idle";
}

namespace {

struct PoolView {
  std::vector<size_t> members;  // engine indices
  int64_t warm = 0;
  int64_t inflight = 0;  // over its warm engines
  bool wanted = false;
  bool waking = false;
};

}  // namespace

ParkDecision decide_parking(const IdleDrainConfig& c, std::span<const ParkFacts> engines, int64_t now_ms,
                            int64_t last_drain_ms, int64_t last_request_ms) {
  ParkDecision d;
  d.fleet_idle = now_ms - last_request_ms >= c.idle_after_ms;
  std::map<uint32_t, PoolView> pools;
  size_t out_of_warm = 0;
  for (size_t i = 0; i < engines.size(); ++i) {
    const ParkFacts& e = engines[i];
    if (!e.member) continue;
    PoolView& p = pools[e.pool];
    p.members.push_back(i);
    p.wanted = p.wanted || e.wanted;
    if (e.state == ParkState::kWarm) {
      if (e.healthy) {
        ++p.warm;
        p.inflight += e.inflight;
      }
    } else {
      ++out_of_warm;
      p.waking = p.waking || e.state == ParkState::kWaking;
    }
  }
  bool resumed_any = false;
  for (auto& [key, p] : pools) {
    const double load = p.warm > 0 ? static_cast<double>(p.inflight) / static_cast<double>(p.warm) : 0.0;
    d.max_load_per_warm = std::max(d.max_load_per_warm, load);
    // Resume: scale from zero, or load past the threshold.
    std::optional<ParkReason> resume;
    if (p.wanted && p.warm == 0) resume = ParkReason::kDemand;
    else if (p.warm > 0 && load > c.resume_load_per_replica) resume = ParkReason::kLoad;
    if (resume) {
      // A draining engine is still awake: it comes back at once (the most recently drained first).
      size_t best = SIZE_MAX;
      for (size_t i : p.members) {
        const ParkFacts& e = engines[i];
        if (e.state != ParkState::kDraining || !e.healthy) continue;
        if (best == SIZE_MAX || e.since_ms > engines[best].since_ms) best = i;
      }
      if (best != SIZE_MAX) {
        d.steps.push_back({best, ParkAction::kUndrain, *resume});
        resumed_any = true;
        continue;
      }
      if (!p.waking) {  // one wake at a time per pool: the longest parked drained engine first
        for (size_t i : p.members) {
          const ParkFacts& e = engines[i];
          const bool retry = e.state == ParkState::kFailed && now_ms - e.since_ms >= c.cooldown_ms;
          if (e.state != ParkState::kDrained && !retry) continue;
          if (best == SIZE_MAX || (engines[best].state == ParkState::kFailed && e.state == ParkState::kDrained) ||
              (engines[best].state == e.state && e.since_ms < engines[best].since_ms))
            best = i;
        }
        if (best != SIZE_MAX) {
          d.steps.push_back({best, ParkAction::kWake, *resume});
          resumed_any = true;
        }
      }
      continue;
    }
  }
  // Draining engines whose grace is over and that have nothing in flight go to sleep.
  for (size_t i = 0; i < engines.size(); ++i) {
    const ParkFacts& e = engines[i];
    if (!e.member || e.state != ParkState::kDraining || e.inflight > 0) continue;
    if (now_ms - e.since_ms < c.grace_ms) continue;
    if (std::find_if(d.steps.begin(), d.steps.end(), [&](const ParkStep& s) { return s.engine == i; }) !=
        d.steps.end())
      continue;  // (undrained this round)
    d.steps.push_back({i, ParkAction::kSleep, ParkReason::kGraceOver});
  }
  // Drain at most one engine per cooldown, never while anything resumes.
  if (resumed_any || out_of_warm >= c.max_parked || now_ms - last_drain_ms < c.cooldown_ms) return d;
  if (c.release == DrainRelease::kFleetIdle && !d.fleet_idle) return d;
  size_t best = SIZE_MAX;
  for (auto& [key, p] : pools) {
    if (p.warm <= static_cast<int64_t>(c.min_warm) || p.wanted) continue;
    if (c.release == DrainRelease::kUtilization) {  // the load the warm engines left would carry
      const int64_t left = p.warm - 1;
      if (left > 0 ? static_cast<double>(p.inflight) / static_cast<double>(left) >= c.resume_load_per_replica / 2
                   : p.inflight > 0)
        continue;
    }
    for (size_t i : p.members) {
      const ParkFacts& e = engines[i];
      if (e.state != ParkState::kWarm || !e.healthy || e.inflight > 0) continue;
      if (now_ms - e.last_request_ms < c.upstream_idle_after_ms) continue;
      // The quietest engine first; among equals the highest ordinal (the first ones stay warm).
      if (best == SIZE_MAX || e.last_request_ms < engines[best].last_request_ms ||
          (e.last_request_ms == engines[best].last_request_ms && i > best))
        best = i;
    }
  }
  if (best != SIZE_MAX) {
    d.steps.push_back(
        {best, ParkAction::kDrain, c.release == DrainRelease::kFleetIdle ? ParkReason::kFleetIdle : ParkReason::kEngineIdle});
  }
  return d;
}

}  // namespace ramjet::upstream
