// upstream/parking: the idle drain's actuator (RJ_IDLE_DRAIN_MODE=drain|observe). Every
// RJ_IDLE_DRAIN_INTERVAL_SECONDS, and at once when a request waits for a pool with no warm engine
// (want()), it asks the pure policy (upstream/idle_drain.h) what to do and does it: drain (the
// fleet's parked flag: out of placement, never a fail-open target), sleep (POST
// /sleep?level=N&mode=abort, then GET /is_sleeping until true), wake (POST /wake_up, then GET
// /is_sleeping until false and GET /health 200, all within RJ_IDLE_DRAIN_WAKE_TIMEOUT_SECONDS;
// only then back in placement). An engine that does not wake in time stays out of placement as
// `failed` (counted, logged), and another parked engine of its pool is woken instead; it is tried
// again after the cooldown. In `observe` mode the states move on paper only: decisions are logged
// and counted, nothing is called and placement never changes.
//
// The waiting room holds requests while a wake runs (request/stream: Proxy::admit counts coming()
// engines); what a sleep did to the engine's KV cache (gone) the caller learns from on_parked.
// Engines with data-parallel ranks (roster siblings) are never parked: one /sleep would put every
// rank to sleep. Actions run on one io context; states are atomics readers may poll.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "metrics/histogram.h"
#include "metrics/metrics.h"
#include "upstream/fleet.h"
#include "upstream/idle_drain.h"
#include "upstream/model_pools.h"

namespace ramjet::upstream {

// The families EngineParking::write_metrics writes (docs/metrics.md).
std::span<const metrics::Family> parking_families();

class EngineParking {
 public:
  EngineParking(Fleet& fleet, boost::asio::io_context& ctx, const Clock& clock, IdleDrainConfig config,
                std::string bearer);
  ~EngineParking();

  // Before start(): engine i's model pool (engines with the same key share one; default: one pool).
  void set_pool_of(std::function<uint32_t(size_t)> pool_of) { pool_of_ = std::move(pool_of); }
  // Before start(): called (on the io context) when engine i went to sleep: its KV cache is gone.
  void set_on_parked(std::function<void(size_t)> f) { on_parked_ = std::move(f); }
  void start();
  void stop();  // thread-safe

  ParkState state(size_t i) const { return states_[i].load(std::memory_order_acquire); }
  // Engine i is out of placement but expected back (draining, drained, waking): a request may
  // wait for it. A failed engine is not coming.
  bool coming(size_t i) const;
  // A request finds no engine of its pool in service (`pool`: its engines; null: all): wake one
  // of its parked engines now (one that failed to wake only after the cooldown). Any thread.
  void want(const EngineSet* pool);
  // /health's "idle_drain" field: warm|draining|drained|waking|failed.
  std::string_view health_label(size_t i) const { return park_state_label(state(i)); }
  void write_metrics(metrics::Exposition& x) const;
  // One decision now. On the io context's thread only (the loop's; unit tests call it directly).
  void tick();

 private:
  boost::asio::awaitable<void> loop();
  void enter(size_t i, ParkState to);
  void apply(const ParkStep& step);
  boost::asio::awaitable<void> put_to_sleep(size_t i, uint64_t incarnation);
  boost::asio::awaitable<void> wake(size_t i, uint64_t incarnation);
  // GET /is_sleeping until it says `sleeping` (true/false), by `deadline_ms`.
  boost::asio::awaitable<bool> until_sleeping(size_t i, bool sleeping, int64_t deadline_ms);

  Fleet& fleet_;
  boost::asio::io_context& ctx_;
  const Clock& clock_;
  IdleDrainConfig config_;
  std::string bearer_;
  std::function<uint32_t(size_t)> pool_of_;
  std::function<void(size_t)> on_parked_;
  boost::asio::steady_timer timer_;
  std::atomic<bool> stopped_{false};
  std::unique_ptr<std::atomic<ParkState>[]> states_;
  std::unique_ptr<std::atomic<bool>[]> wanted_;
  // On ctx_ only.
  std::vector<int64_t> since_ms_;
  std::vector<int64_t> last_request_ms_;
  std::vector<uint64_t> seen_dispatches_;
  std::vector<char> busy_;  // a sleep or wake call is running
  std::vector<uint64_t> parked_incarnation_;  // the engine (roster incarnation) that left warm
  int64_t last_drain_ms_;
  int64_t last_request_ms_fleet_;
  std::atomic<bool> fleet_idle_{false};
  std::atomic<int64_t> load_milli_{0};

  std::vector<std::array<metrics::Counter, static_cast<size_t>(ParkState::kCount)>> transitions_;
  std::array<std::array<metrics::Counter, static_cast<size_t>(ParkReason::kCount)>,
             static_cast<size_t>(ParkAction::kCount)> decisions_;
  // Per engine: sleep and wake calls by outcome (ok, error, timeout).
  std::vector<std::array<metrics::Counter, 6>> calls_;
  metrics::Histogram wake_seconds_;
  metrics::Histogram sleep_seconds_;
};

}  // namespace ramjet::upstream
