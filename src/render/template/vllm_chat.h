// render::vllm_chat: what vLLM 0.32's chat path does to a chat-completions request before its chat
// template sees it — the tool dump (ChatCompletionToolsParam / FunctionDefinition serialisers), the
// template kwargs (ChatCompletionRequest.build_chat_params, merge_kwargs) — and what /tokenize needs
// to render a request as the chat endpoint would. Used by the local renderers (chat_template,
// qwen3_native), the Responses/Messages conversion (api_conversion) and the /tokenize payloads
// (tokenize_payload, request/stream/exact_payload), so each rule lives once. Held to a live vLLM
// 0.32 by test/vllm/test_exact.py and to test/oracle/jinja_oracle.py's own port.
#pragma once

#include <optional>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

namespace ramjet::render {

// vLLM 0.32's FunctionDefinition dump: {name, description, parameters (null when absent), then
// strict and defer_loading when `flags` sets them}. Its serialiser keeps declared fields only,
// leaving the two flags out when None. Flags are read as pydantic's lax mode reads booleans;
// nullopt when one is set but is no boolean (vLLM answers 400).
std::optional<boost::json::object> function_definition(const boost::json::value& name,
                                                       const boost::json::value* description,
                                                       boost::json::value parameters,
                                                       const boost::json::object& flags);

// A chat-completions tool as vLLM 0.32 hands it to the chat template (ChatCompletionToolsParam's
// model_dump): {"type": "function", "function": FunctionDefinition (above; an outer defer_loading
// is copied in when the function has none), then the outer defer_loading when set}; anything else
// the client sent is dropped. nullopt: a tool vLLM refuses (another type, no function object or
// name, a description that is no string, parameters that are no object, a flag that is no boolean).
std::optional<boost::json::object> vllm_tool_dump(const boost::json::object& tool);

// The chat_template_kwargs vLLM 0.32's chat path gives the template for a chat request
// (build_chat_params, merge_kwargs): the request's chat_template_kwargs, then its documents and
// reasoning_effort over them when set (null and "auto" are unset), and enable_thinking =
// (effort != "none") when the effort is set and the kwargs have none. What /tokenize must be
// given (it takes chat_template_kwargs only) to render as the chat endpoint does.
boost::json::object vllm_template_kwargs(const boost::json::object& request);

// vLLM's /tokenize validates `messages` as chat-completions messages, whose text parts are
// {"type":"text"}: the Responses API's input_text / output_text parts (which a converted
// Responses request carries, and which vLLM's chat parser reads exactly as text) make it answer
// 400. Rewrites those part types to "text" in place; nothing else changes.
void as_chat_text_parts(boost::json::value& messages);

}  // namespace ramjet::render
