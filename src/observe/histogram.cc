#include "observe/histogram.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace ramjet::observe {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size()]) {
  for (size_t i = 0; i < bounds_.size(); ++i) buckets_[i] = 0;
}

void Histogram::observe(double v) {
  if (!std::isfinite(v) || v < 0) v = 0;
  auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);
  if (it != bounds_.end()) buckets_[it - bounds_.begin()].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_micro_.fetch_add(static_cast<uint64_t>(v * 1e6), std::memory_order_relaxed);
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
  uint64_t total = count_.load(std::memory_order_relaxed);
  e.sample(bucket, std::string(labels) + sep + "le=\"+Inf\"", std::max(total, cumulative));
  e.sample(std::string(name) + "_sum", labels, static_cast<double>(sum_micro_.load()) / 1e6);
  e.sample(std::string(name) + "_count", labels, std::max(total, cumulative));
}

void Histogram::read(std::vector<uint64_t>& per_bucket, uint64_t& total) const {
  per_bucket.resize(bounds_.size());
  uint64_t sum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    per_bucket[i] = buckets_[i].load(std::memory_order_relaxed);
    sum += per_bucket[i];
  }
  total = std::max(count_.load(std::memory_order_relaxed), sum);
}

std::vector<double> exponential_buckets(double start, double factor, size_t count) {
  std::vector<double> b;
  double v = start;
  for (size_t i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

}  // namespace ramjet::observe
