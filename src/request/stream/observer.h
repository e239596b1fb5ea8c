// request/stream/observer: what the data plane tells the rest of ramjet about each routed
// exchange, through one interface. The proxy calls its observers in the order they were added,
// on the exchange's io thread, at these points:
//
//   decided      the routing decision is made (before any engine is tried)
//   dispatched   an attempt on `engine` begins (the load is reserved, nothing is sent yet)
//   first_token  the first generated token was relayed (inference, 200)
//   usage        a complete 200 inference response was accounted (tokens, finish reason)
//   completed    `engine`'s response is complete: its last byte arrived, before the client has
//                all of it, so what an observer learns here is in place for the client's next turn
//   failed       the attempt on `engine` ended without a complete response (the engine failed,
//                timed out, was fenced, the request moves on, or the client left)
//   finished     the exchange is over, however it ended (`result` says how)
//
// Each observer names the events it handles (ExchangeObserver(events)) and is called for those
// only. Observers must not block or throw: they run between the bytes of a response. The journal, the
// decision log, the proxy's own metrics, single-flight leads, index learning and the tokenizer
// shadow are observers; app/main.cc wires them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "request/ingress/endpoint.h"
#include "request/prepare/prepare.h"
#include "request/route/router.h"
#include "request/route/single_flight.h"
#include "request/usage/usage.h"

namespace ramjet::request {

// How a request of a disaggregated fleet (RJ_UPSTREAM_ROLE) was served.
enum class DisaggChoice : uint8_t {
  kNone,         // not a disaggregated fleet, or not an inference request
  kRemote,       // two legs: a prefill engine computed the prompt, the decode engine pulled it
  kCached,       // whole on its decode engine: it computes RJ_DISAGG_MIN_UNCACHED_TOKENS or fewer
  kNoPrefill,    // whole: no prefill engine of its pool in service
  kPrefillBusy,  // whole: every prefill engine at RJ_DISAGG_PREFILL_MAX_INFLIGHT
  kFallback,     // whole: the prefill leg failed (RJ_DISAGG_PREFILL_FAILURE=aggregate)
  kNoDecode,     // whole, on an engine that prefills: no engine that decodes could take it
  kCount,
};
inline std::string_view label(DisaggChoice c) {
  switch (c) {
    case DisaggChoice::kNone: return "none";
    case DisaggChoice::kRemote: return "remote";
    case DisaggChoice::kCached: return "cached";
    case DisaggChoice::kNoPrefill: return "no_prefill";
    case DisaggChoice::kPrefillBusy: return "prefill_busy";
    case DisaggChoice::kFallback: return "fallback";
    case DisaggChoice::kNoDecode: return "no_decode";
    case DisaggChoice::kCount: break;
  }
  return "none";
}

// One routed exchange as observers see it (no payload beyond the prepared request, which only an
// observer that must — index learning, the tokenizer shadow — reads).
struct ExchangeRecord {
  // Observer-owned: the journal's record number (1, 2, ..., set by its `decided`; 0 without one).
  uint64_t seq = 0;
  Endpoint endpoint = Endpoint::kOther;
  const PreparedRequest* prep = nullptr;      // set from `decided` on
  const route::Routed* routed = nullptr;      // set from `decided` on
  int64_t start_ns = 0;        // the request head was read
  int64_t queued_ns = 0;       // time it waited in the waiting room (RJ_ADMISSION_*; 0: it did not wait)
  bool waited_for_wake = false;  // it waited while a parked engine of its pool woke (idle drain)
  bool batch = false;            // its priority class is batch (Proxy::admission_class)
  int64_t dispatch_ns = 0;     // the current attempt was dispatched to its engine
  int64_t head_ns = 0;         // the upstream response head arrived
  int64_t first_token_ns = 0;  // the first generated token was relayed (inference, 200)
  int64_t end_ns = 0;          // set for `finished`
  unsigned status = 0;         // the status the client got
  uint64_t response_bytes = 0;
  bool accounted = false;      // a 200 inference response whose usage is read (`usage` fires)
  const Usage* usage_read = nullptr;  // what usage accounting read so far (accounted exchanges)
  // The journal's finish record: the result and the engine that served (or was tried last).
  std::string_view result = "upstream_error";
  std::optional<size_t> upstream;
  uint32_t units = 0;  // the load units reserved on it
  // Prefill/decode disaggregation: how it was served and, for two legs, the prefill engine, its
  // decision (whose prediction the decode answer's cached_tokens reports: vLLM passes the
  // producer's hit on) and the leg's time; the prompt tokens its decode engine would compute
  // (estimated; set whenever a choice was made).
  DisaggChoice disagg = DisaggChoice::kNone;
  std::optional<size_t> prefill_upstream;
  const route::Routed* prefill_routed = nullptr;
  int64_t prefill_ns = 0;
  uint64_t uncached_tokens = 0;
  // Observer-owned: the single-flight lead of the current attempt (request/stream/observers.h).
  route::SingleFlight::Lease lead;
  // Observer-owned (DecodeCostLearning, RJ_ROUTE_DECODE_COST): the current attempt's engine's
  // in-flight requests (this router's, this one included) at its dispatch and when its response
  // was complete, and that time.
  int64_t dispatch_inflight = 0;
  int64_t end_inflight = 0;
  int64_t engine_end_ns = 0;
};

// The events, as bits: each observer names the ones it handles and is called for those only (an
// empty virtual call per event and observer is a measurable share of a proxied request).
enum ExchangeEvent : uint32_t {
  kDecided = 1u << 0,
  kDispatched = 1u << 1,
  kFirstToken = 1u << 2,
  kUsage = 1u << 3,
  kCompleted = 1u << 4,
  kFailed = 1u << 5,
  kFinished = 1u << 6,
};
inline constexpr size_t kExchangeEventCount = 7;

class ExchangeObserver {
 public:
  // `events`: the ExchangeEvent bits this observer handles.
  explicit ExchangeObserver(uint32_t events) : events_(events) {}
  virtual ~ExchangeObserver() = default;
  uint32_t events() const { return events_; }
  virtual void decided(ExchangeRecord&) {}
  virtual void dispatched(ExchangeRecord&, size_t /*engine*/) {}
  virtual void first_token(ExchangeRecord&) {}
  virtual void usage(ExchangeRecord&, const Usage&) {}
  virtual void completed(ExchangeRecord&, size_t /*engine*/) {}
  virtual void failed(ExchangeRecord&, size_t /*engine*/) {}
  virtual void finished(ExchangeRecord&) {}

 private:
  uint32_t events_;
};

}  // namespace ramjet::request
