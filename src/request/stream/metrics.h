// request/stream/metrics: the data plane's metric families, declared in one place with closed
// label sets (pre-initialised to zero). Status codes are indexed, so no lock on the hot path.
#pragma once

#include <array>
#include <memory>
#include <string_view>

#include "observe/histogram.h"
#include "observe/metrics.h"
#include "request/ingress/endpoint.h"
#include "request/route/policy.h"

namespace ramjet::request {

inline constexpr size_t kEndpoints = 7;
inline size_t ep_index(Endpoint e) { return static_cast<size_t>(e); }

enum class Rejection { kBodyTooLarge, kHeaderTooLarge, kHeaderTimeout, kBodyTimeout, kBadRequest, kCount };
std::string_view rejection_label(Rejection r);

enum class UpstreamError { kConnect, kTimeout, kProtocol, kRetryableStatus, kReadError, kCount };
std::string_view upstream_error_label(UpstreamError r);

enum class StreamKind { kFalse, kTrue, kUnknown, kCount };

struct ProxyMetrics {
  explicit ProxyMetrics(size_t upstreams);

  void count_request(Endpoint e, StreamKind s, unsigned code);
  void write(observe::Exposition& x) const;

  // requests_total[endpoint][stream][code - 100]
  std::unique_ptr<observe::Counter[]> requests;
  observe::Gauge inflight;
  std::array<observe::Counter, kEndpoints> client_disconnects;
  std::array<std::array<observe::Counter, static_cast<size_t>(UpstreamError::kCount)>, kEndpoints> upstream_errors;
  std::array<observe::Counter, kEndpoints> malformed_json;
  std::array<observe::Counter, static_cast<size_t>(Rejection::kCount)> rejections;
  observe::Counter usage_parse_failures;
  observe::Counter prompt_tokens, cached_prompt_tokens, completion_tokens;
  std::array<std::array<observe::Counter, 5>, kEndpoints> finish_reasons;  // stop,length,tool_calls,cancelled,other
  std::array<std::array<observe::Counter, 4>, kEndpoints> cache_requests;  // full,partial,cold,unknown
  std::array<observe::Counter, 4> shim_rewrites;  // max_tokens,max_completion_tokens,content_flatten,reasoning_effort
  observe::Gauge route_fail_open;
  std::unique_ptr<observe::Counter[]> fail_open_dispatches;  // per upstream
  std::array<observe::Counter, static_cast<size_t>(route::Outcome::kCount)> route_decisions;
  observe::Histogram request_duration;  // seconds
  observe::Histogram ttft;              // seconds to first generated token (streaming)
  observe::Histogram decode_rate;       // generated tokens per second after the first token
  observe::Counter request_body_bytes, response_body_bytes;
  size_t upstreams;
};

}  // namespace ramjet::request
