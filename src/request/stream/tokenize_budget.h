// request/stream/tokenize_budget: how long a request may wait for its exact-routing tokens.
//
// Exact routing can save a request at most the prefill of its prompt, and the fingerprints already
// save most of that for one router's own traffic: a request that waits for its tokens longer than
// a share of its expected prefill time is slower for exact routing than it would have been on the
// fingerprints. So the wait is bounded per request by
//
//   budget = RJ_EXACT_ROUTE_BUDGET_SHARE x expected cold prefill time of the request's prompt,
//
// within [kFloor, RJ_EXACT_ROUTE_TIMEOUT_MS]; past it the request goes out on the fingerprints
// (outcome tokenize_timeout). The expected prefill time is learned from the responses ramjet
// relays — nothing is configured per model or GPU: each streamed 200 response's time from dispatch
// to its first token per prompt token the engine had to compute (prompt - cached), and each
// response's prompt tokens per request body byte, both as moving averages over the fleet. A loaded
// fleet (queueing before the first token) grants a longer wait: there, a cache hit is worth more.
// Until the first such response the budget is the timeout. Share 0: always the timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>

#include "metrics/metrics.h"

namespace ramjet::request {

struct TokenizeBudgetConfig {
  double share = 0.1;                     // RJ_EXACT_ROUTE_BUDGET_SHARE (0: the timeout alone)
  std::chrono::milliseconds cap{500};     // RJ_EXACT_ROUTE_TIMEOUT_MS
};

class TokenizeBudget {
 public:
  static constexpr std::chrono::milliseconds kFloor{2};
  static constexpr uint64_t kMinComputedTokens = 64;  // smaller prefills say more about overheads than speed
  static constexpr uint64_t kMinBodyBytes = 4096;      // smaller bodies are mostly JSON, not prompt

  explicit TokenizeBudget(TokenizeBudgetConfig config = {}) : config_(config) {}

  // A response to a request of `body_bytes` whose prompt had `prompt_tokens`, `cached_tokens` of
  // them cached; `ttft_ns` from dispatch to its first token (0: not streamed, not measured).
  void learn(uint64_t body_bytes, uint64_t prompt_tokens, uint64_t cached_tokens, int64_t ttft_ns);
  // The wait a request of `body_bytes` may spend on its tokens.
  std::chrono::milliseconds budget(uint64_t body_bytes) const;
  // Its expected cold prefill (dispatch to first token) from what was learned, 0 until then. The
  // proxy also bounds a wait on an unresponsive engine by it (Proxy::first_byte_budget).
  std::chrono::milliseconds expected_prefill(uint64_t body_bytes) const;

  double ns_per_token() const { return ns_per_token_.load(std::memory_order_relaxed); }  // 0: unknown
  double tokens_per_byte() const { return tokens_per_byte_.load(std::memory_order_relaxed); }

  // ramjet_exact_tokenize_budget_prefill_seconds_per_token and ..._tokens_per_byte
  void write_metrics(metrics::Exposition& x) const;

 private:
  TokenizeBudgetConfig config_;
  std::atomic<double> ns_per_token_{0};
  std::atomic<double> tokens_per_byte_{0};
};

std::span<const metrics::Family> tokenize_budget_families();

}  // namespace ramjet::request
