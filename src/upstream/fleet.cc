#include "upstream/fleet.h"

#include <array>
#include <chrono>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "common/build_info.h"
#include "common/log.h"
#include "net/tls.h"

namespace ramjet::upstream {

std::string_view probe_failure_label(ProbeFailure f) {
  switch (f) {
    case ProbeFailure::kTimeout: return "timeout";
    case ProbeFailure::kConnect: return "connect";
    case ProbeFailure::kProtocol: return "protocol";
    case ProbeFailure::kHttp: return "http";
    case ProbeFailure::kTooLarge: return "response_too_large";
    case ProbeFailure::kTls: return "tls";
    case ProbeFailure::kCount: break;
  }
  return "unknown";
}

std::string_view fence_reason_label(FenceReason f) {
  switch (f) {
    case FenceReason::kConnect: return "connect";
    case FenceReason::kTimeout: return "timeout";
    case FenceReason::kTls: return "tls";
    case FenceReason::kCount: break;
  }
  return "unknown";
}

std::string_view failure_label(Failure f) {
  switch (f) {
    case Failure::kStatus5xx: return "status_5xx";
    case Failure::kDropped: return "dropped";
    case Failure::kBadResponse: return "bad_response";
    case Failure::kTimeout: return "timeout";
    case Failure::kCut: return "cut";
    case Failure::kCount: break;
  }
  return "unknown";
}

std::string_view engine_state_label(EngineState s) {
  switch (s) {
    case EngineState::kHealthy: return "healthy";
    case EngineState::kWarming: return "warming";
    case EngineState::kUnhealthy: return "unhealthy";
    case EngineState::kEjected: return "ejected";
  }
  return "unknown";
}

namespace {
constexpr EngineState kStates[] = {EngineState::kHealthy, EngineState::kWarming,
                                   EngineState::kUnhealthy, EngineState::kEjected};
}  // namespace

Engine::Engine(size_t ordinal) : ordinal_(ordinal), label_(std::to_string(ordinal)) {}

Fleet::Fleet(const net::Roster& roster, const Clock& clock, int64_t recent_success_ms, Readiness readiness,
             OutlierConfig outlier)
    : roster_(roster), clock_(clock), recent_success_ms_(recent_success_ms), readiness_(readiness), outlier_(outlier) {
  init();
}

void Fleet::init() {
  const net::Roster& roster = roster_;
  if (readiness_.successes == 0) readiness_.successes = 1;
  if (readiness_.stable_ms < 0) readiness_.stable_ms = 0;
  engines_.reserve(roster.capacity());
  for (size_t i = 0; i < roster.capacity(); ++i) {
    engines_.push_back(std::make_unique<Engine>(i));
    engines_.back()->member_.store(roster.active(i), std::memory_order_release);
  }
}

Fleet::Fleet(const std::vector<config::UpstreamUrl>& urls, const Clock& clock, int64_t recent_success_ms,
             Readiness readiness, OutlierConfig outlier)
    : own_roster_(std::make_unique<net::Roster>(urls)),
      roster_(*own_roster_),
      clock_(clock),
      recent_success_ms_(recent_success_ms),
      readiness_(readiness),
      outlier_(outlier) {
  init();
}

size_t Fleet::healthy_count() const {
  size_t n = 0;
  for (const auto& e : engines_) n += e->member() && e->state() == EngineState::kHealthy ? 1 : 0;
  return n;
}

void Fleet::join(size_t i) {
  Engine& e = *engines_[i];
  {
    std::lock_guard lock(e.mu_);
    if (e.state_.load(std::memory_order_relaxed) == EngineState::kEjected) ejected_.fetch_sub(1, std::memory_order_relaxed);
    e.state_.store(EngineState::kUnhealthy, std::memory_order_release);
    e.passes_ = 0;
    e.warming_since_ms_ = 0;
    e.last_success_ms_.store(INT64_MIN / 2, std::memory_order_release);
    e.consecutive_failures_.store(0, std::memory_order_relaxed);
    e.failed_at_ms_.store(Engine::kNever, std::memory_order_relaxed);
    e.ejected_until_ms_.store(INT64_MIN / 2, std::memory_order_relaxed);
    e.ejection_level_ = 0;
    e.last_readmitted_ms_ = INT64_MIN / 2;
  }
  e.member_.store(true, std::memory_order_release);
  spdlog::info("upstream {} joined (unhealthy until it passes the readiness gate)", i);
}

void Fleet::leave(size_t i) {
  Engine& e = *engines_[i];
  e.member_.store(false, std::memory_order_release);
  {
    // An ejection belongs to the engines meant to serve: a leaving one does not use the share
    // outliers may take (it comes back, if at all, through the probes it still gets).
    std::lock_guard lock(e.mu_);
    if (e.state_.load(std::memory_order_relaxed) == EngineState::kEjected) {
      ejected_.fetch_sub(1, std::memory_order_relaxed);
      e.state_.store(EngineState::kUnhealthy, std::memory_order_release);
      e.passes_ = 0;
    }
  }
  spdlog::info("upstream {} leaving: no new requests, {} in flight finish", i, engines_[i]->inflight());
}

void Fleet::rejoin(size_t i) {
  engines_[i]->member_.store(true, std::memory_order_release);
  spdlog::info("upstream {} back before it left: serving again in its current state", i);
}

void Fleet::vacate(size_t i) {
  Engine& e = *engines_[i];
  e.member_.store(false, std::memory_order_release);
  std::lock_guard lock(e.mu_);
  if (e.state_.load(std::memory_order_relaxed) == EngineState::kEjected) ejected_.fetch_sub(1, std::memory_order_relaxed);
  e.state_.store(EngineState::kUnhealthy, std::memory_order_release);
  spdlog::info("upstream {} left", i);
}

void Fleet::transition(Engine& e, EngineState to, std::string_view source, std::string_view reason) {
  if (to != EngineState::kWarming) e.passes_ = 0;  // the gate count restarts
  EngineState from = e.state_.load(std::memory_order_relaxed);
  if (from == to) return;
  e.state_.store(to, std::memory_order_release);
  if (from == EngineState::kEjected) ejected_.fetch_sub(1, std::memory_order_relaxed);
  if (to == EngineState::kHealthy) {
    e.readmissions_.inc();
    e.last_readmitted_ms_ = clock_.now_ms();
    e.failed_at_ms_.store(Engine::kNever, std::memory_order_relaxed);  // it passed the gate: a fresh start
  }
  spdlog::info("upstream {} {} -> {} ({}{}{})", e.ordinal(), engine_state_label(from),
               engine_state_label(to), source, reason.empty() ? "" : " ", reason);
}

void Fleet::on_response(size_t i, unsigned status) {
  if (status >= 500) {  // 5xx never counts as liveness; it is a failure
    on_failure(i, Failure::kStatus5xx);
    return;
  }
  Engine& e = *engines_[i];
  const int64_t now = clock_.coarse_now_ms();  // (every response: liveness and ejections are seconds)
  e.last_success_ms_.store(now, std::memory_order_release);
  if (e.healthy() || readiness_.gated()) return;  // with the gate on, only probes readmit
  std::lock_guard lock(e.mu_);
  if (now < e.ejected_until_ms_.load(std::memory_order_relaxed)) return;  // still ejected
  transition(e, EngineState::kHealthy, "response");
}

void Fleet::on_success(size_t i) {
  Engine& e = *engines_[i];
  // Read before writing: the common case (no failures) writes nothing shared.
  if (e.consecutive_failures_.load(std::memory_order_relaxed) != 0) {
    e.consecutive_failures_.store(0, std::memory_order_relaxed);
  }
  if (e.failed_at_ms_.load(std::memory_order_relaxed) != Engine::kNever) {
    e.failed_at_ms_.store(Engine::kNever, std::memory_order_relaxed);
  }
}

// A refused connection is the engine's, not one rank's: every slot holding another data-parallel
// rank of the same address (net::Roster::siblings) is fenced with it.
void Fleet::fence(size_t i, FenceReason why) {
  fence_one(i, why);
  if (why == FenceReason::kConnect) each_sibling_rank(i, [&](size_t j) { fence_one(j, why); });
}

void Fleet::fence_one(size_t i, FenceReason why) {
  Engine& e = *engines_[i];
  e.fences_[static_cast<int>(why)].inc();
  std::lock_guard lock(e.mu_);
  const bool was_unhealthy = e.state_.load(std::memory_order_relaxed) == EngineState::kUnhealthy;
  transition(e, EngineState::kUnhealthy, "fence", fence_reason_label(why));
  // A refusal leaves no doubt; a connect timeout may be an overloaded accept queue (unless it
  // was already fenced).
  if ((why != FenceReason::kTimeout || was_unhealthy) && fence_listener_) fence_listener_(e.ordinal());
}

void Fleet::on_failure(size_t i, Failure why) {
  Engine& e = *engines_[i];
  e.failures_[static_cast<int>(why)].inc();
  e.failed_at_ms_.store(clock_.now_ms(), std::memory_order_relaxed);
  std::lock_guard lock(e.mu_);
  const uint32_t n = e.consecutive_failures_.load(std::memory_order_relaxed) + 1;
  e.consecutive_failures_.store(n, std::memory_order_relaxed);
  if (outlier_.enabled() && n >= outlier_.consecutive_failures &&
      e.state_.load(std::memory_order_relaxed) == EngineState::kHealthy) {
    eject(e, why);
  }
}

void Fleet::eject(Engine& e, Failure why) {
  size_t ejected = ejected_.load(std::memory_order_relaxed);
  do {
    if (ejected >= outlier_.max_ejected(roster_.active_count())) {
      e.ejections_capped_.inc();  // outliers must not empty the fleet: it keeps serving
      return;
    }
  } while (!ejected_.compare_exchange_weak(ejected, ejected + 1, std::memory_order_relaxed));
  const int64_t now = clock_.now_ms();
  // The backoff grows while ejections follow each other; a long healthy stretch forgets them.
  if (now - e.last_readmitted_ms_ > outlier_.max_ejection_ms) e.ejection_level_ = 0;
  const int64_t ms = outlier_.ejection_ms(e.ejection_level_);
  if (e.ejection_level_ < 62) ++e.ejection_level_;
  e.ejected_until_ms_.store(now + ms, std::memory_order_relaxed);
  e.ejections_.inc();
  // Probation: once back in service, its next failure ejects it again.
  e.consecutive_failures_.store(outlier_.consecutive_failures - 1, std::memory_order_relaxed);
  const std::string reason = std::string(failure_label(why)) + " for " + std::to_string(ms) + " ms";
  transition(e, EngineState::kEjected, "outlier", reason);
}

void Fleet::readmit_step(Engine& e, std::string_view source) {
  if (clock_.now_ms() < e.ejected_until_ms_.load(std::memory_order_relaxed)) {
    e.passes_ = 0;  // an ejection is served in full: probes start counting when it ends
    return;
  }
  if (++e.passes_ < readiness_.successes) return;
  if (readiness_.stable_ms == 0) {
    transition(e, EngineState::kHealthy, source, "passed");
  } else {
    e.warming_since_ms_ = clock_.now_ms();
    transition(e, EngineState::kWarming, source, "passed");
  }
}

void Fleet::on_probe_success(size_t i) {
  Engine& e = *engines_[i];
  e.probes_ok_.inc();
  std::lock_guard lock(e.mu_);
  const int64_t now = clock_.now_ms();
  switch (e.state_.load(std::memory_order_relaxed)) {
    case EngineState::kHealthy: return;
    case EngineState::kUnhealthy:
    case EngineState::kEjected: readmit_step(e, "probe"); return;
    case EngineState::kWarming:
      if (now - e.warming_since_ms_ >= readiness_.stable_ms) {
        transition(e, EngineState::kHealthy, "probe", "stable");
      }
      return;
  }
}

void Fleet::on_probe_failure(size_t i, ProbeFailure why) {
  probe_failure_one(i, why);
  // (as fence(): the other ranks' probes would find it next)
  if (why == ProbeFailure::kConnect) each_sibling_rank(i, [&](size_t j) { probe_failure_one(j, why); });
}

void Fleet::probe_failure_one(size_t i, ProbeFailure why) {
  Engine& e = *engines_[i];
  e.probe_failures_[static_cast<int>(why)].inc();
  std::lock_guard lock(e.mu_);
  if (e.state_.load(std::memory_order_relaxed) == EngineState::kHealthy) {
    bool starvable = why == ProbeFailure::kTimeout || why == ProbeFailure::kConnect;
    int64_t since = clock_.now_ms() - e.last_success_ms_.load(std::memory_order_acquire);
    if (starvable && since <= recent_success_ms_) {
      e.probe_suppressed_.inc();  // busy, not dead: it served successfully moments ago
      if (unresponsive_listener_) unresponsive_listener_(e.ordinal());  // or hung: the long waits move
      return;
    }
  }
  // A warming engine serves no traffic, so the recent-success rule cannot speak for it; an
  // ejected one whose probe fails is unhealthy as well (its ejection time still holds).
  const bool was_unhealthy = e.state_.load(std::memory_order_relaxed) == EngineState::kUnhealthy;
  transition(e, EngineState::kUnhealthy, "probe", probe_failure_label(why));
  // A probe that timed out once may have met a busy engine; twice in a row, a hung one.
  if ((why != ProbeFailure::kTimeout || was_unhealthy) && fence_listener_) fence_listener_(e.ordinal());
}

std::string Fleet::health_json() const {
  // One read of each state, so the counts and the replicas agree.
  // Vacant slots are not replicas; a leaving one is listed (its requests are finishing) but not
  // counted: the status is about the engines meant to serve.
  std::vector<EngineState> states(engines_.size());
  std::vector<net::SlotState> slots(engines_.size());
  size_t healthy = 0, warming = 0, ejected = 0, members = 0;
  for (size_t i = 0; i < engines_.size(); ++i) {
    slots[i] = roster_.state(i);
    states[i] = engines_[i]->state();
    if (slots[i] != net::SlotState::kActive) continue;
    ++members;
    healthy += states[i] == EngineState::kHealthy ? 1 : 0;
    warming += states[i] == EngineState::kWarming ? 1 : 0;
    ejected += states[i] == EngineState::kEjected ? 1 : 0;
  }
  const int64_t now = clock_.now_ms();
  const char* status = healthy == members && members > 0 ? "ok" : healthy > 0 ? "degraded" : "unhealthy";
  std::string out = R"({"status":")";
  out += status;
  out += R"(","admission_mode":"http","healthy_replicas":)" + std::to_string(healthy);
  out += R"(,"warming_replicas":)" + std::to_string(warming);
  out += R"(,"ejected_replicas":)" + std::to_string(ejected);
  out += R"(,"total_replicas":)" + std::to_string(members);
  out += R"(,"version":)" + build_info_json();  // which build answers: version, commit, build type
  out += R"(,"replicas":[)";
  bool first = true;
  for (size_t i = 0; i < engines_.size(); ++i) {
    const Engine& e = *engines_[i];
    if (slots[i] == net::SlotState::kVacant) continue;
    if (!first) out += ',';
    first = false;
    const bool leaving = slots[i] == net::SlotState::kLeaving;
    out += R"({"index":)" + std::to_string(i);
    out += R"(,"healthy":)";
    out += states[i] == EngineState::kHealthy && !leaving ? "true" : "false";
    if (leaving) out += R"(,"leaving":true)";
    out += R"(,"state":")";
    out += engine_state_label(states[i]);
    out += R"(","inflight":)" + std::to_string(e.inflight());
    out += R"(,"load_units":)" + std::to_string(e.load_units());
    out += R"(,"consecutive_failures":)" + std::to_string(e.consecutive_failures());
    out += R"(,"ejections":)" + std::to_string(e.ejections_.get());
    // Time left until probes may readmit it (an ejected engine, or one fenced while ejected).
    const int64_t left = e.ejected_until_ms_.load(std::memory_order_relaxed) - now;
    if (states[i] != EngineState::kHealthy && left > 0) out += R"(,"ejection_ms_left":)" + std::to_string(left);
    for (const ReplicaFlag& f : replica_flags_) out += ",\"" + f.name + "\":" + (f.read(i) ? "true" : "false");
    for (const ReplicaLabel& l : replica_labels_) out += ",\"" + l.name + "\":\"" + log::json_escape(l.read(i)) + "\"";
    for (const ReplicaNumber& f : replica_numbers_) {
      if (const std::optional<double> v = f.read(i); v && std::isfinite(*v)) out += fmt::format(",\"{}\":{:.3f}", f.name, *v);
    }
    out += "}";
  }
  out += "]}";
  return out;
}

namespace {

enum class F {
  kUp, kState, kReadmissions, kInflight, kLoadUnits, kProbeFailures, kProbeSuppressed, kFences,
  kFailures, kConsecutiveFailures, kEjections, kEjectionsCapped, kLastSuccess, kTlsHandshakes, kTlsFailures,
  kCount
};

using metrics::Family;
using metrics::MetricKind;

constexpr std::array<Family, static_cast<size_t>(F::kCount)> kFamilies = {{
    {"ramjet_upstream_up", MetricKind::kGauge, "upstream",
     "1 when the upstream is healthy, i.e. serving-eligible (ordinal label)."},
    {"ramjet_upstream_state", MetricKind::kGauge, "upstream,state",
     "1 for the upstream's health state (healthy, warming, unhealthy or ejected), 0 for the "
     "others."},
    {"ramjet_upstream_readmissions_total", MetricKind::kCounter, "upstream",
     "Upstreams readmitted to serving after being fenced (passed the readiness gate)."},
    {"ramjet_upstream_inflight", MetricKind::kGauge, "upstream", "Requests in flight per upstream."},
    {"ramjet_upstream_load_units", MetricKind::kGauge, "upstream", "Reserved load units per upstream."},
    {"ramjet_upstream_probe_failures_total", MetricKind::kCounter, "upstream,reason",
     "Failed health probes by reason: timeout, connect, protocol, http, response_too_large, tls "
     "(the TLS handshake with an https:// engine failed; ramjet_upstream_tls_failures_total says "
     "why)."},
    {"ramjet_upstream_probe_suppressed_total", MetricKind::kCounter, "upstream",
     "Probe failures not fenced because the upstream served within the recent-success window."},
    {"ramjet_upstream_fences_total", MetricKind::kCounter, "upstream,reason",
     "Upstreams fenced by the data plane because a connection could not be made, by reason: "
     "connect (refused, unreachable), timeout (RJ_UPSTREAM_CONNECT_TIMEOUT_MS), tls (handshake "
     "with an https:// engine failed)."},
    {"ramjet_upstream_failures_total", MetricKind::kCounter, "upstream,kind",
     "Request failures blamed on the upstream (outlier detection's evidence), by kind: "
     "status_5xx, dropped (closed before a response head), bad_response, timeout, cut (response "
     "ended early)."},
    {"ramjet_upstream_consecutive_failures", MetricKind::kGauge, "upstream",
     "Request failures in a row since the upstream's last success (RJ_OUTLIER_CONSECUTIVE_FAILURES "
     "of them eject it)."},
    {"ramjet_upstream_ejections_total", MetricKind::kCounter, "upstream",
     "Times the upstream was ejected from routing by outlier detection."},
    {"ramjet_upstream_ejections_capped_total", MetricKind::kCounter, "upstream",
     "Ejections not made because RJ_OUTLIER_MAX_EJECTION_PERCENT of the fleet was already "
     "ejected (the upstream kept serving)."},
    {"ramjet_last_upstream_success_timestamp_seconds", MetricKind::kGauge, "upstream",
     "Unix time of the upstream's last non-5xx response to a proxied request (0: none yet)."},
    {"ramjet_upstream_tls_handshakes_total", MetricKind::kCounter, "upstream,resumed",
     "Completed TLS handshakes with an https:// upstream (probes, scrapes and proxied requests), "
     "by whether a previous session was resumed (true) or a full handshake was made (false)."},
    {"ramjet_upstream_tls_failures_total", MetricKind::kCounter, "upstream,reason",
     "Failed TLS handshakes with an https:// upstream, by reason: untrusted (chain not verified "
     "against the CA store or RJ_UPSTREAM_TLS_CA_FILE), hostname (certificate not for the URL's "
     "host or IP), expired, not_yet_valid, handshake (anything else: protocol, a refused client "
     "certificate, a reset)."},
}};

const Family& fam(F f) { return kFamilies[static_cast<size_t>(f)]; }

}  // namespace

std::span<const metrics::Family> fleet_families() { return kFamilies; }

void Fleet::write_metrics(metrics::Exposition& x) const {
  auto each = [&](F f, auto value) {
    x.family(fam(f));
    for (const auto& e : engines_) x.sample(fam(f).name, "upstream=\"" + e->label() + "\"", value(*e));
  };
  each(F::kUp, [](const Engine& e) { return int64_t{e.healthy() ? 1 : 0}; });
  // One sample per (upstream, label value): label `key`, values label(0..count-1).
  auto by_label = [&](F f, std::string_view key, int count, auto label, auto value) {
    x.family(fam(f));
    for (const auto& e : engines_) {
      for (int r = 0; r < count; ++r) {
        x.sample(fam(f).name,
                 "upstream=\"" + e->label() + "\"," + std::string(key) + "=\"" + std::string(label(r)) + "\"",
                 value(*e, r));
      }
    }
  };
  x.family(fam(F::kState));
  for (const auto& e : engines_) {
    const EngineState now = e->state();  // one read: exactly one state is 1
    for (EngineState s : kStates) {
      x.sample(fam(F::kState).name,
               "upstream=\"" + e->label() + "\",state=\"" + std::string(engine_state_label(s)) + "\"",
               int64_t{now == s ? 1 : 0});
    }
  }
  each(F::kReadmissions, [](const Engine& e) { return e.readmissions_.get(); });
  each(F::kInflight, [](const Engine& e) { return e.inflight(); });
  each(F::kLoadUnits, [](const Engine& e) { return e.load_units(); });
  by_label(F::kProbeFailures, "reason", static_cast<int>(ProbeFailure::kCount),
           [](int r) { return probe_failure_label(static_cast<ProbeFailure>(r)); },
           [](const Engine& e, int r) { return e.probe_failures_[r].get(); });
  each(F::kProbeSuppressed, [](const Engine& e) { return e.probe_suppressed_.get(); });
  by_label(F::kFences, "reason", static_cast<int>(FenceReason::kCount),
           [](int r) { return fence_reason_label(static_cast<FenceReason>(r)); },
           [](const Engine& e, int r) { return e.fences_[r].get(); });
  by_label(F::kFailures, "kind", static_cast<int>(Failure::kCount),
           [](int r) { return failure_label(static_cast<Failure>(r)); },
           [](const Engine& e, int r) { return e.failures_[r].get(); });
  each(F::kConsecutiveFailures, [](const Engine& e) { return int64_t{e.consecutive_failures()}; });
  each(F::kEjections, [](const Engine& e) { return e.ejections_.get(); });
  each(F::kEjectionsCapped, [](const Engine& e) { return e.ejections_capped_.get(); });
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
  // https:// engines only (a plain one has no TLS to count).
  // (Vacant slots' samples are dropped by the registry's filter: app wires it to the roster.)
  const net::UpstreamTls* tls = nullptr;
  std::vector<std::shared_ptr<const net::Member>> members(engines_.size());
  for (size_t i = 0; i < engines_.size(); ++i) {
    members[i] = roster_.member(i);
    if (members[i] && members[i]->url.tls) tls = &net::UpstreamTls::instance();
  }
  x.family(fam(F::kTlsHandshakes));
  for (const auto& e : engines_) {
    const auto& m = members[e->ordinal()];
    if (!m || !m->url.tls) continue;
    const net::TlsTarget* t = tls->find(m->url.host, m->url.port);
    for (bool resumed : {false, true}) {
      x.sample(fam(F::kTlsHandshakes).name,
               "upstream=\"" + e->label() + "\",resumed=\"" + (resumed ? "true" : "false") + "\"",
               t ? t->handshakes(resumed) : uint64_t{0});
    }
  }
  x.family(fam(F::kTlsFailures));
  for (const auto& e : engines_) {
    const auto& m = members[e->ordinal()];
    if (!m || !m->url.tls) continue;
    const net::TlsTarget* t = tls->find(m->url.host, m->url.port);
    for (int r = 0; r < static_cast<int>(net::TlsFailure::kCount); ++r) {
      const auto f = static_cast<net::TlsFailure>(r);
      x.sample(fam(F::kTlsFailures).name,
               "upstream=\"" + e->label() + "\",reason=\"" + std::string(net::tls_failure_label(f)) + "\"",
               t ? t->failures(f) : uint64_t{0});
    }
  }
}

}  // namespace ramjet::upstream
