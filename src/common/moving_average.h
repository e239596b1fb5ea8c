// common/moving_average: one exponentially weighted moving average kept in an atomic double, for
// values learned from many threads' samples (the tokenize budget's prefill speed, the decode
// cost's output share). 0 means "nothing learned yet": the first sample is taken as it is.
#pragma once

#include <atomic>

namespace ramjet {

inline void blend_average(std::atomic<double>& avg, double sample, double weight) {
  double old = avg.load(std::memory_order_relaxed);
  double next;
  do {
    next = old == 0 ? sample : old + weight * (sample - old);
  } while (!avg.compare_exchange_weak(old, next, std::memory_order_relaxed));
}

}  // namespace ramjet
