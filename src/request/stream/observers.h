// request/stream/observers: the routing state a served exchange changes, as exchange observers
// (request/stream/observer.h). app/main.cc adds them to the proxy.
#pragma once

#include <algorithm>
#include <limits>
#include <vector>

#include "common/clock.h"
#include "request/route/decode_cost.h"
#include "request/route/late_check.h"
#include "request/route/prediction_check.h"
#include "request/route/router.h"
#include "request/stream/observer.h"
#include "request/stream/tokenize_budget.h"
#include "upstream/fleet.h"

namespace ramjet::request {

// Single-flight: a request whose prefix is new everywhere leads it on the engine it is
// dispatched to; concurrent requests with the same leading blocks follow it there while it
// prefills. The lead ends with the attempt (its response complete, or the attempt failed).
class SingleFlightLeads final : public ExchangeObserver {
 public:
  explicit SingleFlightLeads(route::Router& router)
      : ExchangeObserver(kDispatched | kCompleted | kFailed), router_(router) {}
  void dispatched(ExchangeRecord& x, size_t engine) override { x.lead = router_.lead(engine, *x.routed, *x.prep); }
  void completed(ExchangeRecord& x, size_t) override { x.lead.end(); }
  void failed(ExchangeRecord& x, size_t) override { x.lead.end(); }

 private:
  route::Router& router_;
};

// Index learning: a complete 200 response on an inference endpoint tells the router's overlap
// sources that its engine now holds the request's prefix.
class IndexLearning final : public ExchangeObserver {
 public:
  explicit IndexLearning(route::Router& router) : ExchangeObserver(kCompleted), router_(router) {}
  void completed(ExchangeRecord& x, size_t engine) override {
    if (x.accounted) router_.observe(engine, *x.prep);
  }

 private:
  route::Router& router_;
};

// Exact placements checked: the usage of a complete 200 response placed on exact overlaps tells
// the prediction check what the chosen engine predicted and what it reported cached
// (route/prediction_check.h), and how much another eligible engine held beyond it. A prediction
// the engine contradicted gets a second look (route/late_check.h) before it counts as a miss: one
// it beat may be late, one it fell short of may be an eviction. An engine placed on its
// fingerprint estimate (its index untrusted: ExactStamp::estimated) predicted nothing.
class ExactPredictions final : public ExchangeObserver {
 public:
  // `late` (optional): the second look; without it, every prediction is recorded as it stands.
  explicit ExactPredictions(route::PredictionCheck& check, route::LateCheck* late = nullptr)
      : ExchangeObserver(kUsage), check_(check), late_(late) {}
  void usage(ExchangeRecord& x, const Usage& u) override {
    // Two legs (prefill/decode disaggregation): the decode answer's cached_tokens is the prefill
    // engine's hit (vLLM passes remote_prefill_cached_tokens on), so that engine's prediction is
    // the one it checks.
    const bool legs = x.prefill_upstream.has_value() && x.prefill_routed != nullptr;
    const route::Routed* r = legs ? x.prefill_routed : x.routed;
    const std::optional<size_t> served = legs ? x.prefill_upstream : x.upstream;
    if (r == nullptr || !route::placed_exactly(r->exact) || !served) return;
    const size_t engine = *served;
    if (engine >= r->exact_tokens.size() || estimated(*r, engine)) return;
    // Blocks only placed there moments ago (speculative residency) may or may not be cached by
    // the time the engine prefills: a report anywhere in that range agrees with the prediction.
    // So may a single-flight follower's: it was sent after a leader still prefilling its prefix,
    // and the engine serves whatever the leader cached by then (any amount above the prediction).
    // exact_tokens counts every tier the engine holds the prompt in (GPU, then what its offload
    // connector loads), as the engine's cached_tokens does (route/prediction_check.h).
    const uint64_t confirmed = r->exact_tokens[engine];
    uint64_t pending = engine < r->exact_provisional.size() ? r->exact_provisional[engine] : 0;
    for (const route::CandidateTerms& c : r->decision.ranked) {
      if (c.ordinal == engine && c.single_flight > 0) pending = std::numeric_limits<uint64_t>::max() - confirmed;
    }
    const uint64_t predicted = std::clamp<uint64_t>(u.cached_tokens.value_or(confirmed), confirmed, confirmed + pending);
    uint64_t best = predicted;
    for (const route::CandidateTerms& c : r->decision.ranked) {
      if (c.eligible && c.ordinal < r->exact_tokens.size() && !estimated(*r, c.ordinal)) {
        best = std::max<uint64_t>(best, r->exact_tokens[c.ordinal]);
      }
    }
    // The engine found more than the index held at the decision (its events may have been in
    // flight: only the tokens it found are looked up again, none this request stored), or less
    // (it may have evicted predicted blocks in between: the predicted tokens are looked up).
    const std::vector<uint32_t>& tokens = x.prep->exact.tokens;
    const uint64_t tolerance = check_.tolerance_tokens(r->exact_block_size);
    if (late_ != nullptr && u.cached_tokens) {
      const uint64_t cached = *u.cached_tokens;
      const uint64_t look = std::max(cached, predicted);
      const bool beyond = cached > predicted ? cached - predicted > tolerance : predicted - cached > tolerance;
      if (beyond && look <= tokens.size()) {
        late_->submit(route::Misprediction{
            .engine = engine,
            .tokens = std::vector<uint32_t>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(look)),
            .model = x.prep->exact.model,
            .cache_salt = x.prep->exact.cache_salt,
            .predicted = predicted,
            .cached = cached,
            .block_size = r->exact_block_size,
            .regret_tokens = best - predicted,
            .stamp = engine < r->exact_stamps.size() ? r->exact_stamps[engine] : route::ExactStamp{}});
        return;
      }
    }
    // An absent cached count means 0 only in a usage that was sent (older vLLM leaves a 0 out): a
    // stream without stream_options.include_usage carries no usage at all, and vLLM's Messages
    // usage has cache_read_input_tokens only from 0.32 on (with --enable-prompt-tokens-details).
    check_.record(engine, predicted, u.cached_tokens, r->exact_block_size, best - predicted,
                  x.endpoint != Endpoint::kMessages && u.prompt_tokens.has_value());
  }

 private:
  static bool estimated(const route::Routed& r, size_t engine) {
    return engine < r.exact_stamps.size() && r.exact_stamps[engine].estimated;
  }
  route::PredictionCheck& check_;
  route::LateCheck* late_;
};

// The tokenize budget learns the fleet's prefill speed from the responses ramjet relays
// (request/stream/tokenize_budget.h): a streamed one's time from dispatch to its first token per
// prompt token the engine computed, and any one's prompt tokens per body byte.
class TokenizeBudgetLearning final : public ExchangeObserver {
 public:
  explicit TokenizeBudgetLearning(TokenizeBudget& budget) : ExchangeObserver(kUsage), budget_(budget) {}
  void usage(ExchangeRecord& x, const Usage& u) override {
    if (!u.prompt_tokens || x.prep == nullptr) return;
    // (A decode leg's first token came after a pull, not a prefill: its time teaches nothing.)
    const bool streamed = x.prep->stream.value_or(false) && x.first_token_ns > x.dispatch_ns && x.dispatch_ns > 0 &&
                          !x.prefill_upstream;
    budget_.learn(x.prep->body.size(), *u.prompt_tokens, u.cached_tokens.value_or(0),
                  streamed ? x.first_token_ns - x.dispatch_ns : 0);
  }

 private:
  TokenizeBudget& budget_;
};

// RJ_ROUTE_DECODE_COST learns each engine's decode speed from the responses ramjet relays
// (route/decode_cost.h), those that report their output tokens (a stream only with
// stream_options.include_usage): a streamed one's time from its first token to the engine's last
// byte, a whole one's time from dispatch to the engine's last byte less the prefill its computed
// prompt tokens take at the fleet's learned speed (not a disaggregated request's decode leg: its
// prefill ran elsewhere), per output token, at the engine's mean in-flight count over it (at
// dispatch and at its end); every one's output against its max_tokens; and the fleet's prefill
// speed as the tokenize budget learned it. Runs after TokenizeBudgetLearning. It records the
// in-flight counts and the end time itself (ExchangeRecord's observer-owned fields), so a proxy
// without RJ_ROUTE_DECODE_COST does none of it.
class DecodeCostLearning final : public ExchangeObserver {
 public:
  DecodeCostLearning(route::DecodeCost& cost, const TokenizeBudget& budget, const upstream::Fleet& fleet,
                     const Clock& clock)
      : ExchangeObserver(kDispatched | kCompleted | kUsage), cost_(cost), budget_(budget), fleet_(fleet), clock_(clock) {}
  void dispatched(ExchangeRecord& x, size_t engine) override {
    x.dispatch_inflight = fleet_.at(engine).inflight();
    x.engine_end_ns = 0;
  }
  void completed(ExchangeRecord& x, size_t engine) override {
    x.engine_end_ns = clock_.now_ns();
    x.end_inflight = fleet_.at(engine).inflight();
  }
  void usage(ExchangeRecord& x, const Usage& u) override {
    if (!x.upstream || x.prep == nullptr || !u.completion_tokens) return;
    cost_.learn_prefill(budget_.ns_per_token(), budget_.tokens_per_byte());
    cost_.learn_output(x.prep->max_output_tokens, *u.completion_tokens);
    if (x.dispatch_ns <= 0 || x.engine_end_ns <= x.dispatch_ns) return;
    int64_t decode_ns = 0;
    if (x.prep->stream.value_or(false)) {
      if (x.first_token_ns > x.dispatch_ns) decode_ns = x.engine_end_ns - x.first_token_ns;
    } else if (u.prompt_tokens && budget_.ns_per_token() > 0 && !x.prefill_upstream) {
      const uint64_t computed = *u.prompt_tokens - std::min(*u.prompt_tokens, u.cached_tokens.value_or(0));
      const double prefill_ns = static_cast<double>(computed) * budget_.ns_per_token();
      const double whole_ns = static_cast<double>(x.engine_end_ns - x.dispatch_ns);
      if (prefill_ns < whole_ns) decode_ns = static_cast<int64_t>(whole_ns - prefill_ns);
    }
    if (decode_ns <= 0) return;
    cost_.learn(*x.upstream, *u.completion_tokens, decode_ns,
                static_cast<double>(x.dispatch_inflight + x.end_inflight) / 2);
  }

 private:
  route::DecodeCost& cost_;
  const TokenizeBudget& budget_;
  const upstream::Fleet& fleet_;
  const Clock& clock_;
};

}  // namespace ramjet::request
