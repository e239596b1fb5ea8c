// observe/decision_log: the last N routing decisions in memory, for the dashboard's Decisions tab
// (GET /api/v1/decisions). One record per routed request: the endpoint, policy and outcome labels,
// the chosen ordinal, the request size, whether its prefix was cold, every candidate's terms and,
// with exact routing, how it answered and each engine's predicted resident prompt tokens.
//
// Privacy: like the journal, a record holds closed-set labels, ordinals, sizes, token counts and
// scores only — never prompt bytes, token ids, fingerprints, request ids or hosts; the types below
// cannot carry them.
//
// Lock-light: push() takes a ticket from an atomic counter and writes its own slot under that
// slot's mutex (contended only by a reader copying the same slot, or by a writer a whole ring
// behind). Slots keep their candidate vectors, so a steady state push() does not allocate.
// Readers copy slots one at a time and drop records that were overwritten meanwhile.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "request/ingress/endpoint.h"
#include "request/route/policy.h"
#include "request/route/router.h"
#include "request/stream/observer.h"

namespace ramjet::observe {

struct DecisionRecord {
  uint64_t seq = 0;  // 1, 2, ... (process-wide order of push())
  int64_t unix_ms = 0;
  request::Endpoint endpoint = request::Endpoint::kOther;
  std::string_view policy;  // Policy::name(): a static label (prefix|load|round_robin)
  route::Outcome outcome = route::Outcome::kSingle;
  std::optional<uint32_t> chosen;  // the first candidate dispatch tries; none when nothing can serve
  uint64_t request_bytes = 0;
  bool cold = false;
  bool fail_open = false;
  std::vector<route::CandidateTerms> candidates;  // ranked, best first (request/route/terms.h)
  // Exact routing (route::Routed): its outcome (kNone: no exact source, or not asked) and, when it
  // looked the prompt up, each engine's predicted resident prompt tokens by ordinal (else empty)
  // counted in blocks of exact_block_size tokens.
  route::ExactOutcome exact = route::ExactOutcome::kNone;
  std::vector<uint32_t> exact_tokens;
  std::vector<uint8_t> exact_estimated;  // by ordinal: 1 when a fingerprint estimate stood in (exact_partial)
  uint32_t exact_block_size = 0;
};

class DecisionLog {
 public:
  // `engines` sizes the per-engine routed counters (ordinals >= engines are not counted).
  explicit DecisionLog(size_t capacity = 200, size_t engines = 0);

  // Records one decision (any thread). `policy` must outlive the log (a static label).
  void push(const route::Routed& routed, std::string_view policy, int64_t unix_ms);
  void push(const route::Routed& routed, std::string_view policy);

  // The newest `n` records (at most capacity()), newest first.
  std::vector<DecisionRecord> last(size_t n) const;
  // {"total":..,"capacity":..,"columns":[{"key":..,"label":..}],"decisions":[...]} with the newest
// `n` records, newest first; columns are the candidate terms the dashboard shows as numbers.
  std::string json(size_t n) const;

  size_t capacity() const { return slots_.size(); }
  uint64_t total() const { return next_.load(std::memory_order_acquire); }
  // Decisions whose chosen engine was `engine` (the dashboard's per-engine request rate).
  uint64_t routed_to(size_t engine) const;
  size_t engines() const { return engines_; }

 private:
  struct Slot {
    mutable std::mutex mu;
    DecisionRecord rec;  // rec.seq == 0: never written
  };
  std::vector<Slot> slots_;
  std::atomic<uint64_t> next_{0};
  size_t engines_;
  std::unique_ptr<std::atomic<uint64_t>[]> routed_;
};

// The decision log as an exchange observer: one record per decision.
class DecisionLogObserver final : public request::ExchangeObserver {
 public:
  DecisionLogObserver(DecisionLog& log, const route::Router& router)
      : ExchangeObserver(request::kDecided), log_(log), router_(router) {}
  void decided(request::ExchangeRecord& x) override { log_.push(*x.routed, router_.policy()->name()); }

 private:
  DecisionLog& log_;
  const route::Router& router_;
};

// One record as a JSON object (the element type of json()'s "decisions").
void append_decision_json(std::string& out, const DecisionRecord& r);

// A finite number in its shortest form, non-finite values as null (shared with the dashboard;
// strings: common/json.h).
void append_json_number(std::string& out, double v);

}  // namespace ramjet::observe
