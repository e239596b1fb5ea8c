#include "request/stream/metrics.h"

#include <string>

#include "common/bytes.h"
#include "common/log.h"

namespace ramjet::request {
namespace {

constexpr size_t kCodes = 500;  // 100..599
constexpr std::array<std::string_view, 3> kStream = {"false", "true", "unknown"};
constexpr std::array<std::string_view, 5> kFinish = {"stop", "length", "tool_calls", "cancelled", "other"};
constexpr std::array<std::string_view, 4> kCache = {"full", "partial", "cold", "unknown"};
constexpr std::array<std::string_view, 4> kShims = {"max_tokens", "max_completion_tokens",
                                                    "content_flatten", "reasoning_effort"};
constexpr std::array<std::string_view, 5> kClasses = {"1xx", "2xx", "3xx", "4xx", "5xx"};
constexpr std::array<route::Profile, 3> kProfiles = {route::Profile::kNone, route::Profile::kMtp,
                                                     route::Profile::kStandard};

using metrics::Family;
using metrics::MetricKind;

enum class F {
  kRequests, kInflight, kClientDisconnects, kUpstreamErrors, kStaleRetries, kMalformedJson, kRejections,
  kPriorityIgnored, kTimeouts, kBlamed, kBufferedBytes, kBufferedCap,
  kUsageParseFailures, kPromptTokens, kCachedPromptTokens, kCompletionTokens, kFinishReasons,
  kCacheRequests, kShimRewrites, kRouteFailOpen, kFailOpenDispatches, kRouteDecisions,
  kProfileChoices, kSingleFlightFollowers, kRouteOverlap, kRouteAffinity, kUpstreamRequests,
  kUpstreamInfo, kUpstreamDpRank, kRequestDuration, kTtft, kTpot, kCacheTtft, kDecodeRate, kContextTokens,
  kOutputTokens, kRequestBodyBytes, kResponseBodyBytes, kDisaggRequests, kDisaggPrefillLegs, kDisaggPrefillSeconds,
  kCount
};

constexpr std::array<Family, static_cast<size_t>(F::kCount)> kFamilies = {{
    {"ramjet_requests_total", MetricKind::kCounter, "endpoint,code,stream",
     "Requests answered, by endpoint (chat, completions, responses, messages, models, health, "
     "other, unknown), status code and stream flag (true, false, unknown). Codes appear once "
     "seen. 499: the client went away or stopped reading; a response the engine cut or that "
     "timed out after its head went out counts as 502 or 504 (the client saw 200, then an error "
     "event), so code=\"200\" is only complete responses."},
    {"ramjet_requests_inflight", MetricKind::kGauge, "", "Requests being served right now."},
    {"ramjet_client_disconnects_total", MetricKind::kCounter, "endpoint",
     "Clients that went away before the response completed."},
    {"ramjet_upstream_errors_total", MetricKind::kCounter, "endpoint,reason",
     "Upstream attempts that failed, by reason: connect, timeout (connecting), protocol (closed "
     "or garbled before a response head), retryable_status (502/503 retried on another engine), "
     "read_error (response cut), fenced (waiting for the first byte when the engine was fenced; "
     "moved to another engine), unresponsive (a streamed request waiting for the first byte past "
     "its own budget - 4x its expected prefill, at least 1 s - when a health probe of its engine "
     "failed, even one the recent-success grace forgives; moved to another engine, when there is "
     "one)."},
    {"ramjet_upstream_stale_retries_total", MetricKind::kCounter, "endpoint",
     "Requests sent on a pooled keep-alive connection that the engine had closed (nothing came "
     "back) and sent again at once on a new connection to the same engine: not an engine error. "
     "Engines close idle connections after seconds (uvicorn: 5 s); ramjet asks a connection idle "
     "for a second or more before reusing it, not one used more recently (a system call a request "
     "under load), so an engine that restarts or closes connections after each answer shows here."},
    {"ramjet_malformed_json_total", MetricKind::kCounter, "endpoint",
     "Inference request bodies that are not a JSON object (forwarded unchanged)."},
    {"ramjet_request_rejections_total", MetricKind::kCounter, "reason",
     "Requests rejected by ramjet before routing, by reason: body_too_large, header_too_large, "
     "header_timeout, body_timeout, bad_request, upstream_header_too_large (431: more than the "
     "engines accept), buffered_bytes_full (503: RJ_MAX_BUFFERED_BYTES), unknown_path (404), "
     "method_not_allowed (405), bad_model (400: model not a string, empty or over 1,024 bytes), "
     "model_required (400: no model while the engines serve several base models), unknown_model "
     "(404: no engine serves the model; no engine dialed), overloaded (429: the waiting room, "
     "RJ_ADMISSION_*, was full or the request waited RJ_ADMISSION_QUEUE_TIMEOUT_MS), json_too_dense "
     "(413: reading the body's JSON would take more than 8 bytes of memory a body byte, 24 where it "
     "is rewritten, e.g. a long array of one-digit numbers)."},
    {"ramjet_admission_priority_header_ignored_total", MetricKind::kCounter, "reason",
     "Priority headers (RJ_ADMISSION_PRIORITY_HEADER) ramjet did not follow, by reason: not_allowed (a "
     "key of RJ_ADMISSION_BATCH_KEYS asked for another class; it stays batch), unknown_value (neither "
     "batch nor interactive). The request goes on in its class."},
    {"ramjet_request_timeouts_total", MetricKind::kCounter, "endpoint,reason",
     "Requests ended by a timeout, by reason: first_byte (RJ_UPSTREAM_FIRST_BYTE_TIMEOUT_MS), "
     "upstream_idle (RJ_UPSTREAM_IDLE_TIMEOUT_MS), client_send (RJ_CLIENT_SEND_TIMEOUT_MS)."},
    {"ramjet_requests_blamed_total", MetricKind::kCounter, "endpoint,reason",
     "Requests that failed the same way on two engines before a usable response, so the "
     "request is blamed and no engine is: dropped (connection closed), bad_response, status_502, "
     "status_503."},
    {"ramjet_request_buffered_bytes", MetricKind::kGauge, "",
     "Request body bytes held in memory right now (leased from RJ_MAX_BUFFERED_BYTES)."},
    {"ramjet_request_buffered_bytes_limit", MetricKind::kGauge, "", "RJ_MAX_BUFFERED_BYTES."},
    {"ramjet_usage_parse_failures_total", MetricKind::kCounter, "",
     "Response bodies or SSE events whose usage could not be parsed: every event until the "
     "first generated token is parsed, then only the events that can still change the usage or "
     "finish reason (a byte scan finds a non-null usage, finish_reason, stop_reason or status)."},
    {"ramjet_prompt_tokens_total", MetricKind::kCounter, "", "Prompt tokens reported by engines."},
    {"ramjet_cached_prompt_tokens_total", MetricKind::kCounter, "",
     "Prompt tokens served from the engines' prefix cache."},
    {"ramjet_completion_tokens_total", MetricKind::kCounter, "", "Completion tokens reported by engines."},
    {"ramjet_finish_reasons_total", MetricKind::kCounter, "endpoint,reason",
     "Finish reasons of complete responses, bucketed: stop, length, tool_calls, cancelled, other."},
    {"ramjet_cache_requests_total", MetricKind::kCounter, "endpoint,outcome",
     "Complete responses by prompt-cache outcome: full, partial, cold, unknown (no cached-token "
     "count reported)."},
    {"ramjet_shim_rewrites_total", MetricKind::kCounter, "shim",
     "Request shims applied, by shim: max_tokens, max_completion_tokens, content_flatten, "
     "reasoning_effort."},
    {"ramjet_route_fail_open", MetricKind::kGauge, "", "1 while no upstream is healthy and requests fail open."},
    {"ramjet_route_fail_open_dispatches_total", MetricKind::kCounter, "upstream",
     "Fail-open dispatches per upstream ordinal."},
    {"ramjet_route_decisions_total", MetricKind::kCounter, "outcome",
     "Routing decisions by what decided the winner: single, load, rr, overlap, profile, "
     "single_flight, spread (several routers sharing their load, RJ_PEERS: this replica's place in "
     "a burst the replicas decide at once, not the engine that scored best), adapter (a LoRA "
     "adapter request that, without RJ_ROUTE_ADAPTER_LOAD_UNITS's charges, would have gone to "
     "another engine: its adapter is active where it went, or a slot is free), decode "
     "(RJ_ROUTE_DECODE_COST: without the decode charges another engine would have won; the "
     "request's output decodes sooner where it went)."},
    {"ramjet_route_profile_choices_total", MetricKind::kCounter, "profile",
     "Routing decisions by the winner's declared decode profile: none, mtp, standard."},
    {"ramjet_route_single_flight_followers_total", MetricKind::kCounter, "",
     "Requests whose prefix was new to the index but already being prefilled by a single-flight "
     "leader (they saw the leader's pending blocks)."},
    {"ramjet_route_overlap_blocks", MetricKind::kHistogram, "",
     "Leading prefix blocks the winner holds (raw, uncapped), per prefix-routed request."},
    {"ramjet_route_affinity_blocks", MetricKind::kHistogram, "",
     "The winner's affinity term in blocks (overlap or single-flight blocks, capped at "
     "RJ_ROUTE_MAX_OVERLAP_BLOCKS), per prefix-routed request."},
    {"ramjet_upstream_requests_total", MetricKind::kCounter, "upstream,class",
     "Response heads received from each upstream, by status class: 1xx, 2xx, 3xx, 4xx, 5xx "
     "(retried 502/503 included)."},
    {"ramjet_upstream_info", MetricKind::kGauge, "upstream,profile",
     "1 for each upstream ordinal with its declared decode profile (none, mtp, standard)."},
    {"ramjet_upstream_dp_rank", MetricKind::kGauge, "upstream,engine",
     "For each upstream ordinal that is one data-parallel rank of an engine (RJ_UPSTREAM_DP_SIZE): "
     "its rank; `engine` is the lowest ordinal among that engine's ranks (the ordinals with the same "
     "engine label are one engine). Ordinals that are whole engines have no sample."},
    {"ramjet_request_duration_seconds", MetricKind::kHistogram, "",
     "Request duration from routing to the last byte."},
    {"ramjet_ttft_seconds", MetricKind::kHistogram, "",
     "Time to first generated token (streaming responses)."},
    {"ramjet_time_per_output_token_seconds", MetricKind::kHistogram, "",
     "Time per output token after the first: (end - first token) / (completion tokens - 1), per "
     "complete streamed response with at least 2 completion tokens."},
    {"ramjet_cache_ttft_seconds", MetricKind::kHistogram, "endpoint,outcome",
     "Time to first generated token by prompt-cache outcome (full, partial, cold, unknown), per "
     "complete streamed inference response (chat, completions, responses, messages)."},
    {"ramjet_decode_tokens_per_second", MetricKind::kHistogram, "",
     "Per-request decode rate after the first token (responses with more than 8 tokens that "
     "decoded for over 0.5 s)."},
    {"ramjet_context_tokens", MetricKind::kHistogram, "",
     "Prompt tokens per complete inference response that reported them."},
    {"ramjet_output_tokens", MetricKind::kHistogram, "",
     "Completion tokens per complete inference response that reported them."},
    {"ramjet_request_body_bytes_total", MetricKind::kCounter, "", "Request body bytes forwarded."},
    {"ramjet_response_body_bytes_total", MetricKind::kCounter, "",
     "Response body bytes of the inference endpoints and /v1/models: relayed, or ramjet's own "
     "(its errors, the engines' model cards merged)."},
    {"ramjet_disagg_requests_total", MetricKind::kCounter, "choice",
     "Inference requests of a disaggregated fleet (RJ_UPSTREAM_ROLE), by how they were served: remote (two "
     "legs: a prefill engine computed the prompt, the decode engine pulled its KV cache), cached (whole on "
     "the decode engine: it would compute RJ_DISAGG_MIN_UNCACHED_TOKENS or fewer), no_prefill (whole: no "
     "prefill engine in service), prefill_busy (whole: every prefill engine at "
     "RJ_DISAGG_PREFILL_MAX_INFLIGHT), fallback (whole: the prefill leg failed), no_decode (whole, on an engine "
     "that prefills: no engine that decodes was in service or had room)."},
    {"ramjet_disagg_prefill_legs_total", MetricKind::kCounter, "outcome",
     "Prefill legs sent, by outcome: ok (the answer carried transfer parameters), failed (connect, "
     "timeout, dropped, 5xx), no_params (a 200 without usable kv_transfer_params: an engine without a KV "
     "connector), refused (a 4xx: relayed to the client, no decode leg), client_gone (the client left; "
     "the engine's request was cancelled)."},
    {"ramjet_disagg_prefill_leg_seconds", MetricKind::kHistogram, "",
     "Duration of the prefill legs that answered with transfer parameters (dispatch to the full answer)."},
}};

const Family& fam(F f) { return kFamilies[static_cast<size_t>(f)]; }
std::string_view name(F f) { return fam(f).name; }

std::string ep_label(size_t e) {
  return "endpoint=\"" + std::string(endpoint_label(static_cast<Endpoint>(e))) + "\"";
}
std::string up_label(size_t u) { return "upstream=\"" + std::to_string(u) + "\""; }

// full, partial, cold, unknown (request::cache_outcome's values) by their first letter.
size_t cache_slot(std::string_view outcome) {
  switch (outcome.empty() ? 'u' : outcome[0]) {
    case 'f': return 0;
    case 'p': return 1;
    case 'c': return 2;
    default: return 3;
  }
}

size_t profile_slot(route::Profile p) {
  switch (p) {
    case route::Profile::kNone: return 0;
    case route::Profile::kMtp: return 1;
    case route::Profile::kStandard: return 2;
  }
  return 0;
}

size_t finish_index(std::string_view bucket) {
  if (same(bucket, "stop")) return 0;
  if (same(bucket, "length")) return 1;
  if (same(bucket, "tool_calls")) return 2;
  if (same(bucket, "cancelled")) return 3;
  return 4;
}

size_t cache_index(std::string_view outcome) {
  if (same(outcome, "full")) return 0;
  if (same(outcome, "partial")) return 1;
  if (same(outcome, "cold")) return 2;
  return 3;
}

}  // namespace

std::span<const metrics::Family> proxy_families() { return kFamilies; }

std::string_view rejection_label(Rejection r) {
  switch (r) {
    case Rejection::kBodyTooLarge: return "body_too_large";
    case Rejection::kHeaderTooLarge: return "header_too_large";
    case Rejection::kHeaderTimeout: return "header_timeout";
    case Rejection::kBodyTimeout: return "body_timeout";
    case Rejection::kBadRequest: return "bad_request";
    case Rejection::kUpstreamHeaderTooLarge: return "upstream_header_too_large";
    case Rejection::kBufferFull: return "buffered_bytes_full";
    case Rejection::kUnknownPath: return "unknown_path";
    case Rejection::kMethodNotAllowed: return "method_not_allowed";
    case Rejection::kBadModel: return "bad_model";
    case Rejection::kModelRequired: return "model_required";
    case Rejection::kUnknownModel: return "unknown_model";
    case Rejection::kOverloaded: return "overloaded";
    case Rejection::kJsonTooDense: return "json_too_dense";
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
    case UpstreamError::kFenced: return "fenced";
    case UpstreamError::kUnresponsive: return "unresponsive";
    case UpstreamError::kCount: break;
  }
  return "protocol";
}

std::string_view timeout_label(Timeout t) {
  switch (t) {
    case Timeout::kFirstByte: return "first_byte";
    case Timeout::kUpstreamIdle: return "upstream_idle";
    case Timeout::kClientSend: return "client_send";
    case Timeout::kCount: break;
  }
  return "first_byte";
}

std::string_view blame_label(Blame b) {
  switch (b) {
    case Blame::kDropped: return "dropped";
    case Blame::kBadResponse: return "bad_response";
    case Blame::kStatus502: return "status_502";
    case Blame::kStatus503: return "status_503";
    case Blame::kCount: break;
  }
  return "dropped";
}

ProxyMetrics::ProxyMetrics(size_t n)
    : requests(new metrics::Counter[kEndpoints * 3 * kCodes]),
      fail_open_dispatches(new metrics::Counter[n ? n : 1]),
      route_overlap({0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}),
      route_affinity({0, 1, 2, 4, 8, 16, 32, 64, 128}),
      upstream_requests(new metrics::Counter[(n ? n : 1) * kClasses.size()]),
      request_duration({0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}),
      ttft(metrics::exponential_buckets(0.01, 2, 19)),  // 0.01 .. 2621 s
      tpot({0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1,
            0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5}),
      decode_rate({1, 2, 5, 10, 15, 20, 30, 40, 50, 60, 80, 100, 120, 160, 200, 240}),
      context_tokens(metrics::exponential_buckets(256, 2, 10)),  // 256 .. 131072
      output_tokens(metrics::exponential_buckets(64, 2, 11)),    // 64 .. 65536
      prefill_leg_seconds(metrics::exponential_buckets(0.005, 2, 16)),  // 5 ms .. 164 s
      upstreams(n) {
  for (auto& per_endpoint : cache_ttft) {
    for (auto& h : per_endpoint) h = std::make_unique<metrics::Histogram>(ttft.bounds());
  }
}

void ProxyMetrics::count_request(Endpoint e, StreamKind s, unsigned code) {
  if (code < 100 || code > 599) code = 599;
  requests[(ep_index(e) * 3 + static_cast<size_t>(s)) * kCodes + (code - 100)].inc();
}

void ProxyMetrics::count_route(const route::Routed& routed, const route::CandidateTerms* winner, bool prefix) {
  if (winner == nullptr) return;
  profile_choices[profile_slot(winner->profile)].inc();
  if (!prefix) return;
  route_overlap.observe(winner->overlap);
  route_affinity.observe(winner->affinity);
  // Pending blocks are looked up only for a prefix cold in the index (no candidate holds any of
  // it): any pending block means a leader is prefilling it.
  if (winner->overlap > 0) return;
  bool follower = winner->single_flight > 0;
  for (size_t i = 0; !follower && i < routed.decision.ranked.size(); ++i) {
    follower = routed.decision.ranked[i].single_flight > 0;
  }
  if (follower) single_flight_followers.inc();
}

void ProxyMetrics::count_upstream_response(size_t u, unsigned status) {
  if (u >= upstreams) return;
  size_t cls = status < 100 ? 4 : status >= 600 ? 4 : status / 100 - 1;
  upstream_requests[u * kClasses.size() + cls].inc();
}

void ProxyMetrics::observe_usage(Endpoint e, const Usage& u, int64_t start_ns, int64_t first_token_ns,
                                 int64_t now_ns) {
  if (u.prompt_tokens) context_tokens.observe(static_cast<double>(*u.prompt_tokens));
  if (u.completion_tokens) output_tokens.observe(static_cast<double>(*u.completion_tokens));
  if (first_token_ns == 0) return;  // not streamed (or nothing generated)
  if (u.completion_tokens && *u.completion_tokens >= 2 && now_ns > first_token_ns) {
    tpot.observe(static_cast<double>(now_ns - first_token_ns) / 1e9 / static_cast<double>(*u.completion_tokens - 1));
  }
  const size_t ep = ep_index(e);
  if (ep < kInferenceEndpoints) {
    cache_ttft[ep][cache_slot(cache_outcome(u))]->observe(static_cast<double>(first_token_ns - start_ns) / 1e9);
  }
}

void ProxyMetrics::write(metrics::Exposition& x) const {
  x.family(fam(F::kRequests));
  for (size_t e = 0; e < kEndpoints; ++e)
    for (size_t s = 0; s < 3; ++s)
      for (size_t c = 0; c < kCodes; ++c) {
        uint64_t v = requests[(e * 3 + s) * kCodes + c].get();
        if (v) {
          x.sample(name(F::kRequests),
                   ep_label(e) + ",code=\"" + std::to_string(c + 100) + "\",stream=\"" +
                       std::string(kStream[s]) + "\"",
                   v);
        }
      }
  x.family(fam(F::kInflight));
  x.sample(name(F::kInflight), "", inflight.get());

  x.family(fam(F::kClientDisconnects));
  for (size_t e = 0; e < kEndpoints; ++e) x.sample(name(F::kClientDisconnects), ep_label(e), client_disconnects[e].get());

  x.family(fam(F::kUpstreamErrors));
  for (size_t e = 0; e < kEndpoints; ++e)
    for (size_t r = 0; r < static_cast<size_t>(UpstreamError::kCount); ++r)
      x.sample(name(F::kUpstreamErrors),
               ep_label(e) + ",reason=\"" + std::string(upstream_error_label(static_cast<UpstreamError>(r))) + "\"",
               upstream_errors[e][r].get());

  x.family(fam(F::kStaleRetries));
  for (size_t e = 0; e < kEndpoints; ++e) x.sample(name(F::kStaleRetries), ep_label(e), stale_retries[e].get());

  x.family(fam(F::kMalformedJson));
  for (size_t e = 0; e < kEndpoints; ++e) x.sample(name(F::kMalformedJson), ep_label(e), malformed_json[e].get());

  x.family(fam(F::kRejections));
  for (size_t r = 0; r < rejections.size(); ++r)
    x.sample(name(F::kRejections), "reason=\"" + std::string(rejection_label(static_cast<Rejection>(r))) + "\"",
             rejections[r].get());
  x.family(fam(F::kPriorityIgnored));
  x.sample(name(F::kPriorityIgnored), "reason=\"not_allowed\"", priority_ignored[0].get());
  x.sample(name(F::kPriorityIgnored), "reason=\"unknown_value\"", priority_ignored[1].get());
  x.family(fam(F::kTimeouts));
  for (size_t e = 0; e < kEndpoints; ++e)
    for (size_t r = 0; r < static_cast<size_t>(Timeout::kCount); ++r)
      x.sample(name(F::kTimeouts),
               ep_label(e) + ",reason=\"" + std::string(timeout_label(static_cast<Timeout>(r))) + "\"",
               timeouts[e][r].get());
  x.family(fam(F::kBlamed));
  for (size_t e = 0; e < kEndpoints; ++e)
    for (size_t r = 0; r < static_cast<size_t>(Blame::kCount); ++r)
      x.sample(name(F::kBlamed), ep_label(e) + ",reason=\"" + std::string(blame_label(static_cast<Blame>(r))) + "\"",
               blamed[e][r].get());
  x.family(fam(F::kBufferedBytes));
  x.sample(name(F::kBufferedBytes), "", static_cast<int64_t>(budget ? budget->used() : 0));
  x.family(fam(F::kBufferedCap));
  x.sample(name(F::kBufferedCap), "", static_cast<int64_t>(budget ? budget->cap() : 0));

  x.family(fam(F::kUsageParseFailures));
  x.sample(name(F::kUsageParseFailures), "", usage_parse_failures.get());
  x.family(fam(F::kPromptTokens));
  x.sample(name(F::kPromptTokens), "", prompt_tokens.get());
  x.family(fam(F::kCachedPromptTokens));
  x.sample(name(F::kCachedPromptTokens), "", cached_prompt_tokens.get());
  x.family(fam(F::kCompletionTokens));
  x.sample(name(F::kCompletionTokens), "", completion_tokens.get());

  x.family(fam(F::kFinishReasons));
  for (size_t e = 0; e < kEndpoints; ++e)
    for (size_t r = 0; r < kFinish.size(); ++r)
      x.sample(name(F::kFinishReasons), ep_label(e) + ",reason=\"" + std::string(kFinish[r]) + "\"",
               finish_reasons[e][r].get());
  x.family(fam(F::kCacheRequests));
  for (size_t e = 0; e < kEndpoints; ++e)
    for (size_t r = 0; r < kCache.size(); ++r)
      x.sample(name(F::kCacheRequests), ep_label(e) + ",outcome=\"" + std::string(kCache[r]) + "\"",
               cache_requests[e][r].get());
  x.family(fam(F::kShimRewrites));
  for (size_t s = 0; s < kShims.size(); ++s)
    x.sample(name(F::kShimRewrites), "shim=\"" + std::string(kShims[s]) + "\"", shim_rewrites[s].get());

  x.family(fam(F::kRouteFailOpen));
  x.sample(name(F::kRouteFailOpen), "", route_fail_open.get());
  x.family(fam(F::kFailOpenDispatches));
  for (size_t u = 0; u < upstreams; ++u) x.sample(name(F::kFailOpenDispatches), up_label(u), fail_open_dispatches[u].get());
  x.family(fam(F::kRouteDecisions));
  for (size_t o = 0; o < route_decisions.size(); ++o) {
    x.sample(name(F::kRouteDecisions),
             "outcome=\"" + std::string(route::outcome_label(static_cast<route::Outcome>(o))) + "\"",
             route_decisions[o].get());
  }
  x.family(fam(F::kProfileChoices));
  for (size_t p = 0; p < kProfiles.size(); ++p) {
    x.sample(name(F::kProfileChoices), "profile=\"" + std::string(route::profile_label(kProfiles[p])) + "\"",
             profile_choices[p].get());
  }
  x.family(fam(F::kSingleFlightFollowers));
  x.sample(name(F::kSingleFlightFollowers), "", single_flight_followers.get());
  x.family(fam(F::kRouteOverlap));
  route_overlap.write(x, name(F::kRouteOverlap), "");
  x.family(fam(F::kRouteAffinity));
  route_affinity.write(x, name(F::kRouteAffinity), "");
  x.family(fam(F::kUpstreamRequests));
  for (size_t u = 0; u < upstreams; ++u)
    for (size_t c = 0; c < kClasses.size(); ++c)
      x.sample(name(F::kUpstreamRequests), up_label(u) + ",class=\"" + std::string(kClasses[c]) + "\"",
               upstream_requests[u * kClasses.size() + c].get());
  x.family(fam(F::kUpstreamInfo));
  for (size_t u = 0; u < upstreams; ++u) {
    route::Profile p = upstream_profiles ? upstream_profiles(u) : route::Profile::kNone;
    x.sample(name(F::kUpstreamInfo), up_label(u) + ",profile=\"" + std::string(route::profile_label(p)) + "\"",
             int64_t{1});
  }
  x.family(fam(F::kUpstreamDpRank));
  for (size_t u = 0; u < upstreams && upstream_ranks; ++u) {
    if (auto r = upstream_ranks(u)) {
      x.sample(name(F::kUpstreamDpRank), up_label(u) + ",engine=\"" + std::to_string(r->second) + "\"",
               int64_t{r->first});
    }
  }

  x.family(fam(F::kRequestDuration));
  request_duration.write(x, name(F::kRequestDuration), "");
  x.family(fam(F::kTtft));
  ttft.write(x, name(F::kTtft), "");
  x.family(fam(F::kTpot));
  tpot.write(x, name(F::kTpot), "");
  x.family(fam(F::kCacheTtft));
  for (size_t e = 0; e < kInferenceEndpoints; ++e)
    for (size_t o = 0; o < kCache.size(); ++o)
      cache_ttft[e][o]->write(x, name(F::kCacheTtft), ep_label(e) + ",outcome=\"" + std::string(kCache[o]) + "\"");
  x.family(fam(F::kDecodeRate));
  decode_rate.write(x, name(F::kDecodeRate), "");
  x.family(fam(F::kContextTokens));
  context_tokens.write(x, name(F::kContextTokens), "");
  x.family(fam(F::kOutputTokens));
  output_tokens.write(x, name(F::kOutputTokens), "");
  x.family(fam(F::kRequestBodyBytes));
  x.sample(name(F::kRequestBodyBytes), "", request_body_bytes.get());
  x.family(fam(F::kResponseBodyBytes));
  x.sample(name(F::kResponseBodyBytes), "", response_body_bytes.get());
  x.family(fam(F::kDisaggRequests));
  for (size_t c = 1; c < disagg_choices.size(); ++c)
    x.sample(name(F::kDisaggRequests), "choice=\"" + std::string(label(static_cast<DisaggChoice>(c))) + "\"",
             disagg_choices[c].get());
  x.family(fam(F::kDisaggPrefillLegs));
  static constexpr std::array<std::string_view, 5> kLegOutcomes = {"ok", "failed", "no_params", "refused", "client_gone"};
  for (size_t o = 0; o < kLegOutcomes.size(); ++o)
    x.sample(name(F::kDisaggPrefillLegs), "outcome=\"" + std::string(kLegOutcomes[o]) + "\"", prefill_legs[o].get());
  x.family(fam(F::kDisaggPrefillSeconds));
  prefill_leg_seconds.write(x, name(F::kDisaggPrefillSeconds), "");
}


void ExchangeMetrics::decided(ExchangeRecord& x) {
  const route::Decision& d = x.routed->decision;
  m_.route_decisions[static_cast<size_t>(d.outcome)].inc();
  const int64_t was_open = m_.route_fail_open.get();
  m_.route_fail_open.set(d.fail_open ? 1 : 0);
  if (was_open != (d.fail_open ? 1 : 0)) {
    spdlog::warn(d.fail_open ? "no healthy upstream: failing open" : "healthy upstream again: fail-open ended");
  }
  m_.count_route(*x.routed, d.first_dispatch(), prefix_ && !x.prep->fingerprints.chain.empty());
}

void ExchangeMetrics::first_token(ExchangeRecord& x) {
  m_.ttft.observe(static_cast<double>(x.first_token_ns - x.start_ns) / 1e9);
}

void ExchangeMetrics::usage(ExchangeRecord& x, const Usage& u) {
  if (u.prompt_tokens) m_.prompt_tokens.inc(*u.prompt_tokens);
  if (u.cached_tokens) m_.cached_prompt_tokens.inc(*u.cached_tokens);
  if (u.completion_tokens) m_.completion_tokens.inc(*u.completion_tokens);
  if (!u.finish_reason.empty()) {
    m_.finish_reasons[ep_index(x.endpoint)][finish_index(finish_bucket(u.finish_reason))].inc();
  }
  m_.cache_requests[ep_index(x.endpoint)][cache_index(cache_outcome(u))].inc();
  const int64_t now = clock_.now_ns();
  if (x.first_token_ns && u.completion_tokens && *u.completion_tokens > 8) {
    const double decode_s = static_cast<double>(now - x.first_token_ns) / 1e9;
    if (decode_s > 0.5) m_.decode_rate.observe(static_cast<double>(*u.completion_tokens - 1) / decode_s);
  }
  m_.observe_usage(x.endpoint, u, x.start_ns, x.first_token_ns, now);
}

}  // namespace ramjet::request
