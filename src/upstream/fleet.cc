#include "upstream/fleet.h"

#include <array>
#include <chrono>

#include "common/log.h"

namespace ramjet::upstream {

std::string_view probe_failure_label(ProbeFailure f) {
  switch (f) {
    case ProbeFailure::kTimeout: return "timeout";
    case ProbeFailure::kConnect: return "connect";
    case ProbeFailure::kProtocol: return "protocol";
    case ProbeFailure::kHttp: return "http";
    case ProbeFailure::kTooLarge: return "response_too_large";
    case ProbeFailure::kCount: break;
  }
  return "unknown";
}

std::string_view fence_reason_label(FenceReason f) {
  switch (f) {
    case FenceReason::kConnect: return "connect";
    case FenceReason::kTimeout: return "timeout";
    case FenceReason::kProtocol: return "protocol";
    case FenceReason::kRetryableStatus: return "retryable_status";
    case FenceReason::kCount: break;
  }
  return "unknown";
}

std::string_view engine_state_label(EngineState s) {
  switch (s) {
    case EngineState::kHealthy: return "healthy";
    case EngineState::kWarming: return "warming";
    case EngineState::kUnhealthy: return "unhealthy";
  }
  return "unknown";
}

namespace {
constexpr EngineState kStates[] = {EngineState::kHealthy, EngineState::kWarming,
                                   EngineState::kUnhealthy};
}  // namespace

Engine::Engine(size_t ordinal, config::UpstreamUrl url)
    : ordinal_(ordinal), label_(std::to_string(ordinal)), url_(std::move(url)) {}

Fleet::Fleet(const std::vector<config::UpstreamUrl>& urls, const Clock& clock,
             int64_t recent_success_ms, Readiness readiness)
    : clock_(clock), recent_success_ms_(recent_success_ms), readiness_(readiness) {
  if (readiness_.successes == 0) readiness_.successes = 1;
  if (readiness_.stable_ms < 0) readiness_.stable_ms = 0;
  engines_.reserve(urls.size());
  for (size_t i = 0; i < urls.size(); ++i) engines_.push_back(std::make_unique<Engine>(i, urls[i]));
}

size_t Fleet::healthy_count() const {
  size_t n = 0;
  for (const auto& e : engines_) n += e->healthy() ? 1 : 0;
  return n;
}

void Fleet::transition(Engine& e, EngineState to, std::string_view source, std::string_view reason) {
  if (to != EngineState::kWarming) e.passes_ = 0;  // the gate count restarts
  EngineState from = e.state_.load(std::memory_order_relaxed);
  if (from == to) return;
  e.state_.store(to, std::memory_order_release);
  if (to == EngineState::kHealthy) e.readmissions_.inc();
  spdlog::info("upstream {} {} -> {} ({}{}{})", e.ordinal(), engine_state_label(from),
               engine_state_label(to), source, reason.empty() ? "" : " ", reason);
}

void Fleet::on_response(size_t i, unsigned status) {
  if (status >= 500) return;  // 5xx never counts as liveness
  Engine& e = *engines_[i];
  e.last_success_ms_.store(clock_.now_ms(), std::memory_order_release);
  if (e.healthy() || readiness_.gated()) return;  // with the gate on, only probes readmit
  std::lock_guard lock(e.mu_);
  transition(e, EngineState::kHealthy, "response");
}

void Fleet::fence(size_t i, FenceReason why) {
  Engine& e = *engines_[i];
  e.fences_[static_cast<int>(why)].inc();
  std::lock_guard lock(e.mu_);
  transition(e, EngineState::kUnhealthy, "fence", fence_reason_label(why));
}

void Fleet::on_probe_success(size_t i) {
  Engine& e = *engines_[i];
  e.probes_ok_.inc();
  std::lock_guard lock(e.mu_);
  const int64_t now = clock_.now_ms();
  switch (e.state_.load(std::memory_order_relaxed)) {
    case EngineState::kHealthy: return;
    case EngineState::kUnhealthy:
      if (++e.passes_ < readiness_.successes) return;
      if (readiness_.stable_ms == 0) {
        transition(e, EngineState::kHealthy, "probe", "passed");
      } else {
        e.warming_since_ms_ = now;
        transition(e, EngineState::kWarming, "probe", "passed");
      }
      return;
    case EngineState::kWarming:
      if (now - e.warming_since_ms_ >= readiness_.stable_ms) {
        transition(e, EngineState::kHealthy, "probe", "stable");
      }
      return;
  }
}

void Fleet::on_probe_failure(size_t i, ProbeFailure why) {
  Engine& e = *engines_[i];
  e.probe_failures_[static_cast<int>(why)].inc();
  std::lock_guard lock(e.mu_);
  if (e.state_.load(std::memory_order_relaxed) == EngineState::kHealthy) {
    bool starvable = why == ProbeFailure::kTimeout || why == ProbeFailure::kConnect;
    int64_t since = clock_.now_ms() - e.last_success_ms_.load(std::memory_order_acquire);
    if (starvable && since <= recent_success_ms_) {
      e.probe_suppressed_.inc();  // busy, not dead: it served successfully moments ago
      return;
    }
  }
  // A warming engine serves no traffic, so the recent-success rule cannot speak for it.
  transition(e, EngineState::kUnhealthy, "probe", probe_failure_label(why));
}

std::string Fleet::health_json() const {
  // One read of each state, so the counts and the replicas agree.
  std::vector<EngineState> states(engines_.size());
  size_t healthy = 0, warming = 0;
  for (size_t i = 0; i < engines_.size(); ++i) {
    states[i] = engines_[i]->state();
    healthy += states[i] == EngineState::kHealthy ? 1 : 0;
    warming += states[i] == EngineState::kWarming ? 1 : 0;
  }
  const char* status = healthy == engines_.size() ? "ok" : healthy > 0 ? "degraded" : "unhealthy";
  std::string out = R"({"status":")";
  out += status;
  out += R"(","admission_mode":"http","healthy_replicas":)" + std::to_string(healthy);
  out += R"(,"warming_replicas":)" + std::to_string(warming);
  out += R"(,"total_replicas":)" + std::to_string(engines_.size()) + R"(,"replicas":[)";
  for (size_t i = 0; i < engines_.size(); ++i) {
    const Engine& e = *engines_[i];
    if (i) out += ',';
    out += R"({"index":)" + std::to_string(i);
    out += R"(,"healthy":)";
    out += states[i] == EngineState::kHealthy ? "true" : "false";
    out += R"(,"state":")";
    out += engine_state_label(states[i]);
    out += R"(","inflight":)" + std::to_string(e.inflight());
    out += R"(,"load_units":)" + std::to_string(e.load_units());
    for (const ReplicaFlag& f : replica_flags_) out += ",\"" + f.name + "\":" + (f.read(i) ? "true" : "false");
    out += "}";
  }
  out += "]}";
  return out;
}

namespace {

enum class F {
  kUp, kState, kReadmissions, kInflight, kLoadUnits, kProbeFailures, kProbeSuppressed, kFences,
  kLastSuccess, kCount
};

using observe::Family;
using observe::MetricKind;

constexpr std::array<Family, static_cast<size_t>(F::kCount)> kFamilies = {{
    {"ramjet_upstream_up", MetricKind::kGauge, "upstream",
     "1 when the upstream is healthy, i.e. serving-eligible (ordinal label)."},
    {"ramjet_upstream_state", MetricKind::kGauge, "upstream,state",
     "1 for the upstream's health state (healthy, warming or unhealthy), 0 for the others."},
    {"ramjet_upstream_readmissions_total", MetricKind::kCounter, "upstream",
     "Upstreams readmitted to serving after being fenced (passed the readiness gate)."},
    {"ramjet_upstream_inflight", MetricKind::kGauge, "upstream", "Requests in flight per upstream."},
    {"ramjet_upstream_load_units", MetricKind::kGauge, "upstream", "Reserved load units per upstream."},
    {"ramjet_upstream_probe_failures_total", MetricKind::kCounter, "upstream,reason",
     "Failed health probes by reason: timeout, connect, protocol, http, response_too_large."},
    {"ramjet_upstream_probe_suppressed_total", MetricKind::kCounter, "upstream",
     "Probe failures not fenced because the upstream served within the recent-success window."},
    {"ramjet_upstream_fences_total", MetricKind::kCounter, "upstream,reason",
     "Upstreams fenced by the data plane, by reason: connect, timeout, protocol, retryable_status."},
    {"ramjet_last_upstream_success_timestamp_seconds", MetricKind::kGauge, "upstream",
     "Unix time of the upstream's last non-5xx response to a proxied request (0: none yet)."},
}};

const Family& fam(F f) { return kFamilies[static_cast<size_t>(f)]; }

}  // namespace

std::span<const observe::Family> fleet_families() { return kFamilies; }

void Fleet::write_metrics(observe::Exposition& x) const {
  auto each = [&](F f, auto value) {
    x.family(fam(f));
    for (const auto& e : engines_) x.sample(fam(f).name, "upstream=\"" + e->label() + "\"", value(*e));
  };
  each(F::kUp, [](const Engine& e) { return int64_t{e.healthy() ? 1 : 0}; });
  x.family(fam(F::kState));
  for (const auto& e : engines_) {
    const EngineState now = e->state();
    for (EngineState s : kStates) {
      x.sample(fam(F::kState).name,
               "upstream=\"" + e->label() + "\",state=\"" + std::string(engine_state_label(s)) + "\"",
               int64_t{now == s ? 1 : 0});
    }
  }
  each(F::kReadmissions, [](const Engine& e) { return e.readmissions_.get(); });
  each(F::kInflight, [](const Engine& e) { return e.inflight(); });
  each(F::kLoadUnits, [](const Engine& e) { return e.load_units(); });
  x.family(fam(F::kProbeFailures));
  for (const auto& e : engines_) {
    for (int r = 0; r < static_cast<int>(ProbeFailure::kCount); ++r) {
      x.sample(fam(F::kProbeFailures).name,
               "upstream=\"" + e->label() + "\",reason=\"" +
                   std::string(probe_failure_label(static_cast<ProbeFailure>(r))) + "\"",
               e->probe_failures_[r].get());
    }
  }
  each(F::kProbeSuppressed, [](const Engine& e) { return e.probe_suppressed_.get(); });
  x.family(fam(F::kFences));
  for (const auto& e : engines_) {
    for (int r = 0; r < static_cast<int>(FenceReason::kCount); ++r) {
      x.sample(fam(F::kFences).name,
               "upstream=\"" + e->label() + "\",reason=\"" +
                   std::string(fence_reason_label(static_cast<FenceReason>(r))) + "\"",
               e->fences_[r].get());
    }
  }
  // last_success_ms_ is on the fleet's (steady) clock: place it on the wall clock by its age.
  const int64_t now_ms = clock_.now_ms();
  const int64_t unix_now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  each(F::kLastSuccess, [&](const Engine& e) {
    const int64_t last = e.last_success_ms_.load(std::memory_order_acquire);
    if (last <= INT64_MIN / 4) return 0.0;  // never
    return static_cast<double>(unix_now_ms - (now_ms - last)) / 1000.0;
  });
}

}  // namespace ramjet::upstream
