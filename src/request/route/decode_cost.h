// request/route/decode_cost: the decode term of the prefix policy (RJ_ROUTE_DECODE_COST=on):
// what the output a request asks for will cost on each engine, learned from the responses ramjet
// relays, in the same unit as the cache credit.
//
// Engines of one model decode at different speeds: a speculative (MTP) engine emits several
// tokens per step while its batch is small and loses that lead as the batch grows; GPUs and
// parallelism differ. The prefix policy otherwise weighs a request's cache and its engine's load
// only (a declared profile, RJ_UPSTREAM_PROFILES, breaks exact ties), so a long output may wait
// on a slow decoder for a cache hit worth a fraction of that time. Here each candidate is charged
// the time its decode would take there beyond the fastest candidate's, counted in prefill blocks:
// a block of cache credit is worth the prefill it saves, so a decode slower by that much costs
// one block. Cache, load and decode speed are then weighed in one unit: expected time to serve.
//
// What is learned (nothing is configured per engine or model):
//   - per engine, the time per output token against the engine's concurrency: each 200 response
//     reporting at least kMinTokens output tokens gives its decode time / (tokens - 1) — streamed,
//     from its first token to the engine's last byte; whole, from dispatch less its computed
//     prompt's prefill at the learned speed (request/stream/observers.h DecodeCostLearning) — at
//     n = the mean of this router's in-flight requests on the engine at its dispatch and at its
//     end (itself included). A line ns(n) = base + slope * n is fitted by least squares with
//     exponential forgetting (kForget per response: about the last 50 count), the slope at
//     least 0 (one concurrency seen: the mean, flat). The fit counts from kMinSamples responses.
//   - the fleet's output per request: max_tokens is a limit and agents' outputs are often far
//     shorter, so a request's expected output is its max_tokens times the share of their limit
//     that limited responses used (a moving average), or, without a limit, the moving average
//     of unlimited responses' outputs (none learned yet: no charge for it).
//   - the prefill time of one fingerprint block (RJ_ROUTE_CHUNK_BYTES of prompt): the fleet's
//     prompt tokens per body byte and prefill time per computed token, as the tokenize budget
//     learns them (request/stream/tokenize_budget.h) and passes them on.
//
// A candidate's charge (charges()): D = expected output x the decode time per token the request
// adds there, marginal_ns(): its own, ns(in-flight + 1), plus what it slows each of the requests
// already there by, slope x in-flight (a fleet serves fastest when each request goes where it adds
// the least, not where it alone finishes first: a speculative engine's lead shrinks as its batch
// grows, and a request that leaves its cache for it makes everyone there wait for the prefill).
// The fastest eligible, not failing candidate's D is the reference; charge = (D - (1 +
// kIndifference) x reference) / block time, at least 0. Differences within kIndifference of the
// fastest are left to the load term: alike engines' fits differ by noise, and their load alpha
// already weighs. An engine without a fit yet is charged nothing (it is tried, and so measured);
// nothing is charged until the block time and the request's expected output are known. Once some
// engine is charged for its decode, every candidate also pays for the prefill its batch would wait
// for (add_prefill_wait): its in-flight requests x the blocks it holds fewer of than the warmest
// candidate; then all charges drop by the least. Without it the decode charge pulled requests off
// their cache at high concurrency, where the recompute delays a whole batch (bench/decode_cost.sh:
// 0.99x at c32, TTFT p95 51 vs 27 ms; with it 1.00x, 28 vs 27 ms, and c8 1.12x).
//
// Learning runs on the io threads at each response's end (a mutex per engine, held for a few
// arithmetic operations; the output averages are lock-free, common/moving_average.h); decisions
// read each engine's published fit from two atomics, a base of 0 meaning none.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>

#include "metrics/metrics.h"
#include "request/route/policy.h"

namespace ramjet::route {

// ns(n) = base_ns + slope_ns * n, the time per output token at n requests in flight.
struct DecodeFit {
  double base_ns = 0;
  double slope_ns = 0;
  bool valid = false;
  double at(double n) const { return base_ns + slope_ns * n; }
};

// The weighted least-squares line through (n, ns) samples with exponential forgetting; pure, for
// the table tests (DecodeCost keeps one per engine).
class DecodeFitter {
 public:
  void add(double n, double ns, double forget);
  DecodeFit fit(uint32_t min_samples) const;
  uint64_t samples() const { return samples_; }

 private:
  double s0_ = 0, s1_ = 0, s2_ = 0, t0_ = 0, t1_ = 0;  // sum w, w n, w n^2, w ns, w n ns
  uint64_t samples_ = 0;
};

// The charge of a decode `d_ns` against the fastest candidate's `ref_ns`, in blocks of prefill
// time `block_ns`, rounded to a sixteenth of a block and at most 2^20 (0 within the indifference
// band; 0 when anything is unknown).
double decode_charge(double d_ns, double ref_ns, double block_ns, double indifference);

class DecodeCost {
 public:
  static constexpr double kForget = 0.98;
  static constexpr uint32_t kMinSamples = 8;
  static constexpr uint64_t kMinTokens = 16;
  static constexpr double kIndifference = 0.10;
  static constexpr double kOutputWeight = 0.05;  // moving averages of the outputs

  explicit DecodeCost(size_t engines);

  // A streamed response relayed from `engine`: `tokens` output tokens, `decode_ns` from its
  // first to its last, at `inflight` requests on the engine on average (>= 1).
  void learn(size_t engine, uint64_t tokens, int64_t decode_ns, double inflight);
  // Any complete response: its output against the limit it asked for (nullopt: none).
  void learn_output(std::optional<uint64_t> max_tokens, uint64_t tokens);
  // The fleet's prefill speed (tokenize budget): ns per computed prompt token, prompt tokens per
  // body byte (0: not known yet).
  void learn_prefill(double ns_per_token, double tokens_per_byte);
  // A new engine (or none) in the slot: its fit starts over.
  void forget(size_t engine);

  DecodeFit fit(size_t engine) const;
  // The decode time per output token a request adds to an engine with `inflight` requests: its
  // own, f.at(inflight + 1), and the slope for each of the others.
  static double marginal_ns(const DecodeFit& f, double inflight);
  // Output tokens a request limited to `max_tokens` is expected to decode (0: not known).
  double expected_output(std::optional<uint64_t> max_tokens) const;
  // Prefill time of `chunk_bytes` of prompt (0: not known).
  double block_ns(uint64_t chunk_bytes) const;

  // Fills each candidate's decode_charge for a request limited to `max_tokens` (0 everywhere when
  // the block time or the expected output is not known yet; 0 for an engine without a fit).
  // Counted for the reference: eligible, not failing. The candidates' overlaps must be filled
  // (`cap`: RJ_ROUTE_MAX_OVERLAP_BLOCKS): add_prefill_wait.
  void charges(std::span<CandidateState> candidates, std::optional<uint64_t> max_tokens, uint64_t chunk_bytes,
               uint32_t cap) const;
  // When some engine is charged for its decode, each candidate is also charged the prefill its
  // requests in flight wait for: in-flight x the blocks it holds fewer of than the warmest counted
  // candidate (capped, single-flight blocks counting as held), since a prefill step makes every
  // request in the batch wait; then every charge is lowered by the least counted one (the best
  // engine pays nothing). Where a faster decoder is busy, leaving the cache for it makes its whole
  // batch wait for the recompute; idle, only this request waits (the cache credit counts that).
  static void add_prefill_wait(std::span<CandidateState> candidates, uint32_t cap);

  size_t engines() const { return engines_; }
  // ramjet_route_decode_seconds_per_token{upstream}, ..._per_request{upstream},
  // ramjet_route_decode_output_share (engines with a fit; ordinals only).
  void write_metrics(metrics::Exposition& x) const;

 private:
  struct Engine {
    std::mutex mu;
    DecodeFitter fitter;  // under mu
    std::atomic<double> base_ns{0};  // the published fit (0: none)
    std::atomic<double> slope_ns{0};
  };
  size_t engines_;
  std::unique_ptr<Engine[]> fits_;
  std::atomic<double> output_share_{0};      // of max_tokens, limited responses (0: none yet)
  std::atomic<double> unlimited_output_{0};  // tokens, unlimited responses (0: none yet)
  std::atomic<double> prefill_ns_per_token_{0};
  std::atomic<double> tokens_per_byte_{0};
};

std::span<const metrics::Family> decode_cost_families();

}  // namespace ramjet::route
