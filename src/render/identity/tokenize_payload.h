// render::tokenize_payload: what the tokenizer shadow asks an engine to tokenize and renders
// itself (see tokenizer_service.h), and the decoder of the engine's answer. Both read
// untrusted bytes (request bodies, engine responses) and have a fuzz target (engine_identity).
//
// The payload: chat — {model, messages, tools, add_generation_prompt, continue_final_message,
// add_special_tokens, chat_template_kwargs, return_token_strs:false} where chat_template_kwargs
// are the profile's template arguments for the request (model::local_template_args: its kwargs
// plus its reasoning settings); completions — {model, prompt, add_special_tokens,
// return_token_strs:false} for a string prompt.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/value.hpp>

#include "common/result.h"
#include "render/template/api_conversion.h"
#include "render/prompt/prompt.h"

namespace ramjet::model {
class ModelProfile;
}

namespace ramjet::render {

class SessionCache;

// Outcomes (metric labels). Remote: the engine's /tokenize. Local: the local render + encode.
enum class ShadowOutcome : uint8_t {
  kSuccess,           // remote answered / local rendered (mode local)
  kTimeout,
  kConnectError,
  kHttpError,
  kResponseTooLarge,
  kDecodeError,       // remote: not {count, tokens}; local: not a usable request
  kParityMatch,
  kParityMismatch,
  kUnsupported,       // local: the profile does not render this request (model::LocalFailure)
  kRenderError,
  kEncodeError,
  kRemoteUnavailable, // local-shadow: no remote answer to compare with
  kUnattested,        // local: the engine's identity does not match the manifest
};
inline constexpr size_t kShadowOutcomeCount = 13;
std::string_view to_string(ShadowOutcome o);

// The tokenize payload for a request (see the top of this file), or why there is none.
struct TokenizePayload {
  std::string json;             // the /tokenize body
  boost::json::value request;   // the same payload as a JSON object: what is rendered locally
  bool chat = true;
  bool add_special_tokens = true;   // completions
  std::string prompt;               // completions: the prompt text
  std::optional<ShadowOutcome> local_refusal;  // set: not rendered locally (kUnsupported/kDecodeError)
  bool multimodal = false;          // a non-text content part (the engine would refetch media)
};
// From a request body the caller has already parsed (Boost.JSON: the last of duplicate keys kept).
// The payload's `request` uses the body's storage (an arena's payload lives no longer than it).
std::optional<TokenizePayload> build_tokenize_payload(const model::ModelProfile& profile, bool chat,
                                                      const boost::json::object& body);
// From the body's JSON text: parsed once (nesting up to 128), then as above.
std::optional<TokenizePayload> build_tokenize_payload(const model::ModelProfile& profile, bool chat,
                                                      std::string_view body);
// Any API: a Responses or Messages request is first turned into the chat request vLLM renders
// (render/template/api_conversion.h); one it refuses gives a payload that is not rendered locally
// (local_refusal kDecodeError for a malformed request, kUnsupported otherwise; no `json`).
std::optional<TokenizePayload> build_tokenize_payload(const model::ModelProfile& profile, PromptApi api,
                                                      const boost::json::object& body);
// The same for the local pipeline only (exact routing's render): the body is consumed (its
// messages and tools are moved, not copied) and `json` is left empty.
std::optional<TokenizePayload> build_local_payload(const model::ModelProfile& profile, PromptApi api,
                                                   boost::json::object&& body);

// The payload rendered and encoded by ramjet (the session cache, when given, supplies a cached
// prefix's ids). Chat payloads as chat requests (payload.request, not parsed again),
// completions as their prompt text.
Result<std::vector<uint32_t>, PromptError> render_payload(const PromptRenderer& renderer,
                                                          const TokenizePayload& payload,
                                                          SessionCache* cache = nullptr);

// The local pipeline on one payload: its local_refusal, the render_payload failure as an
// outcome (decode_error, render_error, encode_error), or kSuccess with the ids.
struct LocalRender {
  ShadowOutcome outcome = ShadowOutcome::kSuccess;
  std::vector<uint32_t> ids;
};
LocalRender render_local(const PromptRenderer& renderer, const TokenizePayload& payload,
                         SessionCache* cache = nullptr);

// Exact routing's local tokens from a request body (chat, completions, Responses or Messages):
// the body parsed once into an arena that goes in one piece (no per-node frees), the payload built
// by moving its messages and tools (same arena), rendered and encoded with the session cache.
// `model` and `cache_salt` are the namespace fields read on the way. kDecodeError: not a JSON
// object or not a request of `api`; kUnsupported: the profile does not render it (or media).
struct RoutingTokens {
  ShadowOutcome outcome = ShadowOutcome::kSuccess;
  std::vector<uint32_t> ids;
  std::string model, cache_salt;
};
RoutingTokens render_routing_body(const model::ModelProfile& profile, const PromptRenderer& renderer,
                                  SessionCache* cache, PromptApi api, std::string_view body);

// An engine's /tokenize answer {"count": n, "tokens": [n ids < 2^32], ...} -> the ids, or nullopt.
std::optional<std::vector<uint32_t>> decode_tokenize_response(std::string_view body);

}  // namespace ramjet::render
