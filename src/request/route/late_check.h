// request/route/late_check: the second look at an exact prediction the engine contradicted.
//
// An engine that found MORE of a prompt cached than its index held at the decision was either
// warmed a moment earlier by another client whose KV events were still in flight — late: the index
// holds those tokens once the events arrive — or renders other tokens than ramjet — a miss: the
// index never holds ramjet's tokens that far, however long one waits.
//
// An engine that found LESS than predicted either evicted predicted blocks between the decision
// and the prefill (a churning pool) — evicted: its own events remove them, and the index shows
// them gone or back only since the decision (ExactShard::held_since) — or renders other tokens —
// a miss: the blocks it did not find sit in the index untouched since before the decision. An
// eviction is neither a miss nor an agreement and never withdraws trust; a block above the
// predicted ones evicted and stored again in between counts as an eviction too.
//
// LateCheck looks at once, and while the look does not explain it, again on a thread of its own
// after 5, 10, 20, ... ms until `delay` has passed (vLLM publishes a step's events from a Python
// thread that can wait out the engine's next steps; under churn the blocks may be evicted again
// soon after, so the looks start early), then records the result in the PredictionCheck. Bounded:
// past `max_pending` waiting looks, a prediction is recorded as it stands. The observer that feeds
// it is request/stream/observers.h.
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
#include "request/route/overlap.h"
#include "request/route/prediction_check.h"

namespace ramjet::route {

struct LateCheckConfig {
  int64_t delay_ms = 500;      // the last look, after the response's end
  int64_t first_retry_ms = 5;  // the first look after the immediate one; each next one waits twice as long
  size_t max_pending = 1024;   // underpredictions waiting for a look
};

// A checked placement the engine contradicted beyond the tolerance (cached above or below predicted).
struct Misprediction {
  size_t engine = 0;
  // The prompt's first max(cached, predicted) tokens: what the engine found, or what was predicted.
  std::vector<uint32_t> tokens;
  std::string model;
  std::string cache_salt;
  uint64_t predicted = 0;
  uint64_t cached = 0;
  uint32_t block_size = 0;
  uint64_t regret_tokens = 0;
  ExactStamp stamp;  // the index state the prediction was read from (an over-prediction's look)
  bool over() const { return cached < predicted; }
};

class LateCheck {
 public:
  // How many of `tokens` an engine's index holds now (ExactOverlap::resident_now), any thread.
  using Lookup = std::function<std::optional<uint32_t>(size_t engine, std::span<const uint32_t> tokens,
                                                       std::string_view model, std::string_view cache_salt)>;
  // Whether an engine's index has held tokens[from_tokens..] (its blocks) without a break since
  // `stamp` (ExactOverlap::held_since): false explains an over-prediction as an eviction.
  using HeldSince = std::function<std::optional<bool>(size_t engine, std::span<const uint32_t> tokens,
                                                      std::string_view model, std::string_view cache_salt,
                                                      uint64_t from_tokens, const ExactStamp& stamp)>;
  // Without `held_since`, over-predictions are recorded as they stand.
  LateCheck(PredictionCheck& check, Lookup lookup, HeldSince held_since = {}, LateCheckConfig config = {},
            const Clock& clock = SteadyClock::instance());
  ~LateCheck();
  LateCheck(const LateCheck&) = delete;
  LateCheck& operator=(const LateCheck&) = delete;

  // Records `u` as late (under) or evicted (over) when a look explains it, now or later; as
  // checked (PredictionCheck::record: a miss) when none did by the last look.
  void submit(Misprediction u);
  // Second looks waiting (tests, metrics).
  size_t pending() const;

 private:
  bool explained(const Misprediction& u) const;
  void record(const Misprediction& u, bool explained);
  void run();

  PredictionCheck& check_;
  Lookup lookup_;
  HeldSince held_since_;
  LateCheckConfig config_;
  const Clock& clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Look {
    int64_t due_ms;
    int64_t deadline_ms;  // the last look
    int64_t wait_ms;      // the next look's wait
    Misprediction u;
  };
  std::vector<Look> queue_;  // a min-heap on due_ms
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace ramjet::route
