// request/route/late_check: the second look at an exact prediction the engine beat. An engine
// that found more of a prompt cached than its index held at the decision was either warmed a
// moment earlier by another client whose KV events were still in flight — late: the index holds
// those tokens once the events arrive — or renders other tokens than ramjet — a miss: the index
// never holds ramjet's tokens that far, however long one waits. LateCheck looks at once, and while
// the index does not hold them, again on a thread of its own after 5, 10, 20, ... ms until `delay`
// has passed (vLLM publishes a step's events from a Python thread that can wait out the engine's
// next steps; under churn the blocks may be evicted again soon after, so the looks start early),
// then records the result in the PredictionCheck. Bounded: past `max_pending` waiting looks, a
// prediction is recorded as it stands. The observer that feeds it is request/stream/observers.h.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "request/route/prediction_check.h"

namespace ramjet::route {

struct LateCheckConfig {
  int64_t delay_ms = 500;      // the last look, after the response's end
  int64_t first_retry_ms = 5;  // the first look after the immediate one; each next one waits twice as long
  size_t max_pending = 1024;   // underpredictions waiting for a look
};

// A checked placement the engine beat (cached > predicted beyond the tolerance).
struct Underprediction {
  size_t engine = 0;
  std::vector<uint32_t> tokens;  // the prompt's first `cached` tokens
  std::string model;
  std::string cache_salt;
  uint64_t predicted = 0;
  uint64_t cached = 0;
  uint32_t block_size = 0;
  uint64_t regret_tokens = 0;
};

class LateCheck {
 public:
  // How many of `tokens` an engine's index holds now (ExactOverlap::resident_now), any thread.
  using Lookup = std::function<std::optional<uint32_t>(size_t engine, std::span<const uint32_t> tokens,
                                                       std::string_view model, std::string_view cache_salt)>;
  LateCheck(PredictionCheck& check, Lookup lookup, LateCheckConfig config = {},
            const Clock& clock = SteadyClock::instance());
  ~LateCheck();
  LateCheck(const LateCheck&) = delete;
  LateCheck& operator=(const LateCheck&) = delete;

  // Records `u` as late when the index holds what the engine found, now or at the second look;
  // as checked (PredictionCheck::record: a miss) when it still does not.
  void submit(Underprediction u);
  // Second looks waiting (tests, metrics).
  size_t pending() const;

 private:
  bool explained(const Underprediction& u) const;
  void record(const Underprediction& u, bool late);
  void run();

  PredictionCheck& check_;
  Lookup lookup_;
  LateCheckConfig config_;
  const Clock& clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Look {
    int64_t due_ms;
    int64_t deadline_ms;  // the last look
    int64_t wait_ms;      // the next look's wait
    Underprediction u;
  };
  std::vector<Look> queue_;  // a min-heap on due_ms
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace ramjet::route
