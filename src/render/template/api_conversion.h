// render::api_conversion: the chat-completions request vLLM builds from a Responses (POST
// /v1/responses) or Anthropic Messages (POST /v1/messages) request before it renders the prompt, so
// that both can be tokenized exactly like chat: locally (render/identity/tokenize_payload.h) or by
// an engine's /tokenize (chat form).
//
// Followed: vLLM main of 2026-11 (vllm/entrypoints/anthropic/serving.py at 0001948b,
// anthropic/protocol.py at 00589e56, openai/responses/utils.py at 01ca842d, responses/protocol.py
// at 010a69ce, tool_parsers/utils.py at 0064cc9c), with the openai-python 3.x request types, then
// vLLM 0.32.0 where it differs (tool dumps, Responses chat_template_kwargs) — held to a live
// vLLM 0.32 by test/vllm/test_exact.py (local tokens against the engine's KV events). Written from
// reading that code; the simulator has its own, independent port (sim/server), and
// test/integration/test_agent_render.py compares the two.
//
// Messages (AnthropicServingMessages._convert_anthropic_to_openai_request):
//   * one system message: the top-level `system` (a string, or its non-empty text blocks that do
//     not start with "x-anthropic-billing-header") followed by every `system`-role message's text,
//     joined with "";
//   * per message (roles ctx/msg read as user): a string content as is; blocks: text → text
//     parts (one text part → a string), thinking → `reasoning` (joined), tool_use → tool_calls
//     (arguments = the input object; the chat path decodes them again), tool_result in a user
//     message → a `tool` message (string content, or its text items joined with "\n") placed
//     before the user message, which is dropped when nothing else remains; image → image_url;
//     redacted_thinking and tool_reference dropped;
//   * tools → {"type":"function","function":{name, description, parameters = input_schema with
//     "type":"object" added when missing, then strict and defer_loading when set}};
//     thinking {"type":"disabled"} → reasoning_effort "none" (over output_config.effort);
//     output_config.effort →
//     reasoning_effort; chat_template_kwargs passed on.
// Responses (construct_input_messages, construct_chat_messages_with_tool_call, build_chat_params):
//   * `instructions` → a system message; a string `input` → one user message;
//   * items: function_call → a tool call merged into the previous assistant message (else a new
//     one); reasoning (content[0].text, else summary[0].text) → that message's `reasoning` when it
//     has none; an assistant message (its first part's text) → that message's content when it has
//     none; function_call_output → a tool message; any other item with a role as it is;
//   * function tools (and namespace members, named namespace__name) as vLLM 0.32's
//     FunctionDefinition dumps: name, description, parameters, then strict and defer_loading when
//     set; other fields are dropped (its serialiser keeps declared fields only);
//   * reasoning.effort → reasoning_effort; chat_template_kwargs passed on (vLLM 0.32);
//     continue_final_message when the last item is a message or reasoning item whose status is
//     in_progress or incomplete.
// Refused (unsupported): previous_response_id / previous_response / previous_input_messages (the
// engine's stored state), an assistant tool_result whose content is not a string (vLLM renders
// Python's str() of it). Malformed requests are bad_request. Messages never contain request bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "common/result.h"

namespace ramjet::render {

// The request shapes whose prompt ramjet can build.
enum class PromptApi : uint8_t { kChat, kCompletions, kResponses, kMessages };
std::string_view to_string(PromptApi api);  // chat|completions|responses|messages

struct ConversionError {
  enum Kind : uint8_t { kBadRequest, kUnsupported } kind;
  std::string message;  // never contains request bytes
};

Result<boost::json::object, ConversionError> responses_to_chat(const boost::json::object& request);
Result<boost::json::object, ConversionError> messages_to_chat(const boost::json::object& request);

// kResponses / kMessages as above; kChat: a copy; kCompletions: kBadRequest.
Result<boost::json::object, ConversionError> to_chat_request(PromptApi api, const boost::json::object& request);
// The same, consuming `request`: its strings are moved into the chat request, not copied.
Result<boost::json::object, ConversionError> to_chat_request(PromptApi api, boost::json::object&& request);

}  // namespace ramjet::render
