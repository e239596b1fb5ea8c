// The endpoint table: which API a request path belongs to, and OpenAI-style error bodies.
// ingress owns classification and limits; prepare/stream decide what to do with each kind.
#pragma once

#include <string>
#include <string_view>

namespace ramjet::request {

enum class Endpoint {
  kChat,         // POST /v1/chat/completions
  kCompletions,  // POST /v1/completions
  kResponses,    // POST /v1/responses
  kMessages,     // POST /v1/messages (Anthropic)
  kModels,       // GET /v1/models
  kHealth,       // GET /health (answered by ramjet itself)
  kOther,        // anything else: forwarded unchanged
};

// Stable metric label: chat|completions|responses|messages|models|health|other.
std::string_view endpoint_label(Endpoint e);

// Classifies by method and path (query string ignored). Only the exact paths count;
// sub-paths such as /v1/chat/completions/render are "other".
Endpoint classify(std::string_view method, std::string_view target);

// True for the four JSON inference endpoints (usage accounting, shims for chat/completions).
inline bool is_inference(Endpoint e) {
  return e == Endpoint::kChat || e == Endpoint::kCompletions || e == Endpoint::kResponses ||
         e == Endpoint::kMessages;
}

// {"error":{"message":...,"type":...,"param":null,"code":<status>}}
std::string error_json(std::string_view message, std::string_view type, int status);

}  // namespace ramjet::request
