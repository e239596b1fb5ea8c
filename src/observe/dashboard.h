// observe/dashboard: the built-in dashboard's data (GET /ui on the metrics listener).
//
// A sampler reads ramjet's own counters and histograms, the fleet and the engine scrape once a
// second (`Reading`) and keeps ~15 minutes of per-second series in fixed rings (bounded memory,
// whatever the uptime), plus completion tokens per hour for the last 24 hours. Quantiles come
// from histogram *bucket deltas* over a 30 s window (per-stream decode tok/s p50/p05, TTFT p95,
// TPOT p95), rates from counter deltas. The JSON answers (state, series) are rendered on tick and
// by request under one mutex: the dashboard is observation-only and never on the request path.
//
// Pure pieces (quantiles, rates, rings, the hour strip) are free functions / small classes below
// so they are unit-tested with injected values and clocks (dashboard_test.cc).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "upstream/engine_stats.h"

namespace ramjet::observe {

inline constexpr float kNoValue = std::numeric_limits<float>::quiet_NaN();

// ---------------------------------------------------------------------------- pure math

// Cumulative counts of a fixed-bucket histogram at one instant: counts[i] observations fell in
// bucket i (upper bound bounds[i]); `total` includes the overflow (+Inf) bucket.
struct BucketCounts {
  std::vector<uint64_t> counts;
  uint64_t total = 0;
};

// `now - then` per bucket (a counter that went backwards — a restart — counts as 0).
BucketCounts bucket_delta(const BucketCounts& now, const BucketCounts& then);

// The q-quantile (0..1) of the observations in `b`, interpolated linearly inside the bucket that
// holds the rank, as Prometheus' histogram_quantile does: the first bucket spans [0, bounds[0]],
// a rank in the overflow bucket answers the highest finite bound. nullopt when `b` is empty.
std::optional<double> bucket_quantile(const std::vector<double>& bounds, const BucketCounts& b, double q);

// Per-second rate of a counter between two readings `dt_ms` apart (nullopt for dt <= 0; a counter
// that went backwards gives 0).
std::optional<double> counter_rate(uint64_t now, uint64_t then, int64_t dt_ms);

// A fixed-capacity ring: push() overwrites the oldest element once full.
template <typename T>
class Ring {
 public:
  explicit Ring(size_t capacity) : buf_(capacity ? capacity : 1) {}
  void push(T v) {
    buf_[head_] = std::move(v);
    head_ = (head_ + 1) % buf_.size();
    if (size_ < buf_.size()) ++size_;
  }
  size_t size() const { return size_; }
  size_t capacity() const { return buf_.size(); }
  bool empty() const { return size_ == 0; }
  // i = 0 is the oldest element kept, size() - 1 the newest.
  const T& at(size_t i) const { return buf_[(head_ + buf_.size() - size_ + i) % buf_.size()]; }
  T& at(size_t i) { return buf_[(head_ + buf_.size() - size_ + i) % buf_.size()]; }
  const T& back() const { return at(size_ - 1); }
  // The element `ago` pushes before the newest (0 = newest); nullptr when not kept.
  const T* ago(size_t ago) const { return ago < size_ ? &at(size_ - 1 - ago) : nullptr; }
  void clear() { head_ = size_ = 0; }

 private:
  std::vector<T> buf_;
  size_t head_ = 0;
  size_t size_ = 0;
};

// Completion tokens per wall-clock hour for the last `hours` hours (hour buckets by unix time).
class HourStrip {
 public:
  explicit HourStrip(size_t hours = 24) : hours_(hours ? hours : 1) {}
  void add(int64_t unix_ms, uint64_t tokens);
  struct Bucket {
    int64_t hour_start_ms = 0;
    uint64_t tokens = 0;
  };
  // Exactly `hours` buckets ending with the hour holding `now_unix_ms`, oldest first (hours
  // with no tokens are 0).
  std::vector<Bucket> buckets(int64_t now_unix_ms) const;

 private:
  size_t hours_;
  std::vector<Bucket> kept_;  // at most hours_, in hour order
};

// ---------------------------------------------------------------------------- readings

// One engine (upstream ordinal) at one instant.
struct EngineReading {
  std::string profile;  // none|mtp|standard
  std::string state;    // healthy|warming|unhealthy|ejected, leaving (out of the fleet, finishing), vacant (no engine)
  int64_t inflight = 0;
  int64_t load_units = 0;
  uint64_t routed = 0;             // cumulative decisions that chose it (request rate)
  uint64_t fail_open_dispatches = 0;  // cumulative
  std::optional<upstream::EngineSample> scrape;  // the latest engine scrape, when a scraper runs
  // Its KV-event index (cache/events' trust state): trusted|replaying|fenced, or none when it
  // publishes no KV events while others do. Empty when no engine publishes them (nothing to show).
  // Exact routing answers only while every healthy engine's index is trusted.
  std::string kv_index;
  // Where that index comes from: events (its own KV events), companion (a ramjet-companion's
  // snapshot and tail) or none; empty when kv_index is.
  std::string kv_source;
  // Its exact trust is withdrawn: its predictions kept missing its own cached-token reports
  // (request/route/prediction_check.h); exact routing falls back as for an untrusted index.
  bool exact_withdrawn = false;
  // The base models it serves ("llama, qwen"; empty while its list is not known).
  std::string models;
  // Its idle-drain state (upstream/parking.h): warm|draining|drained|waking|failed; empty when the
  // idle drain is off. A parked engine is in health but out of placement.
  std::string idle_drain;
};

// Everything one tick reads. Counters are cumulative; the dashboard takes the deltas.
struct Reading {
  int64_t unix_ms = 0;
  uint64_t completion_tokens = 0, prompt_tokens = 0, cached_prompt_tokens = 0;
  uint64_t requests = 0;  // completed inference requests (all codes)
  BucketCounts ttft, decode_rate, tpot;  // tpot empty when not measured
  int64_t inflight = 0;
  int64_t waiting = -1;  // requests in the waiting room (RJ_ADMISSION_*); -1: no waiting room
  bool fail_open = false;
  std::vector<EngineReading> engines;
  std::vector<upstream::GpuSample> gpus;
};

struct DashboardConfig {
  size_t series_seconds = 900;  // per-second ring length (15 min)
  int64_t window_s = 30;        // quantile / mean window
  size_t hours = 24;            // tokens-per-hour strip
  size_t max_sse_clients = 16;
  std::vector<double> ttft_bounds, decode_bounds, tpot_bounds;
};

// ---------------------------------------------------------------------------- the dashboard

class Dashboard {
 public:
  explicit Dashboard(DashboardConfig config);

  // One sample (the sampler calls this once a second). Readings must not go back in time.
  void tick(const Reading& r);

  // GET /api/v1/state: the newest snapshot (tiles, engines, gpus, the newest series point).
  // Rendered once per tick; shared so SSE clients do not re-render it.
  std::shared_ptr<const std::string> state_json() const;
  // GET /api/v1/series?window=s: the per-second rings (last `window_s` seconds) + the hour strip.
  std::string series_json(int64_t window_s) const;
  uint64_t ticks() const;

  // SSE clients (bounded): a client registers a wake-up callback, called (from the sampler's
  // thread, never under the dashboard's lock) after every tick and once on stop(). nullopt when
  // max_sse_clients are connected or the dashboard is stopped. remove_client() when it ends.
  std::optional<uint64_t> add_client(std::function<void()> wake);
  void remove_client(uint64_t id);
  size_t clients() const;
  size_t max_clients() const { return config_.max_sse_clients; }
  // Shutdown: clients end their streams (the wake-ups tell them), no new client is admitted.
  void stop();
  bool stopped() const;

  const DashboardConfig& config() const { return config_; }

  // The numbers one tick derives (exposed for tests).
  struct Point {
    int64_t t = 0;  // unix ms
    float gen_tps = kNoValue;       // completion tokens/s over the last second
    float gen_tps_30s = kNoValue;   // ... over the window
    float prompt_tps = kNoValue;
    float stream_p50 = kNoValue, stream_p05 = kNoValue;  // per-stream decode tok/s (window)
    float ttft_p50 = kNoValue, ttft_p95 = kNoValue;      // seconds (window)
    float tpot_p95 = kNoValue;                           // seconds (window)
    float inflight = kNoValue;
    float req_rate = kNoValue;           // completed requests/s (window)
    float cache_hit_lb = kNoValue;       // % cached/prompt tokens (window, ramjet view)
    float cache_hit_engine = kNoValue;   // % prefix hits/queries (window, engines' view)
    float kv_usage = kNoValue;           // mean over engines reporting it, 0..1
  };
  struct EnginePoint {
    float running = kNoValue, waiting = kNoValue, kv_usage = kNoValue;
    float req_rate = kNoValue;    // routed/s (window 5 s)
    float inflight = kNoValue, load_units = kNoValue;
    float cache_hit = kNoValue;   // % engine prefix hits/queries (window)
    float gen_tps = kNoValue;     // engine generation tokens/s (window 5 s)
  };
  struct GpuPoint {
    float util = kNoValue, power = kNoValue;
  };
  Point latest() const;

 private:
  void render_state_locked(const Reading& r);

  DashboardConfig config_;
  mutable std::mutex mu_;
  Ring<Reading> readings_;  // the last window_s + 1 readings, for deltas
  Ring<Point> points_;
  std::vector<Ring<EnginePoint>> engine_points_;
  std::vector<std::string> gpu_keys_;  // "engine/device", in first-seen order
  std::vector<Ring<GpuPoint>> gpu_points_;
  HourStrip hours_;
  uint64_t ticks_ = 0;
  std::shared_ptr<const std::string> state_;
  std::vector<std::pair<uint64_t, std::function<void()>>> clients_;
  uint64_t next_client_ = 0;
  bool stopped_ = false;
  void wake_all();
};

// Reads the live objects into a Reading (the app wires the providers). Kept as plain callables
// so the dashboard does not depend on the data plane.
struct DashboardSources {
  std::function<void(Reading&)> ramjet;                     // counters, histograms, inflight, fail-open
  std::function<void(Reading&)> fleet;                      // engines: profile, state, load, routed
  std::function<std::vector<upstream::EngineSample>()> engine_samples;  // optional (EngineScraper::engines)
  std::function<std::vector<upstream::GpuSample>()> gpu_samples;        // optional (EngineScraper::gpus)
  // Optional, set when an engine publishes KV events: engine i's KV-event index state
  // (EngineReading::kv_index; cache/events' KvFleet through app/admin.cc).
  std::function<std::string_view(size_t)> kv_index;
  // With kv_index: where engine i's index comes from (EngineReading::kv_source).
  std::function<std::string_view(size_t)> kv_source;
  // Optional, set when exact placements are checked: whether engine i's exact trust is withdrawn.
  std::function<bool(size_t)> exact_withdrawn;
  // Optional: the base models engine i serves (upstream/model_pools.h).
  std::function<std::string(size_t)> models;
  // Optional, with the idle drain on: engine i's idle-drain state (EngineReading::idle_drain).
  std::function<std::string_view(size_t)> idle_drain;
};
Reading read_sources(const DashboardSources& s, int64_t unix_ms);

}  // namespace ramjet::observe
