// request/stream/exact_tokens: the prompt tokens exact routing looks up (RJ_EXACT_ROUTE_MODE on or
// shadow): a chat or completions request inside the size window is tokenized before the decision,
// under one deadline —
//   remote: by a healthy engine's POST /tokenize — the chat form with the request's messages,
//           tools, template and chat_template_kwargs, reasoning_effort carried into the kwargs as
//           vLLM's chat endpoint does;
//   local:  by ramjet's own attested renderer (RJ_TOKENIZER_MODE=local) on the
//           render pool, while every healthy engine is attested against the manifest; a follow-up
//           turn encodes only its new part (the session cache). No engine round trip.
// Any failure leaves the request to the approximate index; it never waits past the deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "request/stream/tokenize_budget.h"
#include "render/template/api_conversion.h"
#include "request/ingress/endpoint.h"

namespace ramjet::render {
class TokenizerService;
}

namespace ramjet::request {

struct ExactTokensConfig {
  bool enabled = false;          // RJ_EXACT_ROUTE_MODE on or shadow
  uint64_t min_bytes = 32768;    // RJ_EXACT_ROUTE_MIN_BYTES: smaller bodies gain little
  uint64_t max_bytes = 2u << 20;  // RJ_EXACT_ROUTE_MAX_BYTES
  std::chrono::milliseconds timeout{500};  // RJ_EXACT_ROUTE_TIMEOUT_MS
  std::string bearer;            // RJ_UPSTREAM_TOKEN
  size_t max_response = 64u << 20;
  uint32_t canary_bps = 10000;   // RJ_EXACT_ROUTE_CANARY_BPS: sessions placed exactly, per 10,000
  std::string canary_key;        // RJ_EXACT_ROUTE_CANARY_KEY
  render::TokenizerService* local = nullptr;  // RJ_EXACT_TOKENS=local: the attested renderer
  // The wait per request (RJ_EXACT_ROUTE_BUDGET_SHARE of its expected prefill, within `timeout`);
  // null: `timeout` for every request.
  const TokenizeBudget* budget = nullptr;
};

// Whether a session is in the canary's treatment: SHA-256(key, 0, session)'s first 8 bytes as a
// big-endian fraction of 2^64 below bps / 10,000 (stable per session and key; bps 0 = none,
// 10,000 = all).
bool canary_treatment(std::string_view key, std::string_view session, uint32_t bps);

// The prompt shape of an endpoint's requests (chat, completions, responses, messages), or nullopt.
std::optional<render::PromptApi> prompt_api(Endpoint endpoint);

// The /tokenize body for a request body, and the namespace fields read on the way; nullopt when
// the request is not one exact routing handles (not a JSON object, no messages / string prompt,
// a non-text content part, a Responses or Messages request vLLM's conversion refuses). A Responses
// or Messages request is asked for in chat form: the chat request vLLM renders for it.
struct TokenizeCall {
  std::string payload;
  std::string model;
  std::string cache_salt;
};
std::optional<TokenizeCall> tokenize_call(Endpoint endpoint, std::string_view body);

}  // namespace ramjet::request
