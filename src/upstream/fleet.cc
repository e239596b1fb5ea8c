#include "upstream/fleet.h"

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

Engine::Engine(size_t ordinal, config::UpstreamUrl url)
    : ordinal_(ordinal), label_(std::to_string(ordinal)), url_(std::move(url)) {}

Fleet::Fleet(const std::vector<config::UpstreamUrl>& urls, const Clock& clock,
             int64_t recent_success_ms)
    : clock_(clock), recent_success_ms_(recent_success_ms) {
  engines_.reserve(urls.size());
  for (size_t i = 0; i < urls.size(); ++i) engines_.push_back(std::make_unique<Engine>(i, urls[i]));
}

size_t Fleet::healthy_count() const {
  size_t n = 0;
  for (const auto& e : engines_) n += e->healthy() ? 1 : 0;
  return n;
}

void Fleet::set_healthy(size_t i, bool healthy, std::string_view why) {
  bool was = engines_[i]->healthy_.exchange(healthy, std::memory_order_acq_rel);
  if (was != healthy) {
    spdlog::info("upstream {} {} ({})", i, healthy ? "healthy" : "fenced", why);
  }
}

void Fleet::on_response(size_t i, unsigned status) {
  if (status >= 500) return;  // 5xx never counts as liveness
  engines_[i]->last_success_ms_.store(clock_.now_ms(), std::memory_order_release);
  set_healthy(i, true, "response");
}

void Fleet::fence(size_t i, FenceReason why) {
  engines_[i]->fences_[static_cast<int>(why)].inc();
  set_healthy(i, false, fence_reason_label(why));
}

void Fleet::on_probe_success(size_t i) {
  engines_[i]->probes_ok_.inc();
  set_healthy(i, true, "probe");
}

void Fleet::on_probe_failure(size_t i, ProbeFailure why) {
  Engine& e = *engines_[i];
  e.probe_failures_[static_cast<int>(why)].inc();
  bool starvable = why == ProbeFailure::kTimeout || why == ProbeFailure::kConnect;
  int64_t since = clock_.now_ms() - e.last_success_ms_.load(std::memory_order_acquire);
  if (starvable && since <= recent_success_ms_) {
    e.probe_suppressed_.inc();  // busy, not dead: it served successfully moments ago
    return;
  }
  set_healthy(i, false, probe_failure_label(why));
}

std::string Fleet::health_json() const {
  size_t healthy = healthy_count();
  const char* status = healthy == engines_.size() ? "ok" : healthy > 0 ? "degraded" : "unhealthy";
  std::string out = R"({"status":")";
  out += status;
  out += R"(","admission_mode":"http","healthy_replicas":)" + std::to_string(healthy);
  out += R"(,"total_replicas":)" + std::to_string(engines_.size()) + R"(,"replicas":[)";
  for (size_t i = 0; i < engines_.size(); ++i) {
    const Engine& e = *engines_[i];
    if (i) out += ',';
    out += R"({"index":)" + std::to_string(i);
    out += R"(,"healthy":)";
    out += e.healthy() ? "true" : "false";
    out += R"(,"inflight":)" + std::to_string(e.inflight());
    out += R"(,"load_units":)" + std::to_string(e.load_units()) + "}";
  }
  out += "]}";
  return out;
}

void Fleet::write_metrics(observe::Exposition& x) const {
  auto each = [&](std::string_view name, std::string_view type, std::string_view help, auto value) {
    x.family(name, type, help);
    for (const auto& e : engines_) x.sample(name, "upstream=\"" + e->label() + "\"", value(*e));
  };
  each("ramjet_upstream_up", "gauge", "1 when the upstream is healthy (ordinal label).",
       [](const Engine& e) { return int64_t{e.healthy() ? 1 : 0}; });
  each("ramjet_upstream_inflight", "gauge", "Requests in flight per upstream.",
       [](const Engine& e) { return e.inflight(); });
  each("ramjet_upstream_load_units", "gauge", "Reserved load units per upstream.",
       [](const Engine& e) { return e.load_units(); });
  x.family("ramjet_upstream_probe_failures_total", "counter", "Failed health probes by reason.");
  for (const auto& e : engines_) {
    for (int r = 0; r < static_cast<int>(ProbeFailure::kCount); ++r) {
      x.sample("ramjet_upstream_probe_failures_total",
               "upstream=\"" + e->label() + "\",reason=\"" +
                   std::string(probe_failure_label(static_cast<ProbeFailure>(r))) + "\"",
               e->probe_failures_[r].get());
    }
  }
  each("ramjet_upstream_probe_suppressed_total", "counter",
       "Probe failures not fenced because the upstream served within the recent-success window.",
       [](const Engine& e) { return e.probe_suppressed_.get(); });
  x.family("ramjet_upstream_fences_total", "counter", "Upstreams fenced by the data plane, by reason.");
  for (const auto& e : engines_) {
    for (int r = 0; r < static_cast<int>(FenceReason::kCount); ++r) {
      x.sample("ramjet_upstream_fences_total",
               "upstream=\"" + e->label() + "\",reason=\"" +
                   std::string(fence_reason_label(static_cast<FenceReason>(r))) + "\"",
               e->fences_[r].get());
    }
  }
}

}  // namespace ramjet::upstream
