// Clock interface: injected so tests never sleep for timing.
#pragma once

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ramjet {

// steady_clock's own clock (libstdc++ reads CLOCK_MONOTONIC) as its last tick had it:
// CLOCK_MONOTONIC_COARSE, behind by at most a tick (4 ms at HZ=250) and a third of a full read's
// cost (10 ns against 31 on this project's machines, where a JSON request made 12 full reads). For
// timeouts and bookkeeping in milliseconds, never for a latency.
inline int64_t coarse_monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic milliseconds (arbitrary epoch).
  virtual int64_t now_ms() const = 0;
  // Monotonic nanoseconds (arbitrary epoch).
  virtual int64_t now_ns() const = 0;
  // now_ms() at most a few ms behind (the clock's last tick), cheaper where that is the real
  // clock; the same epoch, so the two may be compared.
  virtual int64_t coarse_now_ms() const { return now_ms(); }
};

class SteadyClock final : public Clock {
 public:
  int64_t now_ms() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  int64_t now_ns() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  int64_t coarse_now_ms() const override { return coarse_monotonic_ns() / 1'000'000; }
  static const SteadyClock& instance() {
    static const SteadyClock c;
    return c;
  }
};

// A manual clock for tests.
class ManualClock final : public Clock {
 public:
  int64_t now_ms() const override { return ns_.load() / 1'000'000; }
  int64_t now_ns() const override { return ns_.load(); }
  void advance_ms(int64_t ms) { ns_ += ms * 1'000'000; }
  void set_ms(int64_t ms) { ns_ = ms * 1'000'000; }

 private:
  std::atomic<int64_t> ns_{1'000'000'000};
};

}  // namespace ramjet
