// observe/metrics: lock-free counters and gauges plus a Prometheus text (0.0.4) writer.
// Components own their metric structs and register a writer; rendering only reads atomics,
// so the request path never takes a lock. Label values are closed sets or opaque ordinals.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace ramjet::metrics {

// RAMJET_METRICS_OFF (CMake option, benchmarks only): counter increments and histogram
// observations compile to nothing, so bench/metrics_cost.sh can compare a build with and without
// the request path's metric updates. Gauges stay: load and in-flight gauges are routing and
// drain state, not only metrics.
class Counter {
 public:
#ifdef RAMJET_METRICS_OFF
  void inc(uint64_t = 1) {}
#else
  void inc(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
#endif
  uint64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

class Gauge {
 public:
  void add(int64_t n) { v_.fetch_add(n, std::memory_order_relaxed); }
  void sub(int64_t n) { v_.fetch_sub(n, std::memory_order_relaxed); }
  void set(int64_t n) { v_.store(n, std::memory_order_relaxed); }
  int64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

enum class MetricKind : uint8_t { kCounter, kGauge, kHistogram };
std::string_view metric_kind_name(MetricKind k);  // counter|gauge|histogram

// One metric family as declared: every component lists its families in one constexpr table,
// its writer takes names and headers from that table, and docs/metrics.md is generated from the
// tables (observe/metric_docs.h).
struct Family {
  std::string_view name;
  MetricKind kind = MetricKind::kCounter;
  std::string_view labels;  // label names, comma-separated ("" for none; histograms: without le)
  std::string_view help;    // one sentence or two; closed label values are named here
};

// A label value as the text exposition writes it between quotes: \ " and newline escaped.
std::string escape_label_value(std::string_view v);

// Builds Prometheus text exposition. Families are written whole: header, then samples.
class Exposition {
 public:
  // type: counter|gauge
  void family(std::string_view name, std::string_view type, std::string_view help);
  void family(const Family& f) { family(f.name, metric_kind_name(f.kind), f.help); }
  // labels: already-formatted `k="v",k2="v2"` (may be empty).
  void sample(std::string_view name, std::string_view labels, double value);
  void sample(std::string_view name, std::string_view labels, uint64_t value);
  void sample(std::string_view name, std::string_view labels, int64_t value);
  std::string take() { return std::move(out_); }
  // Drops every sample whose `upstream` label names an ordinal `visible` rejects: the vacant
  // slots of a fleet whose engines come and go (net/roster.h) have no series.
  void set_upstream_filter(std::function<bool(size_t)> visible) { upstream_visible_ = std::move(visible); }

 private:
  bool hidden(std::string_view labels) const;
  void prefix(std::string_view name, std::string_view labels);
  std::string out_;
  std::function<bool(size_t)> upstream_visible_;
};

// A registry of writers. add() is called at startup; render() from the metrics listener. Every
// rendering starts with ramjet_build_info (metrics/build_metrics.h).
class Registry {
 public:
  using Writer = std::function<void(Exposition&)>;
  void add(Writer w);
  std::string render() const;
  void set_upstream_filter(std::function<bool(size_t)> visible);  // Exposition::set_upstream_filter

 private:
  mutable std::mutex mu_;  // guards the writer list (startup and scrape only)
  std::vector<Writer> writers_;
  std::function<bool(size_t)> upstream_visible_;
};

}  // namespace ramjet::metrics
