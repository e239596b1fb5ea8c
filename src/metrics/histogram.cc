#include "metrics/histogram.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace ramjet::metrics {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i] = 0;
}

void Histogram::observe(double v) {
#ifdef RAMJET_METRICS_OFF
  return;
#endif
  // NaN and negatives count as 0; huge values (and +Inf) land in the +Inf bucket, and the sum in
  // millionths stays far from overflowing.
  if (!(v >= 0)) v = 0;
  if (v > 1e12) v = 1e12;
  // A linear scan: bounds are few (at most ~20) and most observations land in low buckets.
  const double* b = bounds_.data();
  const size_t n = bounds_.size();
  size_t i = 0;
  while (i < n && b[i] < v) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_micro_.fetch_add(static_cast<uint64_t>(v * 1e6), std::memory_order_relaxed);
}

uint64_t Histogram::count() const {
  uint64_t n = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) n += buckets_[i].load(std::memory_order_relaxed);
  return n;
}

void Histogram::write(Exposition& e, std::string_view name, std::string_view labels) const {
  std::string bucket = std::string(name) + "_bucket";
  std::string sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    char le[32];
    std::snprintf(le, sizeof le, "%g", bounds_[i]);
    e.sample(bucket, std::string(labels) + sep + "le=\"" + le + "\"", cumulative);
  }
  cumulative += buckets_[bounds_.size()].load(std::memory_order_relaxed);
  e.sample(bucket, std::string(labels) + sep + "le=\"+Inf\"", cumulative);
  e.sample(std::string(name) + "_sum", labels, static_cast<double>(sum_micro_.load(std::memory_order_relaxed)) / 1e6);
  e.sample(std::string(name) + "_count", labels, cumulative);
}

void Histogram::read(std::vector<uint64_t>& per_bucket, uint64_t& total) const {
  per_bucket.resize(bounds_.size());
  total = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    per_bucket[i] = buckets_[i].load(std::memory_order_relaxed);
    total += per_bucket[i];
  }
  total += buckets_[bounds_.size()].load(std::memory_order_relaxed);
}

std::vector<double> exponential_buckets(double start, double factor, size_t count) {
  std::vector<double> b;
  double v = start;
  for (size_t i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

}  // namespace ramjet::metrics
