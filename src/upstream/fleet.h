// upstream/fleet: the engine registry and each engine's health state (active probe results,
// passive fencing, the recent-success rule), its live load, and /health JSON.
// Probing itself (I/O) is in probe.h; routing reads snapshots; reservations live in route/.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "config/config.h"
#include "observe/metrics.h"

namespace ramjet::upstream {

enum class ProbeFailure { kTimeout, kConnect, kProtocol, kHttp, kTooLarge, kCount };
std::string_view probe_failure_label(ProbeFailure f);

// Why an engine was fenced by the data plane.
enum class FenceReason { kConnect, kTimeout, kProtocol, kRetryableStatus, kCount };
std::string_view fence_reason_label(FenceReason f);

class Engine {
 public:
  Engine(size_t ordinal, config::UpstreamUrl url);

  size_t ordinal() const { return ordinal_; }
  const std::string& label() const { return label_; }  // opaque ordinal, "0", "1", ...
  const config::UpstreamUrl& url() const { return url_; }

  bool healthy() const { return healthy_.load(std::memory_order_acquire); }
  int64_t inflight() const { return inflight_.get(); }
  int64_t load_units() const { return load_units_.get(); }

  // Reservation bookkeeping (route::LoadReservation is the only caller).
  void add_load(int64_t requests, int64_t units) {
    inflight_.add(requests);
    load_units_.add(units);
  }

 private:
  friend class Fleet;
  size_t ordinal_;
  std::string label_;
  config::UpstreamUrl url_;
  std::atomic<bool> healthy_{true};
  std::atomic<int64_t> last_success_ms_{INT64_MIN / 2};
  observe::Gauge inflight_;
  observe::Gauge load_units_;
  observe::Counter probe_failures_[static_cast<int>(ProbeFailure::kCount)];
  observe::Counter probe_suppressed_;
  observe::Counter fences_[static_cast<int>(FenceReason::kCount)];
  observe::Counter probes_ok_;
};

class Fleet {
 public:
  Fleet(const std::vector<config::UpstreamUrl>& urls, const Clock& clock, int64_t recent_success_ms);

  size_t size() const { return engines_.size(); }
  Engine& at(size_t i) { return *engines_[i]; }
  const Engine& at(size_t i) const { return *engines_[i]; }
  size_t healthy_count() const;

  // Passive signals from the data plane.
  void on_response(size_t i, unsigned status);  // a non-5xx answer is liveness: healthy again
  void fence(size_t i, FenceReason why);

  // Active probe results. A timeout/connect failure does not fence an engine that answered a
  // non-5xx response within the recent-success window; it is counted as suppressed instead.
  void on_probe_success(size_t i);
  void on_probe_failure(size_t i, ProbeFailure why);

  // /health JSON (reference §6.4): status ok|degraded|unhealthy, opaque ordinals, no hosts.
  std::string health_json() const;
  void write_metrics(observe::Exposition& e) const;

 private:
  void set_healthy(size_t i, bool healthy, std::string_view why);
  const Clock& clock_;
  int64_t recent_success_ms_;
  std::vector<std::unique_ptr<Engine>> engines_;
};

}  // namespace ramjet::upstream
