// sim/server/agent_reply: the agent APIs' reply side, as vLLM 0.32 writes it. Responses: the SSE
// events of SimpleStreamingEventProcessor (named `event:` lines, keys in the openai models'
// alphabetical order, sequence numbers, response.completed last, no [DONE]) and the
// ResponsesResponse body (usage with cached and cache-write tokens). Messages:
// AnthropicServingMessages.message_stream_converter over the chat stream (message_start at the
// first engine output, no ping, message_delta with stop_sequence and Anthropic's usage,
// message_stop last) and messages_full_converter. The engine loop and the socket are
// agent_serve.cc's.
//
// What the sim generates: filler text (sim/engine/tokenizer.h), or, when the request asks for it
// (AgentRequest::tool_name), one tool call whose arguments are {"input": "<the generated text>"}
// and whose finish is the chat "tool_calls" (Responses status "completed", Anthropic "tool_use").
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "sim/server/agent_convert.h"

namespace ramjet::sim {

struct AgentUsage {
  uint32_t prompt = 0;
  uint32_t completion = 0;
  uint32_t cached = 0;   // num_cached_tokens
  uint32_t created = 0;  // num_cache_creation_tokens (written to the prefix cache by this request)
};

class AgentReply {
 public:
  // `serial` makes the item ids; `response_id` is the response's (resp_… / chatcmpl-…);
  // `max_tokens` is the effective generation budget (Responses echoes it); `details`:
  // --enable-prompt-tokens-details (Messages then splits input_tokens by cache, as Anthropic).
  AgentReply(const AgentRequest& request, uint64_t serial, std::string response_id, std::string model,
             int64_t created, uint64_t max_tokens, bool details);

  // Streaming. Each returns the SSE bytes to write (maybe empty).
  std::string head();                                // with the response head (Responses: created, in_progress)
  std::string first_output(uint32_t prompt_tokens);  // the engine's first output (Messages: message_start)
  std::string text(std::string_view delta);          // generated text
  std::string close(const AgentUsage& usage, bool length);  // the closing events

  // Non-streaming: the whole body for `generated` text.
  // `kv`: a finished prefill leg's kv_transfer_params (P/D disaggregation; null: none).
  std::string full(const AgentUsage& usage, bool length, std::string_view generated,
                   const boost::json::object* kv = nullptr);

  bool tool_call() const { return !req_.tool_name.empty(); }

 private:
  std::string event(std::string_view type, boost::json::object data);
  // _build_anthropic_usage: input_tokens = prompt − cache_read − cache_creation when the chat
  // usage carried prompt_tokens_details (then both cache fields too), else the whole prompt.
  boost::json::object anthropic_usage(const AgentUsage& usage) const;
  boost::json::object call_item(std::string_view arguments, std::string_view status) const;
  boost::json::object response_object(std::string_view status, boost::json::array output,
                                      const AgentUsage* usage, bool length) const;
  boost::json::array final_output(std::string_view text) const;
  std::string args_prefix() const { return "{\"input\": \""; }

  const AgentRequest& req_;
  std::string model_;
  int64_t created_ = 0;
  uint64_t max_tokens_ = 0;
  bool details_ = false;
  std::string response_id_;  // resp_… / chatcmpl-…
  std::string item_id_;      // the output item: msg_… or fc_… (the same in stream and final body)
  std::string call_id_;      // the tool call's id (the same in stream and final body)
  std::string accumulated_;  // streamed text (or arguments)
  uint64_t sequence_ = 0;
  bool opened_ = false;      // an output item / content block is open
};

}  // namespace ramjet::sim
