// request/ingress/body_budget: the global cap on request body bytes held in memory
// (RJ_MAX_BUFFERED_BYTES). Every request leases its body's bytes before reading them (the
// Content-Length at once, a chunked body as it grows); a lease that would pass the cap is
// refused, and the request is answered 503 with Retry-After instead of growing memory. Leases
// are RAII: released when the exchange ends, whatever path it takes. The caller decides what a
// body costs (request/stream counts an inference body twice, its bytes and their parse, and a parse that
// needs more holds more while it runs).
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

namespace ramjet::request {

class BodyBudget {
 public:
  explicit BodyBudget(uint64_t cap) : cap_(cap) {}
  BodyBudget(const BodyBudget&) = delete;
  BodyBudget& operator=(const BodyBudget&) = delete;

  uint64_t cap() const { return cap_; }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }

  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept : budget_(std::exchange(o.budget_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    Lease& operator=(Lease&& o) noexcept {
      if (this != &o) {
        release();
        budget_ = std::exchange(o.budget_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
      }
      return *this;
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { release(); }

    // Holds at least `bytes` of `budget` (never shrinks); false, holding what it held, when the
    // budget cannot give the difference.
    bool grow_to(BodyBudget& budget, uint64_t bytes) {
      if (budget_ != nullptr && budget_ != &budget) return false;
      if (bytes <= bytes_) return true;
      if (!budget.take(bytes - bytes_)) return false;
      budget_ = &budget;
      bytes_ = bytes;
      return true;
    }
    // Gives back what it holds past `bytes` (a body's parse, once its memory is freed).
    void shrink_to(uint64_t bytes) {
      if (budget_ == nullptr || bytes >= bytes_) return;
      budget_->used_.fetch_sub(bytes_ - bytes, std::memory_order_relaxed);
      bytes_ = bytes;
    }
    void release() {
      if (budget_) budget_->used_.fetch_sub(bytes_, std::memory_order_relaxed);
      budget_ = nullptr;
      bytes_ = 0;
    }
    uint64_t bytes() const { return bytes_; }

   private:
    BodyBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
  };

 private:
  bool take(uint64_t n) {
    uint64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (n > cap_ || used > cap_ - n) return false;
    } while (!used_.compare_exchange_weak(used, used + n, std::memory_order_relaxed));
    return true;
  }
  const uint64_t cap_;
  std::atomic<uint64_t> used_{0};
};

}  // namespace ramjet::request
