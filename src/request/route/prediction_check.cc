#include "request/route/prediction_check.h"

#include <string>

namespace ramjet::route {

namespace {

using metrics::Family;
using metrics::MetricKind;

enum class F { kPredictions, kError, kWithdrawn, kWithdrawals, kRegret, kCount };
constexpr std::array<Family, static_cast<size_t>(F::kCount)> kFamilies = {{
    {"ramjet_exact_predictions_total", MetricKind::kCounter, "upstream,result",
     "Exact placements checked against the engine's usage: agree (cached_tokens within two blocks "
     "of the prediction), miss, unreported (the engine reports no cached_tokens: vLLM needs "
     "--enable-prompt-tokens-details), late (the engine found more than predicted, and the events "
     "that stored it reached the index after the decision, by the response's end or 500 ms later: "
     "a stale prediction, not a wrong one; not a miss), evicted (the engine found less than "
     "predicted, and its KV events removed predicted blocks between the decision and the prefill: "
     "an eviction race in a churning pool, not a miss; never withdraws trust)."},
    {"ramjet_exact_prediction_error_tokens", MetricKind::kHistogram, "",
     "|predicted resident prompt tokens - the engine's cached_tokens| of each checked placement "
     "(agree or miss; late and evicted ones are not observed)."},
    {"ramjet_exact_withdrawn", MetricKind::kGauge, "upstream",
     "1 while the engine's exact trust is withdrawn after RJ_EXACT_MISS_LIMIT misses in a row "
     "(for RJ_EXACT_MISS_COOLDOWN_MS; requests are placed on the approximate index meanwhile)."},
    {"ramjet_exact_withdrawals_total", MetricKind::kCounter, "upstream",
     "Times the engine's exact trust was withdrawn."},
    {"ramjet_exact_locality_regret_tokens_total", MetricKind::kCounter, "",
     "Prompt tokens a chosen engine had to prefill that another eligible engine held (exact "
     "placements: load outweighed affinity)."},
}};
const Family& fam(F f) { return kFamilies[static_cast<size_t>(f)]; }

constexpr std::array<std::string_view, 5> kResultLabels = {"agree", "miss", "unreported", "late", "evicted"};

}  // namespace

std::span<const metrics::Family> prediction_families() { return kFamilies; }

PredictionCheck::PredictionCheck(size_t engines, PredictionCheckConfig config, const Clock& clock)
    : config_(config), clock_(clock), error_({0, 16, 64, 256, 1024, 4096, 16384, 65536}) {
  for (size_t i = 0; i < engines; ++i) engines_.push_back(std::make_unique<Engine>());
}

bool PredictionCheck::withdrawn(size_t engine) const {
  return engine < engines_.size() &&
         engines_[engine]->withdrawn_until_ms.load(std::memory_order_relaxed) > clock_.now_ms();
}

PredictionResult PredictionCheck::record(size_t engine, uint64_t predicted, std::optional<uint64_t> cached,
                                         uint32_t block_size, uint64_t regret_tokens, bool api_reports_cached) {
  if (engine >= engines_.size()) return PredictionResult::kUnreported;
  Engine& e = *engines_[engine];
  regret_tokens_.fetch_add(regret_tokens, std::memory_order_relaxed);
  // vLLM leaves cached_tokens out when it is 0: absent means 0 once the engine has shown it reports.
  if (cached) e.reports_cached.store(true, std::memory_order_relaxed);
  else if (api_reports_cached && e.reports_cached.load(std::memory_order_relaxed)) cached = 0;
  PredictionResult r = PredictionResult::kUnreported;
  if (cached) {
    const uint64_t err = predicted > *cached ? predicted - *cached : *cached - predicted;
    error_.observe(static_cast<double>(err));
    r = err <= uint64_t{config_.tolerance_blocks} * block_size ? PredictionResult::kAgree : PredictionResult::kMiss;
    if (r == PredictionResult::kAgree) {
      e.consecutive_misses.store(0, std::memory_order_relaxed);
    } else if (config_.miss_limit != 0 &&
               e.consecutive_misses.fetch_add(1, std::memory_order_relaxed) + 1 >= config_.miss_limit) {
      e.consecutive_misses.store(0, std::memory_order_relaxed);
      e.withdrawn_until_ms.store(clock_.now_ms() + config_.cooldown_ms, std::memory_order_relaxed);
      e.withdrawals.fetch_add(1, std::memory_order_relaxed);
    }
  }
  e.results[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed);
  return r;
}

void PredictionCheck::record_late(size_t engine, uint64_t regret_tokens) {
  record_explained(engine, regret_tokens, PredictionResult::kLate);
}

void PredictionCheck::record_evicted(size_t engine, uint64_t regret_tokens) {
  record_explained(engine, regret_tokens, PredictionResult::kEvicted);
}

void PredictionCheck::record_explained(size_t engine, uint64_t regret_tokens, PredictionResult r) {
  if (engine >= engines_.size()) return;
  regret_tokens_.fetch_add(regret_tokens, std::memory_order_relaxed);
  engines_[engine]->reports_cached.store(true, std::memory_order_relaxed);  // it had a count
  engines_[engine]->results[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed);
}

void PredictionCheck::write_metrics(metrics::Exposition& x) const {
  auto up = [](size_t i) { return "upstream=\"" + std::to_string(i) + "\""; };
  x.family(fam(F::kPredictions));
  for (size_t i = 0; i < engines_.size(); ++i) {
    for (size_t r = 0; r < kResultLabels.size(); ++r) {
      x.sample(fam(F::kPredictions).name, up(i) + ",result=\"" + std::string(kResultLabels[r]) + "\"",
               engines_[i]->results[r].load(std::memory_order_relaxed));
    }
  }
  x.family(fam(F::kError));
  error_.write(x, fam(F::kError).name, "");
  x.family(fam(F::kWithdrawn));
  for (size_t i = 0; i < engines_.size(); ++i) x.sample(fam(F::kWithdrawn).name, up(i), int64_t{withdrawn(i) ? 1 : 0});
  x.family(fam(F::kWithdrawals));
  for (size_t i = 0; i < engines_.size(); ++i) {
    x.sample(fam(F::kWithdrawals).name, up(i), engines_[i]->withdrawals.load(std::memory_order_relaxed));
  }
  x.family(fam(F::kRegret));
  x.sample(fam(F::kRegret).name, "", regret_tokens_.load(std::memory_order_relaxed));
}

}  // namespace ramjet::route
