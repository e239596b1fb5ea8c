// LoadReservation: RAII ownership of one request's load on one engine. Adds one in-flight
// request and N load units when made; shrink_to() lowers the units (never raises them);
// the destructor releases whatever is left, on every path (success, error, disconnect).
#pragma once

#include <cstdint>
#include <utility>

#include "upstream/fleet.h"

namespace ramjet::route {

class LoadReservation {
 public:
  LoadReservation() = default;
  LoadReservation(upstream::Engine& engine, int64_t units) : engine_(&engine), units_(units) {
    engine_->add_load(1, units_);
  }
  LoadReservation(LoadReservation&& o) noexcept
      : engine_(std::exchange(o.engine_, nullptr)), units_(std::exchange(o.units_, 0)) {}
  LoadReservation& operator=(LoadReservation&& o) noexcept {
    if (this != &o) {
      release();
      engine_ = std::exchange(o.engine_, nullptr);
      units_ = std::exchange(o.units_, 0);
    }
    return *this;
  }
  LoadReservation(const LoadReservation&) = delete;
  LoadReservation& operator=(const LoadReservation&) = delete;
  ~LoadReservation() { release(); }

  void shrink_to(int64_t units) {
    if (engine_ && units < units_) {
      engine_->add_load(0, units - units_);
      units_ = units;
    }
  }
  void release() {
    if (engine_) engine_->add_load(-1, -units_);
    engine_ = nullptr;
    units_ = 0;
  }
  bool active() const { return engine_ != nullptr; }
  int64_t units() const { return units_; }

 private:
  upstream::Engine* engine_ = nullptr;
  int64_t units_ = 0;
};

}  // namespace ramjet::route
