// upstream/fleet: the engine registry and each engine's health state (active probe results,
// passive fencing, the recent-success rule, the readiness gate, outlier ejection), its live load,
// and /health JSON. Probing itself (I/O) is in probe.h; the ejection arithmetic in outlier.h;
// routing reads snapshots; reservations live in route/.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "config/config.h"
#include "metrics/metrics.h"
#include "net/roster.h"
#include "upstream/outlier.h"

namespace ramjet::upstream {

// The families Fleet::write_metrics writes (ramjet_upstream_*; docs/metrics.md).
std::span<const metrics::Family> fleet_families();

enum class ProbeFailure { kTimeout, kConnect, kProtocol, kHttp, kTooLarge, kTls, kCount };
std::string_view probe_failure_label(ProbeFailure f);

// Why an engine was fenced by the data plane: a connection to it could not be made (refused,
// unreachable, or not established within RJ_UPSTREAM_CONNECT_TIMEOUT_MS). Nothing a request
// contains can cause either, so one is enough; failures after the request was sent count
// towards outlier ejection instead (Fleet::on_failure).
enum class FenceReason { kConnect, kTimeout, kTls, kCount };
std::string_view fence_reason_label(FenceReason f);

// An engine's health state. Only kHealthy is serving-eligible. A fenced (unhealthy) engine must
// pass the readiness gate before it is healthy again: `successes` consecutive passing probes
// make it kWarming; it becomes kHealthy on the first passing probe at least `stable_ms` after the
// last of those, with no failure in between. Reachable is not the same as ready. An ejected
// engine (outlier.h) answers its probes but failed its requests: probes count towards the gate
// only once its ejection time is over.
enum class EngineState { kHealthy, kWarming, kUnhealthy, kEjected };
std::string_view engine_state_label(EngineState s);

struct Readiness {
  uint32_t successes = 3;     // RJ_READY_SUCCESSES (0 is treated as 1)
  int64_t stable_ms = 30000;  // RJ_READY_STABLE_SECONDS * 1000
  // successes <= 1 and stable_ms == 0: one passing probe or one non-5xx response readmits
  // (the reference behaviour).
  bool gated() const { return successes > 1 || stable_ms > 0; }
};

class Engine {
 public:
  explicit Engine(size_t ordinal);

  size_t ordinal() const { return ordinal_; }
  const std::string& label() const { return label_; }  // opaque ordinal, "0", "1", ...

  // Serving-eligible (routing reads this): an active member (net/roster.h: not vacant, not
  // leaving), not parked, whose state() is kHealthy.
  bool healthy() const { return member() && !parked() && state() == EngineState::kHealthy; }
  bool member() const { return member_.load(std::memory_order_acquire); }
  // Out of placement by the idle drain (upstream/parking.h): draining, asleep, waking or failed
  // to wake. Separate from health: a parked engine is not a candidate at all, not even to fail
  // open to (a sleeping vLLM queues a request and never answers it until woken).
  bool parked() const { return parked_.load(std::memory_order_acquire); }
  // Requests ever dispatched to it (the idle drain's sign of activity).
  uint64_t dispatches() const { return dispatches_.load(std::memory_order_relaxed); }
  EngineState state() const { return state_.load(std::memory_order_acquire); }
  int64_t inflight() const { return inflight_.get(); }
  int64_t load_units() const { return load_units_.get(); }
  // Its last two or more requests failed, the last less than `penalty_ms` before `now_ms`
  // (routing must not prefer it for looking idle; one stray error does not count).
  bool failing(int64_t now_ms, int64_t penalty_ms) const {
    const int64_t at = failed_at_ms_.load(std::memory_order_relaxed);
    // (penalty_ms > 0: `now_ms` may be the coarse clock's, a tick behind the failure's stamp)
    return penalty_ms > 0 && at != kNever && now_ms - at < penalty_ms && consecutive_failures() >= 2;
  }
  uint32_t consecutive_failures() const { return consecutive_failures_.load(std::memory_order_relaxed); }

  // Reservation bookkeeping (route::LoadReservation is the only caller).
  void add_load(int64_t requests, int64_t units) {
    if (requests > 0) dispatches_.fetch_add(1, std::memory_order_relaxed);
    inflight_.add(requests);
    load_units_.add(units);
  }

 private:
  friend class Fleet;
  size_t ordinal_;
  std::string label_;
  std::atomic<bool> member_{false};  // the roster's slot is active (Fleet::join / leave)
  std::atomic<bool> parked_{false};  // Fleet::set_parked (the idle drain)
  std::atomic<uint64_t> dispatches_{0};
  std::atomic<EngineState> state_{EngineState::kHealthy};
  std::mutex mu_;                 // serialises state transitions and the fields below
  uint32_t passes_ = 0;           // consecutive passing probes while not healthy
  int64_t warming_since_ms_ = 0;  // when the gate's success count was reached
  std::atomic<int64_t> last_success_ms_{INT64_MIN / 2};
  // Outlier detection (outlier.h). The counters are atomics so the success path stays lock-free.
  static constexpr int64_t kNever = INT64_MIN / 2;
  std::atomic<uint32_t> consecutive_failures_{0};
  std::atomic<int64_t> failed_at_ms_{kNever};  // the last failure; kNever once it succeeded
  std::atomic<int64_t> ejected_until_ms_{INT64_MIN / 2};  // probes readmit only after this
  uint32_t ejection_level_ = 0;                            // ejections in a row (backoff)
  int64_t last_readmitted_ms_ = INT64_MIN / 2;             // when it last became healthy
  metrics::Counter failures_[static_cast<int>(Failure::kCount)];
  metrics::Counter ejections_;
  metrics::Counter ejections_capped_;  // ejections the max-ejection share did not allow
  metrics::Gauge inflight_;
  metrics::Gauge load_units_;
  metrics::Counter probe_failures_[static_cast<int>(ProbeFailure::kCount)];
  metrics::Counter probe_suppressed_;
  metrics::Counter fences_[static_cast<int>(FenceReason::kCount)];
  metrics::Counter probes_ok_;
  metrics::Counter readmissions_;  // transitions into kHealthy from warming or unhealthy
};

class Fleet {
 public:
  // One Engine per roster slot; the roster's active slots are members, starting healthy (the
  // static RJ_UPSTREAM list, as ramjet always has); engines joining later start fenced.
  Fleet(const net::Roster& roster, const Clock& clock, int64_t recent_success_ms, Readiness readiness = {},
        OutlierConfig outlier = {});
  // A fixed fleet of these engines (a roster of its own, no spare slots).
  Fleet(const std::vector<config::UpstreamUrl>& urls, const Clock& clock, int64_t recent_success_ms,
        Readiness readiness = {}, OutlierConfig outlier = {});

  // Slots, not engines: a vacant or leaving slot is never serving-eligible (Engine::member).
  size_t size() const { return engines_.size(); }
  const net::Roster& roster() const { return roster_; }
  // The engine now in slot i: its address (nullptr when vacant).
  std::shared_ptr<const net::Member> member(size_t i) const { return roster_.member(i); }
  // Membership (upstream/membership.h, after the roster changed): a joining engine starts fenced
  // with a fresh health record and must pass the readiness gate; a leaving one is out of
  // routing at once (its requests in flight finish); a vacated one drops its ejection.
  void join(size_t i);
  void leave(size_t i);
  void rejoin(size_t i);
  void vacate(size_t i);
  // The idle drain takes engine i out of placement (true) or gives it back (false).
  void set_parked(size_t i, bool parked) { engines_[i]->parked_.store(parked, std::memory_order_release); }
  Engine& at(size_t i) { return *engines_[i]; }
  const Engine& at(size_t i) const { return *engines_[i]; }
  size_t healthy_count() const;  // engines in health (parked ones count: parking is not ill health)
  size_t ejected_count() const { return ejected_.load(std::memory_order_relaxed); }
  // Engine i's last requests failed recently (Engine::failing on the fleet's clock). `now_ms`
  // lets a caller asking about every engine read the clock once.
  bool failing(size_t i, int64_t now_ms) const { return engines_[i]->failing(now_ms, outlier_.penalty_ms); }
  bool failing(size_t i) const { return failing(i, clock_.now_ms()); }
  int64_t now_ms() const { return clock_.now_ms(); }
  int64_t coarse_now_ms() const { return clock_.coarse_now_ms(); }
  const Readiness& readiness() const { return readiness_; }

  // Passive signals from the data plane. A non-5xx response head is liveness for the
  // recent-success rule; it readmits a fenced engine only when the readiness gate is off (with
  // the gate on, only probes readmit: a fail-open dispatch must not bypass the gate). A 5xx head
  // is a kStatus5xx failure. on_success() is an exchange that completed (its response ended
  // normally, whatever its status below 500): it ends a run of failures. A response that is cut
  // or times out after its head is a failure instead (so streams that die mid-way add up).
  // fence() makes any state unhealthy and restarts the gate.
  void on_response(size_t i, unsigned status);
  void on_success(size_t i);
  void fence(size_t i, FenceReason why);
  // A request failure that is the engine's (request/stream has ruled out the request itself).
  // `consecutive_failures` of them in a row eject a healthy engine, if the max-ejection share
  // allows; while it is not allowed the engine stays in service (and keeps counting).
  void on_failure(size_t i, Failure why);
  // Told (on the calling thread, under the engine's lock: it must not block or call back into
  // the fleet) when an engine is known not to answer: it was fenced for a failure that leaves no
  // doubt (refused connections; a probe answered 5xx or garbage), or a probe timed out while it
  // was already fenced (unresponsive for a whole probe interval: hung, not merely busy). The data
  // plane moves the requests still waiting for that engine's first byte elsewhere. Set before
  // serving.
  void set_fence_listener(std::function<void(size_t)> f) { fence_listener_ = std::move(f); }
  // Called (on the prober's thread, under the engine's lock) when a probe of a healthy engine
  // timed out or was refused but the recent-success grace kept it in service: the data plane
  // moves the requests that have waited for its first byte past their own budget (a hung engine
  // must not hold them until the grace runs out). Set before serving.
  void set_unresponsive_listener(std::function<void(size_t)> f) { unresponsive_listener_ = std::move(f); }

  // Active probe results. A timeout/connect failure does not fence a healthy engine that
  // answered a non-5xx response within the recent-success window; it is counted as suppressed
  // instead. A warming engine serves no traffic, so any failure sends it back to unhealthy.
  // A refused connection (fence kConnect, probe kConnect) counts for every data-parallel rank of
  // the same engine (the slots with its address, net::Roster::siblings).
  void on_probe_success(size_t i);
  void on_probe_failure(size_t i, ProbeFailure why);

  // /health JSON (the shape ramjet 0.4.0 answers; README.md shows it): status
  // ok|degraded|unhealthy (counting serving-eligible engines only), per-replica state
  // healthy|warming|unhealthy, opaque ordinals, no hosts.
  std::string health_json() const;
  // Extra boolean fields per /health replica entry from other components (e.g.
  // "tokenizer_attested"): name and a thread-safe reader. Set before serving.
  struct ReplicaFlag {
    std::string name;
    std::function<bool(size_t)> read;
  };
  void add_replica_flag(ReplicaFlag flag) { replica_flags_.push_back(std::move(flag)); }
  // Extra string fields the same way (e.g. "inventory": events|companion|none); values are
  // JSON-escaped.
  struct ReplicaLabel {
    std::string name;
    std::function<std::string_view(size_t)> read;
  };
  void add_replica_label(ReplicaLabel label) { replica_labels_.push_back(std::move(label)); }
  // Extra number fields the same way (e.g. "kv_untrusted_seconds"); nullopt leaves the field out.
  struct ReplicaNumber {
    std::string name;
    std::function<std::optional<double>(size_t)> read;
  };
  void add_replica_number(ReplicaNumber number) { replica_numbers_.push_back(std::move(number)); }
  void write_metrics(metrics::Exposition& e) const;

 private:
  void init();  // both constructors: one Engine per slot
  // fence() and on_probe_failure() for slot i alone (the public ones add its sibling ranks).
  void fence_one(size_t i, FenceReason why);
  void probe_failure_one(size_t i, ProbeFailure why);
  // f(j) for every active slot holding another data-parallel rank of slot i's engine.
  template <class F>
  void each_sibling_rank(size_t i, F f) {
    for (size_t j : roster_.siblings(i)) {
      if (j < engines_.size() && roster_.active(j)) f(j);
    }
  }
  // Moves e to `to` (the caller holds e.mu_) and logs the change by ordinal, never by host.
  void transition(Engine& e, EngineState to, std::string_view source, std::string_view reason = {});
  // Ejects e (the caller holds e.mu_) when the max-ejection share allows it.
  void eject(Engine& e, Failure why);
  // A passing probe or (gate off) response for an unhealthy or ejected engine.
  void readmit_step(Engine& e, std::string_view source);
  std::unique_ptr<net::Roster> own_roster_;  // the fixed-fleet constructor's
  const net::Roster& roster_;
  const Clock& clock_;
  int64_t recent_success_ms_;
  Readiness readiness_;
  OutlierConfig outlier_;
  std::atomic<size_t> ejected_{0};
  std::function<void(size_t)> fence_listener_;
  std::function<void(size_t)> unresponsive_listener_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<ReplicaFlag> replica_flags_;
  std::vector<ReplicaNumber> replica_numbers_;
  std::vector<ReplicaLabel> replica_labels_;
};

}  // namespace ramjet::upstream
