#include "request/stream/tokenize_budget.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "common/moving_average.h"

namespace ramjet::request {

namespace {

constexpr double kWeight = 0.05;  // of a new sample in the moving averages (about the last 20 responses)

constexpr std::array<metrics::Family, 2> kFamilies = {{
    {"ramjet_exact_tokenize_budget_prefill_seconds_per_token", metrics::MetricKind::kGauge, "",
     "Learned time from dispatch to the first token per prompt token an engine computed (moving "
     "average over streamed responses): the expected prefill time that bounds the wait for exact "
     "routing's tokens (RJ_EXACT_ROUTE_BUDGET_SHARE of it); 0 until learned."},
    {"ramjet_exact_tokenize_budget_tokens_per_byte", metrics::MetricKind::kGauge, "",
     "Learned prompt tokens per request body byte (moving average): a request's expected prompt "
     "size before its tokens are known; 0 until learned."},
}};

}  // namespace

std::span<const metrics::Family> tokenize_budget_families() { return kFamilies; }

void TokenizeBudget::learn(uint64_t body_bytes, uint64_t prompt_tokens, uint64_t cached_tokens, int64_t ttft_ns) {
  if (prompt_tokens == 0 || body_bytes < kMinBodyBytes) return;
  blend_average(tokens_per_byte_, static_cast<double>(prompt_tokens) / static_cast<double>(body_bytes), kWeight);
  const uint64_t computed = prompt_tokens > cached_tokens ? prompt_tokens - cached_tokens : 0;
  if (ttft_ns > 0 && computed >= kMinComputedTokens) {
    blend_average(ns_per_token_, static_cast<double>(ttft_ns) / static_cast<double>(computed), kWeight);
  }
}

std::chrono::milliseconds TokenizeBudget::budget(uint64_t body_bytes) const {
  const double per_token = ns_per_token();
  const double per_byte = tokens_per_byte();
  if (config_.share <= 0 || per_token <= 0 || per_byte <= 0) return config_.cap;
  const double prefill_ms = static_cast<double>(body_bytes) * per_byte * per_token / 1e6;
  const double ms = std::ceil(config_.share * prefill_ms);
  if (!(ms < static_cast<double>(config_.cap.count()))) return config_.cap;
  return std::max(kFloor, std::chrono::milliseconds(static_cast<int64_t>(ms)));
}

std::chrono::milliseconds TokenizeBudget::expected_prefill(uint64_t body_bytes) const {
  const double per_token = ns_per_token();
  const double per_byte = tokens_per_byte();
  if (per_token <= 0 || per_byte <= 0) return std::chrono::milliseconds(0);
  const double ms = std::ceil(static_cast<double>(body_bytes) * per_byte * per_token / 1e6);
  return std::chrono::milliseconds(static_cast<int64_t>(std::min(ms, 1e9)));
}

void TokenizeBudget::write_metrics(metrics::Exposition& x) const {
  x.family(kFamilies[0]);
  x.sample(kFamilies[0].name, "", ns_per_token() / 1e9);
  x.family(kFamilies[1]);
  x.sample(kFamilies[1].name, "", tokens_per_byte());
}

}  // namespace ramjet::request
