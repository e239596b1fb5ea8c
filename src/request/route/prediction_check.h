// request/route/prediction_check: every exact placement is a prediction — "engine i holds N tokens
// of this prompt" — that the engine's own usage report checks (prompt_tokens_details.cached_tokens,
// with vLLM's --enable-prompt-tokens-details). A prediction agrees when the two are within
// tolerance_blocks blocks (vLLM recomputes a fully cached prompt's last block; a block may be
// evicted or added between the decision and the prefill; one the KV events explain beyond that is
// late or evicted, not a miss: route/late_check.h). An engine whose predictions miss
// miss_limit times in a row (a tokenizer, template or block-size mismatch) has its exact trust
// withdrawn for cooldown_ms; then it is used again, and its next miss withdraws it again.
// Counted per engine, with the error distribution and the locality regret (tokens the chosen
// engine had to prefill that another eligible engine held).
//
// Offload tiers: the prediction counts the tokens of every tier (cache/index/exact_index.h), not
// the GPU's only, because vLLM's cached_tokens does. Scheduler.schedule (vllm/v1/core/sched/
// scheduler.py) sets num_computed_tokens = num_new_local_computed_tokens (the GPU prefix cache,
// kv_cache_manager.get_computed_blocks) + num_external_computed_tokens (the connector's
// get_num_new_matched_tokens: for the OffloadingConnector, OffloadingConnectorScheduler's contiguous
// run of offloaded blocks after the GPU hit), then request.num_cached_tokens = num_computed_tokens;
// with an asynchronous load the request waits in WAITING_FOR_REMOTE_KVS and is scheduled with the
// loaded tokens already in num_computed_tokens, which again become num_cached_tokens. That is the
// usage's prompt_tokens_details.cached_tokens (vllm/v1/engine/output_processor.py). The
// connector's part is also num_external_computed_tokens, which the OpenAI usage does not report,
// so the check compares the whole of it; a GPU-only prediction would read every CPU hit as a miss.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "common/clock.h"
#include "metrics/histogram.h"
#include "metrics/metrics.h"

namespace ramjet::route {

struct PredictionCheckConfig {
  uint32_t tolerance_blocks = 2;
  uint32_t miss_limit = 5;     // RJ_EXACT_MISS_LIMIT (0 = never withdraw)
  int64_t cooldown_ms = 60000;  // RJ_EXACT_MISS_COOLDOWN_MS
};

enum class PredictionResult : uint8_t { kAgree, kMiss, kUnreported, kLate, kEvicted, kCount };

class PredictionCheck {
 public:
  PredictionCheck(size_t engines, PredictionCheckConfig config, const Clock& clock);

  // A completed exchange placed on exact overlaps on `engine`: the predicted resident prompt
  // tokens, the engine's cached_tokens (nullopt when its usage had none), the block size the
  // prediction was made in, and the regret of the choice. `api_reports_cached`: an absent count
  // means 0 once the engine has reported one — only for a usage the response did carry, on an API
  // that carries the count (vLLM's Anthropic Messages usage has cache_read_input_tokens only from
  // vLLM 0.32 on; a stream without include_usage has no usage): otherwise it is unreported.
  PredictionResult record(size_t engine, uint64_t predicted, std::optional<uint64_t> cached, uint32_t block_size,
                          uint64_t regret_tokens, bool api_reports_cached = true);
  // An under-prediction the KV events explain (route/late_check.h): the engine found more than
  // the index held at the decision, and the index holds it by the second look — the events that
  // stored it were still in flight (another router's or a direct client's request had just
  // warmed the engine). Counted as `late`; neither a miss nor an agreement (a tokenizer or
  // template mismatch never passes that test: the index never holds the request's own tokens).
  void record_late(size_t engine, uint64_t regret_tokens);
  // An over-prediction the KV events explain: the engine evicted predicted blocks between the
  // decision and the prefill (route/late_check.h). Counted as `evicted`; neither a miss nor an
  // agreement: it leaves the engine's run of misses as it was and never withdraws trust.
  void record_evicted(size_t engine, uint64_t regret_tokens);
  // The tolerance of a prediction in tokens: RJ_EXACT tolerance blocks of `block_size`.
  uint64_t tolerance_tokens(uint32_t block_size) const { return uint64_t{config_.tolerance_blocks} * block_size; }
  bool withdrawn(size_t engine) const;
  // A different engine took the slot: its record starts clean (counters stay: they are the slot's).
  void reset(size_t engine) {
    engines_[engine]->consecutive_misses.store(0, std::memory_order_relaxed);
    engines_[engine]->withdrawn_until_ms.store(0, std::memory_order_relaxed);
    engines_[engine]->reports_cached.store(false, std::memory_order_relaxed);
  }
  size_t engines() const { return engines_.size(); }

  void write_metrics(metrics::Exposition& x) const;

 private:
  void record_explained(size_t engine, uint64_t regret_tokens, PredictionResult r);
  struct Engine {
    std::atomic<uint32_t> consecutive_misses{0};
    std::atomic<int64_t> withdrawn_until_ms{0};
    std::atomic<bool> reports_cached{false};  // the engine has reported cached_tokens at least once
    std::atomic<uint64_t> withdrawals{0};
    std::array<std::atomic<uint64_t>, static_cast<size_t>(PredictionResult::kCount)> results{};
  };
  PredictionCheckConfig config_;
  const Clock& clock_;
  std::vector<std::unique_ptr<Engine>> engines_;
  metrics::Histogram error_;  // |predicted - cached| in tokens
  std::atomic<uint64_t> regret_tokens_{0};
};

std::span<const metrics::Family> prediction_families();

}  // namespace ramjet::route
