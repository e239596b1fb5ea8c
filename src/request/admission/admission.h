// request/admission/admission: ramjet's waiting room (RJ_ADMISSION_*, issue 30). While every
// engine of a request's model pool is saturated, the request waits here instead of piling onto
// an engine: in a bounded queue per pool, by priority class and fairly between clients within a
// class (by tokens: request/admission/fair_queue.h). It leaves when an engine of its pool has
// room, and is then placed among the engines with room (cache affinity among them). Past a bound
// — queued requests, queued bytes, time waited — it is refused (the caller answers 429 with
// Retry-After); a client that leaves while waiting is forgotten and never reaches an engine.
//
// What "room" is, the caller says (request/stream: free slots per engine from its in-flight
// requests against RJ_ADMISSION_ENGINE_MAX_INFLIGHT, and the engine's own waiting queue from the
// scrape against RJ_ADMISSION_ENGINE_MAX_WAITING). An admitted request holds a Ticket until its
// engine's reservation counts it (or it ends): requests admitted but not yet placed count
// against the room, so one freed slot admits one request, not every waiter at once.
//
// Waiters sleep on a timer of their own io thread: the request that frees room (Ticket release,
// notify()) grants the next waiter and wakes it by cancelling that timer on its thread; every
// waiter also looks again every `poll` (room that the scrape freed wakes nobody). All state is
// under one mutex, held for queue operations only.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "metrics/histogram.h"
#include "metrics/metrics.h"
#include "request/admission/fair_queue.h"

namespace ramjet::request {

enum class AdmissionClass : uint8_t { kInteractive, kBatch };
inline constexpr size_t kAdmissionClassCount = 2;
std::string_view to_string(AdmissionClass c);

enum class AdmissionOutcome : uint8_t {
  kImmediate,    // room at once, nobody waiting ahead
  kAdmitted,     // after waiting
  kShedFull,     // the queue was at RJ_ADMISSION_QUEUE_MAX or _MAX_BYTES
  kShedTimeout,  // waited RJ_ADMISSION_QUEUE_TIMEOUT_MS
  kClientGone,   // the client left while waiting
  kBurst,        // no regular room, but a burst slot for a client under its share (Request::burst)
  kCount
};
std::string_view to_string(AdmissionOutcome o);

struct AdmissionConfig {
  size_t max_queued = 256;                  // RJ_ADMISSION_QUEUE_MAX
  uint64_t max_queued_bytes = 64u << 20;    // RJ_ADMISSION_QUEUE_MAX_BYTES
  std::chrono::milliseconds max_wait{30000};  // RJ_ADMISSION_QUEUE_TIMEOUT_MS
  std::chrono::milliseconds poll{100};      // a waiter looks again at least this often
  std::vector<std::string> client_labels;   // metric labels allowed for clients (key names)
};

class Admission {
 public:
  // Requests the pool can take now beyond those already admitted: its engines' free slots
  // (called under the admission lock: it must be quick and must not call back).
  using Room = std::function<uint64_t()>;

  struct Request {
    std::string pool;    // the model pool's key ("" for a fleet of one)
    AdmissionClass cls = AdmissionClass::kInteractive;
    std::string client;  // fairness identity (a key name, else the client's address); never logged
    std::string label;   // its metric label: a configured client label, else "other"
    uint64_t cost = 1;   // estimated tokens (prompt and output)
    uint64_t bytes = 0;  // the body held while waiting
    // When the client wants its first token, in steady-clock milliseconds (FairQueue::kNoDeadline:
    // no target): orders the client's own waiting requests (request/admission/fair_queue.h).
    int64_t deadline_ms = FairQueue::kNoDeadline;
    // Set for a client under its fair share (request/admission/client_share.h): the pool's burst
    // slots (RJ_ADMISSION_ENGINE_BURST) beyond those already granted. When the regular room is
    // full, the request takes one at once, ahead of the queue, instead of waiting.
    Room burst;
  };

  // Held by an admitted request until its engine's reservation counts it (release()) or it ends.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& o) noexcept
        : owner_(o.owner_), pool_(std::move(o.pool_)), burst_(o.burst_), waited_ns_(o.waited_ns_) {
      o.owner_ = nullptr;
    }
    Ticket& operator=(Ticket&& o) noexcept;
    ~Ticket() { release(); }
    void release();
    bool held() const { return owner_ != nullptr; }
    // How long the last admit() kept the request waiting before it was admitted (kAdmitted: at
    // least 1), 0 for any other outcome: the caller reads no clock of its own for it.
    int64_t waited_ns() const { return waited_ns_; }

   private:
    friend class Admission;
    Admission* owner_ = nullptr;
    std::string pool_;
    bool burst_ = false;  // it holds a burst slot
    int64_t waited_ns_ = 0;
  };

  explicit Admission(AdmissionConfig config);
  ~Admission();
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // Waits (on the caller's io thread) until `room` has a place for the request, a bound refuses
  // it, or `gone` turns true (read on the caller's thread). kImmediate/kAdmitted fill `ticket`,
  // which must be empty (released) on the way in.
  boost::asio::awaitable<AdmissionOutcome> admit(Request r, Room room, const bool& gone, Ticket& ticket);
  // Capacity may have freed (a request ended): grants each pool's next waiters that fit.
  void notify();

  size_t queued() const;
  // A Retry-After for a refused request: seconds, from how fast the room has been emptying.
  uint32_t retry_after_s() const;
  void write_metrics(metrics::Exposition& out) const;

 private:
  struct Waiter;
  struct Pool {
    FairQueue queue{kAdmissionClassCount};
    uint64_t pending = 0;  // admitted, not yet counted by an engine's reservation
    uint64_t burst_pending = 0;  // the same, in burst slots
    Room room;             // the latest caller's view of the pool's room
  };
  void grant(Pool& p);     // under mu_
  void released(const std::string& pool, bool burst);
  void forget(uint64_t id, const Waiter& w);  // under mu_: the waiter left the queue

  AdmissionConfig config_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Pool> pools_;
  std::unordered_map<uint64_t, std::shared_ptr<Waiter>> waiters_;
  uint64_t next_id_ = 1;
  uint64_t queued_bytes_ = 0;
  std::array<int64_t, kAdmissionClassCount> depth_{};
  // Admissions of waiters, for Retry-After: a decaying count and when it was last updated.
  double rate_ = 0;
  int64_t rate_at_ms_ = 0;

  std::array<std::array<metrics::Counter, static_cast<size_t>(AdmissionOutcome::kCount)>, kAdmissionClassCount> outcomes_;
  std::array<metrics::Histogram, kAdmissionClassCount> wait_;
  std::vector<metrics::Counter> client_tokens_;  // per client label, then "other"
};

// The families Admission::write_metrics writes (docs/metrics.md).
std::span<const metrics::Family> admission_families();

}  // namespace ramjet::request
