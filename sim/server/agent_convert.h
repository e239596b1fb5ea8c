// sim/server/agent_convert: the agent APIs' request side. An OpenAI Responses (`POST
// /v1/responses`) or Anthropic Messages (`POST /v1/messages`) body becomes the chat request vLLM
// builds from it, so the prompt goes through the same Prompter::chat as /v1/chat/completions
// (same prefix caching, same KV events). The reply side (events, usage) is agent_reply.h; the
// HTTP glue is agent_serve.cc.
//
// Followed: vLLM commit 0001948bc76939369ca855c90b36d81256477e85 (vllm/entrypoints/anthropic/
// serving.py `_convert_anthropic_to_openai_request`, vllm/entrypoints/openai/responses/serving.py
// `_make_request`) with the helpers stored beside it (responses/utils.py 01ca842d
// `construct_input_messages`, responses/protocol.py 010a69ce, anthropic/protocol.py 00589e56) —
// the vLLM 0.2x main line of the renderers refactor — then vLLM 0.32.0 where it differs (checked
// against a live vLLM 0.32 by test/vllm): tools dumped as 0.32's FunctionDefinition (strict and
// defer_loading only when set, no other field), a Responses request's chat_template_kwargs
// passed on, reasoning efforts as the chat request's reasoning_effort (which Prompter::chat
// merges with enable_thinking, build_chat_params), Anthropic thinking.type "disabled", tool_choice
// of a Responses request without tools echoed as "none" (check_tool_usage).
// Written independently of ramjet's own conversion (src/render, src/request) on purpose: a
// differential test compares the two through POST /sim/render.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace ramjet::sim {

enum class AgentApi { kResponses, kMessages };

// An error answered in the API's own shape (agent_error_body). Messages never echo prompt text.
struct AgentError {
  unsigned status = 400;
  std::string type{};     // vLLM's error type (BadRequestError, NotFoundError, invalid_request_error)
  std::string message{};
  std::string param{};    // OpenAI shapes only; empty = null
  std::string body{};     // set: the whole answer, whatever the API (the request-validation 400 of
                          // vLLM's HTTP front, sim/server/validation.h)
};

// Responses: {"error":{"message","type","param","code"}} (vLLM's ErrorResponse).
// Messages: {"type":"error","error":{"type","message"}} (vLLM's translate_error_response).
// Either way `body` when it is set.
std::string agent_error_body(AgentApi api, const AgentError& e);

struct AgentRequest {
  AgentApi api = AgentApi::kResponses;
  // What Prompter::chat takes: messages, tools, tool_choice, add_generation_prompt,
  // continue_final_message, chat_template_kwargs (reasoning effort merged in, as vLLM does).
  boost::json::object chat{};
  boost::json::object original{};  // the body as sent (a Responses reply echoes some fields)
  bool stream = false;
  std::optional<int64_t> max_tokens{};  // as requested (an integer; its limits are checked later)
  std::string model{};
  std::string cache_salt{};
  std::string previous_response_id{};  // Responses: the sim keeps no store (agent_serve.cc)
  bool background = false;             // Responses: needs a store, refused
  // Non-empty: the sim answers with one call of this tool (tools declared, tool_choice not
  // "none", and the conversation ends with a user message).
  std::string tool_name{};
};

// Parses (as vLLM's front does: validation.h) and converts one body. Errors are 400s with vLLM's
// messages where vLLM has one. `disabled_thinking_effort`: the reasoning_effort a Messages
// thinking.type "disabled" becomes (vLLM probes the template once: disabled_thinking_effort()).
Result<AgentRequest, AgentError> parse_agent_request(AgentApi api, std::string_view body,
                                                     std::string_view disabled_thinking_effort = "none");

}  // namespace ramjet::sim
