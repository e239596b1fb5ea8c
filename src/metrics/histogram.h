// observe/histogram: fixed-bucket histogram with atomic counts (no lock on observe()). An
// observation is two relaxed atomic increments: its bucket (the last one is +Inf) and the sum;
// the count is the sum of the buckets.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "metrics/metrics.h"

namespace ramjet::metrics {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // Writes name_bucket/_sum/_count samples (the family header is the caller's).
  void write(Exposition& e, std::string_view name, std::string_view labels) const;
  uint64_t count() const;
  double sum() const { return static_cast<double>(sum_micro_.load(std::memory_order_relaxed)) / 1e6; }
  const std::vector<double>& bounds() const { return bounds_; }
  // Per-bucket (not cumulative) counts, one per bound, and the total including the overflow
  // bucket (at least the sum of the buckets). Relaxed reads: a concurrent observe() may show
  // in some counts and not others.
  void read(std::vector<uint64_t>& per_bucket, uint64_t& total) const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1 (the last: +Inf)
  std::atomic<uint64_t> sum_micro_{0};  // sum in millionths, to stay lock-free and integral
};

// Exponential bucket bounds: start, start*factor, ... (count bounds).
std::vector<double> exponential_buckets(double start, double factor, size_t count);

}  // namespace ramjet::metrics
