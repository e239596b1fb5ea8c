// net/drain_gate: graceful shutdown as one object. Everything that must finish before the process
// stops — a client connection, a dashboard event stream, later a KV-event subscriber — holds the
// gate while it runs. close() admits no new holder; async_wait() calls back once the last holder
// has left, or when the grace period ends first. Thread-safe; holds are movable RAII values.
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>

namespace ramjet::net {

class DrainGate {
 public:
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& o) noexcept : gate_(o.gate_) { o.gate_ = nullptr; }
    Hold& operator=(Hold&& o) noexcept {
      if (this != &o) {
        release();
        gate_ = o.gate_;
        o.gate_ = nullptr;
      }
      return *this;
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold() { release(); }
    explicit operator bool() const { return gate_ != nullptr; }
    void release();

   private:
    friend class DrainGate;
    explicit Hold(DrainGate* g) : gate_(g) {}
    DrainGate* gate_ = nullptr;
  };

  DrainGate() = default;
  ~DrainGate();
  DrainGate(const DrainGate&) = delete;
  DrainGate& operator=(const DrainGate&) = delete;

  // A hold, or an empty one once the gate is closed.
  Hold enter();
  // Admits no new holder (idempotent).
  void close();
  bool closed() const;
  size_t holders() const;
  // Once the gate is closed and empty, posts done(true) to `ex`; if `grace` passes first,
  // done(false) (with holders still inside). One wait at a time; the gate must outlive it.
  void async_wait(const boost::asio::any_io_executor& ex, std::chrono::milliseconds grace,
                  std::function<void(bool drained)> done);
  // Drops the wait without calling it. Call before the waiter's io context is destroyed (a
  // forced stop: holders still inside release their holds as their frames are destroyed, and
  // nothing may be posted to a context that is going away).
  void abandon();

 private:
  struct Waiter;
  void leave();
  // Under mu_: the callback to run now, if the wait is over.
  void settle_locked(bool drained);

  mutable std::mutex mu_;
  size_t holders_ = 0;
  bool closed_ = false;
  std::shared_ptr<Waiter> waiter_;
};

}  // namespace ramjet::net
