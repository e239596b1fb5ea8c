#include "request/stream/metrics.h"

#include <string>

namespace ramjet::request {
namespace {
constexpr size_t kCodes = 500;  // 100..599
constexpr std::array<std::string_view, 3> kStream = {"false", "true", "unknown"};
constexpr std::array<std::string_view, 5> kFinish = {"stop", "length", "tool_calls", "cancelled", "other"};
constexpr std::array<std::string_view, 4> kCache = {"full", "partial", "cold", "unknown"};
constexpr std::array<std::string_view, 4> kShims = {"max_tokens", "max_completion_tokens",
                                                    "content_flatten", "reasoning_effort"};

std::string ep_label(size_t e) {
  return "endpoint=\"" + std::string(endpoint_label(static_cast<Endpoint>(e))) + "\"";
}
}  // namespace

std::string_view rejection_label(Rejection r) {
  switch (r) {
    case Rejection::kBodyTooLarge: return "body_too_large";
    case Rejection::kHeaderTooLarge: return "header_too_large";
    case Rejection::kHeaderTimeout: return "header_timeout";
    case Rejection::kBodyTimeout: return "body_timeout";
    case Rejection::kBadRequest: return "bad_request";
    case Rejection::kCount: break;
  }
  return "bad_request";
}

std::string_view upstream_error_label(UpstreamError r) {
  switch (r) {
    case UpstreamError::kConnect: return "connect";
    case UpstreamError::kTimeout: return "timeout";
    case UpstreamError::kProtocol: return "protocol";
    case UpstreamError::kRetryableStatus: return "retryable_status";
    case UpstreamError::kReadError: return "read_error";
    case UpstreamError::kCount: break;
  }
  return "protocol";
}

ProxyMetrics::ProxyMetrics(size_t n)
    : requests(new observe::Counter[kEndpoints * 3 * kCodes]),
      fail_open_dispatches(new observe::Counter[n ? n : 1]),
      request_duration({0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}),
      ttft(observe::exponential_buckets(0.01, 2, 19)),  // 0.01 .. 2621 s
      decode_rate({1, 2, 5, 10, 15, 20, 30, 40, 50, 60, 80, 100, 120, 160, 200, 240}),
      upstreams(n) {}

void ProxyMetrics::count_request(Endpoint e, StreamKind s, unsigned code) {
  if (code < 100 || code > 599) code = 599;
  requests[(ep_index(e) * 3 + static_cast<size_t>(s)) * kCodes + (code - 100)].inc();
}

void ProxyMetrics::write(observe::Exposition& x) const {
  x.family("ramjet_requests_total", "counter", "Requests answered, by endpoint, status code and stream flag.");
  for (size_t e = 0; e < kEndpoints; ++e)
    for (size_t s = 0; s < 3; ++s)
      for (size_t c = 0; c < kCodes; ++c) {
        uint64_t v = requests[(e * 3 + s) * kCodes + c].get();
        if (v) {
          x.sample("ramjet_requests_total",
                   ep_label(e) + ",code=\"" + std::to_string(c + 100) + "\",stream=\"" +
                       std::string(kStream[s]) + "\"",
                   v);
        }
      }
  x.family("ramjet_requests_inflight", "gauge", "Requests being served right now.");
  x.sample("ramjet_requests_inflight", "", inflight.get());

  x.family("ramjet_client_disconnects_total", "counter", "Clients that went away before the response completed.");
  for (size_t e = 0; e < kEndpoints; ++e) x.sample("ramjet_client_disconnects_total", ep_label(e), client_disconnects[e].get());

  x.family("ramjet_upstream_errors_total", "counter", "Upstream attempts that failed, by reason.");
  for (size_t e = 0; e < kEndpoints; ++e)
    for (size_t r = 0; r < static_cast<size_t>(UpstreamError::kCount); ++r)
      x.sample("ramjet_upstream_errors_total",
               ep_label(e) + ",reason=\"" + std::string(upstream_error_label(static_cast<UpstreamError>(r))) + "\"",
               upstream_errors[e][r].get());

  x.family("ramjet_malformed_json_total", "counter", "Inference request bodies that are not a JSON object (forwarded unchanged).");
  for (size_t e = 0; e < kEndpoints; ++e) x.sample("ramjet_malformed_json_total", ep_label(e), malformed_json[e].get());

  x.family("ramjet_request_rejections_total", "counter", "Requests rejected by ramjet before routing, by reason.");
  for (size_t r = 0; r < rejections.size(); ++r)
    x.sample("ramjet_request_rejections_total",
             "reason=\"" + std::string(rejection_label(static_cast<Rejection>(r))) + "\"", rejections[r].get());

  x.family("ramjet_usage_parse_failures_total", "counter", "Response bodies or SSE events whose usage could not be parsed.");
  x.sample("ramjet_usage_parse_failures_total", "", usage_parse_failures.get());
  x.family("ramjet_prompt_tokens_total", "counter", "Prompt tokens reported by engines.");
  x.sample("ramjet_prompt_tokens_total", "", prompt_tokens.get());
  x.family("ramjet_cached_prompt_tokens_total", "counter", "Prompt tokens served from the engines' prefix cache.");
  x.sample("ramjet_cached_prompt_tokens_total", "", cached_prompt_tokens.get());
  x.family("ramjet_completion_tokens_total", "counter", "Completion tokens reported by engines.");
  x.sample("ramjet_completion_tokens_total", "", completion_tokens.get());

  x.family("ramjet_finish_reasons_total", "counter", "Finish reasons of complete responses, bucketed.");
  for (size_t e = 0; e < kEndpoints; ++e)
    for (size_t r = 0; r < kFinish.size(); ++r)
      x.sample("ramjet_finish_reasons_total", ep_label(e) + ",reason=\"" + std::string(kFinish[r]) + "\"",
               finish_reasons[e][r].get());
  x.family("ramjet_cache_requests_total", "counter", "Complete responses by prompt-cache outcome.");
  for (size_t e = 0; e < kEndpoints; ++e)
    for (size_t r = 0; r < kCache.size(); ++r)
      x.sample("ramjet_cache_requests_total", ep_label(e) + ",outcome=\"" + std::string(kCache[r]) + "\"",
               cache_requests[e][r].get());
  x.family("ramjet_shim_rewrites_total", "counter", "Request shims applied, by shim.");
  for (size_t s = 0; s < kShims.size(); ++s)
    x.sample("ramjet_shim_rewrites_total", "shim=\"" + std::string(kShims[s]) + "\"", shim_rewrites[s].get());

  x.family("ramjet_route_fail_open", "gauge", "1 while no upstream is healthy and requests fail open.");
  x.sample("ramjet_route_fail_open", "", route_fail_open.get());
  x.family("ramjet_route_fail_open_dispatches_total", "counter", "Fail-open dispatches per upstream ordinal.");
  for (size_t u = 0; u < upstreams; ++u)
    x.sample("ramjet_route_fail_open_dispatches_total", "upstream=\"" + std::to_string(u) + "\"",
             fail_open_dispatches[u].get());
  x.family("ramjet_route_decisions_total", "counter", "Routing decisions by outcome.");
  for (size_t o = 0; o < route_decisions.size(); ++o) {
    x.sample("ramjet_route_decisions_total",
             "outcome=\"" + std::string(route::outcome_label(static_cast<route::Outcome>(o))) + "\"",
             route_decisions[o].get());
  }

  x.family("ramjet_request_duration_seconds", "histogram", "Request duration from routing to the last byte.");
  request_duration.write(x, "ramjet_request_duration_seconds", "");
  x.family("ramjet_ttft_seconds", "histogram", "Time to first generated token (streaming responses).");
  ttft.write(x, "ramjet_ttft_seconds", "");
  x.family("ramjet_decode_tokens_per_second", "histogram", "Per-request decode rate after the first token.");
  decode_rate.write(x, "ramjet_decode_tokens_per_second", "");
  x.family("ramjet_request_body_bytes_total", "counter", "Request body bytes forwarded.");
  x.sample("ramjet_request_body_bytes_total", "", request_body_bytes.get());
  x.family("ramjet_response_body_bytes_total", "counter", "Response body bytes relayed.");
  x.sample("ramjet_response_body_bytes_total", "", response_body_bytes.get());
}

}  // namespace ramjet::request
