// Clock interface: injected so tests never sleep for timing.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ramjet {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic milliseconds (arbitrary epoch).
  virtual int64_t now_ms() const = 0;
  // Monotonic nanoseconds (arbitrary epoch).
  virtual int64_t now_ns() const = 0;
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
