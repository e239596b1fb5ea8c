// The endpoint table: which API a request path belongs to, which paths the API port serves at
// all, and OpenAI-style error bodies. ingress owns classification and limits; prepare/stream
// decide what to do with each kind. Only what ramjet knows is forwarded: an engine's admin and
// debug endpoints (/reset_prefix_cache, /sleep, /collective_rpc, /metrics, ...) are never
// reachable through the API port unless the operator lists them (RJ_PASSTHROUGH_PATHS).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ramjet::request {

enum class Endpoint {
  kChat,         // POST /v1/chat/completions
  kCompletions,  // POST /v1/completions
  kResponses,    // POST /v1/responses
  kMessages,     // POST /v1/messages (Anthropic)
  kModels,       // GET /v1/models
  kHealth,       // GET /health (answered by ramjet itself)
  kOther,        // forwarded unchanged: /tokenize and /detokenize when served, RJ_PASSTHROUGH_PATHS,
                 // and CORS preflights (OPTIONS) of the paths above
  kUnknown,      // not served: ramjet answers 404 (unknown path) or 405 (known path, other method)
};

// Stable metric label: chat|completions|responses|messages|models|health|other|unknown.
std::string_view endpoint_label(Endpoint e);

// What the API port serves besides the fixed table (RJ_SERVE_TOKENIZE, RJ_PASSTHROUGH_PATHS).
struct ServedPaths {
  bool tokenize = false;                 // POST /tokenize and POST /detokenize
  std::vector<std::string> passthrough;  // exact paths, or prefixes ending in '*' (config-checked)
};

// Classifies by method and path (query string ignored). Only the exact paths count; sub-paths
// such as /v1/chat/completions/render are kUnknown unless listed. A target that is not an
// origin-form path ("http://h/x", "*") or holds a dot segment or a percent-encoded '.', '/' or
// '\' never matches a passthrough prefix, so what matches is what the engine routes.
Endpoint classify(std::string_view method, std::string_view target, const ServedPaths& served = {});

// For a kUnknown request: the methods its path is served with ("POST", "GET, HEAD"), for a 405
// and its Allow header; "" when the path is not served at all (404).
std::string_view allowed_methods(std::string_view target, const ServedPaths& served = {});

// True for the four JSON inference endpoints (usage accounting, shims for chat/completions).
inline bool is_inference(Endpoint e) {
  return e == Endpoint::kChat || e == Endpoint::kCompletions || e == Endpoint::kResponses ||
         e == Endpoint::kMessages;
}

// {"error":{"message":...,"type":...,"param":null,"code":<status>}}
std::string error_json(std::string_view message, std::string_view type, int status, std::string_view param = {});
// Anthropic's error shape ({"type":"error","error":{"type","message"}}) for /v1/messages, its
// type from the status (invalid_request_error, authentication_error, permission_error,
// not_found_error, request_too_large, rate_limit_error, timeout_error, overloaded_error,
// api_error).
std::string anthropic_error_json(std::string_view message, int status);

}  // namespace ramjet::request
