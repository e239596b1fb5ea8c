// request/stream/metrics: the data plane's metric families, declared in one table
// (proxy_families(), docs/metrics.md) with closed label sets pre-initialised to zero. Status
// codes, endpoints, outcomes and upstream ordinals are array indexes, so updates on the request
// path are relaxed atomic increments: no lock, no allocation.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <utility>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "metrics/histogram.h"
#include "metrics/metrics.h"
#include "request/ingress/body_budget.h"
#include "request/ingress/endpoint.h"
#include "request/route/policy.h"
#include "request/route/router.h"
#include "request/stream/observer.h"
#include "request/usage/usage.h"

namespace ramjet::request {

inline constexpr size_t kEndpoints = 8;
inline constexpr size_t kInferenceEndpoints = 4;  // chat, completions, responses, messages
inline size_t ep_index(Endpoint e) { return static_cast<size_t>(e); }

enum class Rejection {
  kBodyTooLarge, kHeaderTooLarge, kHeaderTimeout, kBodyTimeout, kBadRequest,
  kUpstreamHeaderTooLarge,  // the forwarded head passes RJ_UPSTREAM_MAX_HEADER_BYTES / _COUNT (431)
  kBufferFull,              // RJ_MAX_BUFFERED_BYTES would be passed (503)
  kUnknownPath,             // not a path the API port serves (404)
  kMethodNotAllowed,        // a served path, another method (405)
  kBadModel,                // "model" not a string, empty or over 1,024 bytes (400)
  kModelRequired,           // no "model" while the engines serve several base models (400)
  kUnknownModel,            // a model no engine serves (404, no engine dialed)
  kOverloaded,              // the waiting room was full or the wait too long (429)
  kJsonTooDense,            // the body's parse needed more than 8 (24 rewritten) bytes a body byte (413)
  kCount
};
std::string_view rejection_label(Rejection r);

// An upstream attempt that failed. kFenced: it was waiting for its engine's first byte when the
// engine was fenced, and moved on to another engine. kUnresponsive: it had waited past its own
// first-byte budget when a health probe of its engine failed, and moved on.
enum class UpstreamError { kConnect, kTimeout, kProtocol, kRetryableStatus, kReadError, kFenced, kUnresponsive, kCount };
std::string_view upstream_error_label(UpstreamError r);

// A request ended by a timeout: RJ_UPSTREAM_FIRST_BYTE_TIMEOUT_MS, RJ_UPSTREAM_IDLE_TIMEOUT_MS,
// RJ_CLIENT_SEND_TIMEOUT_MS.
enum class Timeout { kFirstByte, kUpstreamIdle, kClientSend, kCount };
std::string_view timeout_label(Timeout t);  // first_byte, upstream_idle, client_send

// How a request failed the same way on two engines before any usable response (the request's
// fault: no engine is blamed): dropped, bad_response, status_502, status_503.
enum class Blame { kDropped, kBadResponse, kStatus502, kStatus503, kCount };
std::string_view blame_label(Blame b);

enum class StreamKind { kFalse, kTrue, kUnknown, kCount };

// The families ProxyMetrics::write() writes, in order.
std::span<const metrics::Family> proxy_families();

struct ProxyMetrics {
  explicit ProxyMetrics(size_t upstreams);

  void count_request(Endpoint e, StreamKind s, unsigned code);
  // A routing decision's winner (the first candidate dispatch tries; nullptr when nothing can
  // serve) and whether prefix affinity applied (a prefix policy and a fingerprinted body):
  // profile choices, overlap/affinity histograms, single-flight followers. (route_decisions is
  // counted by the caller.)
  void count_route(const route::Routed& routed, const route::CandidateTerms* winner, bool prefix);
  // A response head from upstream `u` (every attempt that got one, retried 502/503 included).
  void count_upstream_response(size_t u, unsigned status);
  // A complete 200 inference response's usage: TPOT, context/output tokens, TTFT by cache
  // outcome. Times are the exchange's clock_ns values (first_token_ns 0: not streamed).
  void observe_usage(Endpoint e, const Usage& u, int64_t start_ns, int64_t first_token_ns, int64_t now_ns);
  // ramjet_upstream_info{upstream,profile}: the declared profile of each upstream ordinal.
  // Each upstream's decode profile label (thread-safe reader; unset: every upstream "none").
  void set_profiles(std::function<route::Profile(size_t)> profiles) { upstream_profiles = std::move(profiles); }
  // ramjet_upstream_dp_rank{upstream,engine}: an ordinal's (rank, its engine's lowest ordinal)
  // when it is one data-parallel rank, else nullopt (thread-safe reader; unset: none).
  using RankOf = std::function<std::optional<std::pair<uint32_t, size_t>>(size_t)>;
  void set_ranks(RankOf ranks) { upstream_ranks = std::move(ranks); }
  void write(metrics::Exposition& x) const;

  // requests_total[endpoint][stream][code - 100]
  std::unique_ptr<metrics::Counter[]> requests;
  metrics::Gauge inflight;
  std::array<metrics::Counter, kEndpoints> client_disconnects;
  std::array<std::array<metrics::Counter, static_cast<size_t>(UpstreamError::kCount)>, kEndpoints> upstream_errors;
  std::array<metrics::Counter, kEndpoints> stale_retries;  // a pooled connection found closed, sent again
  std::array<metrics::Counter, kEndpoints> malformed_json;
  std::array<metrics::Counter, static_cast<size_t>(Rejection::kCount)> rejections;
  std::array<metrics::Counter, 2> priority_ignored;  // not_allowed, unknown_value
  std::array<std::array<metrics::Counter, static_cast<size_t>(Timeout::kCount)>, kEndpoints> timeouts;
  std::array<std::array<metrics::Counter, static_cast<size_t>(Blame::kCount)>, kEndpoints> blamed;
  const BodyBudget* budget = nullptr;  // RJ_MAX_BUFFERED_BYTES (the proxy's; null: written as 0)
  metrics::Counter usage_parse_failures;
  metrics::Counter prompt_tokens, cached_prompt_tokens, completion_tokens;
  std::array<std::array<metrics::Counter, 5>, kEndpoints> finish_reasons;  // stop,length,tool_calls,cancelled,other
  std::array<std::array<metrics::Counter, 4>, kEndpoints> cache_requests;  // full,partial,cold,unknown
  std::array<metrics::Counter, 4> shim_rewrites;  // max_tokens,max_completion_tokens,content_flatten,reasoning_effort
  metrics::Gauge route_fail_open;
  std::unique_ptr<metrics::Counter[]> fail_open_dispatches;  // per upstream
  std::array<metrics::Counter, static_cast<size_t>(route::Outcome::kCount)> route_decisions;
  std::array<metrics::Counter, 3> profile_choices;  // the winner's declared profile: none,mtp,standard
  metrics::Counter single_flight_followers;
  metrics::Histogram route_overlap;   // the winner's raw overlap, blocks (prefix routing)
  metrics::Histogram route_affinity;  // the winner's capped affinity, blocks (prefix routing)
  std::unique_ptr<metrics::Counter[]> upstream_requests;  // [upstream][1xx..5xx]
  std::function<route::Profile(size_t)> upstream_profiles;
  RankOf upstream_ranks;
  metrics::Histogram request_duration;  // seconds
  metrics::Histogram ttft;              // seconds to first generated token (streaming)
  metrics::Histogram tpot;              // seconds per output token after the first (streaming)
  // [inference endpoint][full,partial,cold,unknown]: TTFT by prompt-cache outcome (streaming)
  std::array<std::array<std::unique_ptr<metrics::Histogram>, 4>, kInferenceEndpoints> cache_ttft;
  metrics::Histogram decode_rate;       // generated tokens per second after the first token
  metrics::Histogram context_tokens;    // prompt tokens per response
  metrics::Histogram output_tokens;     // completion tokens per response
  metrics::Counter request_body_bytes, response_body_bytes;
  // Prefill/decode disaggregation: requests by DisaggChoice; prefill legs by outcome
  // (ok, failed, no_params, refused, client_gone); the successful legs' seconds.
  std::array<metrics::Counter, static_cast<size_t>(DisaggChoice::kCount)> disagg_choices;
  std::array<metrics::Counter, 5> prefill_legs;
  metrics::Histogram prefill_leg_seconds;
  size_t upstreams;
};

// The proxy's own observer of each exchange (request/stream/observer.h): routing decisions
// (outcome, fail-open, the winner's terms), time to first token, and a complete response's usage.
class ExchangeMetrics final : public ExchangeObserver {
 public:
  // `prefix`: the policy routes by prefix (decisions of fingerprinted requests are counted as such).
  ExchangeMetrics(ProxyMetrics& m, const Clock& clock, bool prefix)
      : ExchangeObserver(kDecided | kFirstToken | kUsage), m_(m), clock_(clock), prefix_(prefix) {}
  void decided(ExchangeRecord& x) override;
  void first_token(ExchangeRecord& x) override;
  void usage(ExchangeRecord& x, const Usage& u) override;

 private:
  ProxyMetrics& m_;
  const Clock& clock_;
  bool prefix_;
};

}  // namespace ramjet::request
