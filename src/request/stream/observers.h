// request/stream/observers: the routing state a served exchange changes, as exchange observers
// (request/stream/observer.h). app/main.cc adds them to the proxy.
#pragma once

#include <algorithm>
#include <limits>

#include "request/route/exact_overlap.h"
#include "request/route/prediction_check.h"
#include "request/route/router.h"
#include "request/stream/observer.h"

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
// (route/prediction_check.h), and how much another eligible engine held beyond it.
class ExactPredictions final : public ExchangeObserver {
 public:
  // `exact` (optional): the exact source, asked again when the engine found more than predicted.
  explicit ExactPredictions(route::PredictionCheck& check, const route::ExactOverlap* exact = nullptr)
      : ExchangeObserver(kUsage), check_(check), exact_(exact) {}
  void usage(ExchangeRecord& x, const Usage& u) override {
    const route::Routed* r = x.routed;
    if (r == nullptr || r->exact != route::ExactOutcome::kExact || !x.upstream) return;
    const size_t engine = *x.upstream;
    if (engine >= r->exact_tokens.size()) return;
    // Blocks only placed there moments ago (speculative residency) may or may not be cached by
    // the time the engine prefills: a report anywhere in that range agrees with the prediction.
    // So may a single-flight follower's: it was sent after a leader still prefilling its prefix,
    // and the engine serves whatever the leader cached by then (any amount above the prediction).
    const uint64_t confirmed = r->exact_tokens[engine];
    uint64_t pending = engine < r->exact_provisional.size() ? r->exact_provisional[engine] : 0;
    for (const route::CandidateTerms& c : r->decision.ranked) {
      if (c.ordinal == engine && c.single_flight > 0) pending = std::numeric_limits<uint64_t>::max() - confirmed;
    }
    const uint64_t predicted = std::clamp<uint64_t>(u.cached_tokens.value_or(confirmed), confirmed, confirmed + pending);
    uint64_t best = predicted;
    for (const route::CandidateTerms& c : r->decision.ranked) {
      if (c.eligible && c.ordinal < r->exact_tokens.size()) best = std::max<uint64_t>(best, r->exact_tokens[c.ordinal]);
    }
    // The engine found more than the index held at the decision. When the index holds it now,
    // the events that stored it were in flight (another client had just warmed the engine): late,
    // not a miss. Only the tokens the engine found are looked up, none this request stored.
    if (exact_ != nullptr && u.cached_tokens && *u.cached_tokens > predicted &&
        *u.cached_tokens - predicted > check_.tolerance_tokens(r->exact_block_size)) {
      const auto now = exact_->resident_now(engine, *x.prep, *u.cached_tokens);
      if (now && *now + check_.tolerance_tokens(r->exact_block_size) >= *u.cached_tokens) {
        check_.record_late(engine, best - predicted);
        return;
      }
    }
    // vLLM's Messages usage carries cache_read_input_tokens only with --enable-prompt-tokens-details
    // on vLLM >= 0.32 (older engines never send it): its absence says nothing there.
    check_.record(engine, predicted, u.cached_tokens, r->exact_block_size, best - predicted,
                  x.endpoint != Endpoint::kMessages);
  }

 private:
  route::PredictionCheck& check_;
  const route::ExactOverlap* exact_;
};

}  // namespace ramjet::request
