// sim/server/agent_reply: the agent APIs' reply side, as vLLM writes it (same commit as
// agent_convert.h). Responses: the SSE events of SimpleStreamingEventProcessor (named `event:`
// lines, sequence numbers, response.completed last, no [DONE]) and the ResponsesResponse body.
// Messages: AnthropicServingMessages.message_stream_converter over the chat stream (message_start
// at the first engine output, no ping, message_delta with usage, message_stop last) and
// messages_full_converter. The engine loop and the socket are agent_serve.cc's.
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
  uint32_t cached = 0;
};

class AgentReply {
 public:
  // `serial` makes the ids; `max_tokens` is the effective generation budget (Responses echoes it).
  AgentReply(const AgentRequest& request, uint64_t serial, std::string model, int64_t created, uint64_t max_tokens);

  // Streaming. Each returns the SSE bytes to write (maybe empty).
  std::string head();                                // with the response head (Responses: created, in_progress)
  std::string first_output(uint32_t prompt_tokens);  // the engine's first output (Messages: message_start)
  std::string text(std::string_view delta);          // generated text
  std::string close(const AgentUsage& usage, bool length);  // the closing events

  // Non-streaming: the whole body for `generated` text.
  std::string full(const AgentUsage& usage, bool length, std::string_view generated);

  bool tool_call() const { return !req_.tool_name.empty(); }

 private:
  std::string event(std::string_view type, boost::json::object data);
  boost::json::object response_object(std::string_view status, boost::json::array output,
                                      const AgentUsage* usage, bool length) const;
  boost::json::array final_output(std::string_view text) const;
  std::string args_prefix() const { return "{\"input\": \""; }

  const AgentRequest& req_;
  std::string model_;
  int64_t created_ = 0;
  uint64_t max_tokens_ = 0;
  std::string response_id_;  // resp_… / chatcmpl-…
  std::string item_id_;      // the streamed output item
  std::string call_id_;      // the tool call's id (the same in stream and final body)
  std::string final_item_id_;
  std::string accumulated_;  // streamed text (or arguments)
  uint64_t sequence_ = 0;
  bool opened_ = false;      // an output item / content block is open
};

}  // namespace ramjet::sim
