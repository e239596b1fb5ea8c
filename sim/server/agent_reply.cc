// sim/server/agent_reply (see agent_reply.h).
#include "sim/server/agent_reply.h"

#include <boost/json.hpp>

#include <cstdio>

namespace ramjet::sim {

namespace json = boost::json;

namespace {

const json::value* find(const json::object& o, std::string_view k) {
  auto it = o.find(k);
  return it == o.end() || it->value().is_null() ? nullptr : &it->value();
}

uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// 32 hex digits (a uuid4().hex look-alike), distinct per (serial, salt).
std::string hex_id(uint64_t serial, uint64_t salt) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(mix(serial * 4 + salt)),
                static_cast<unsigned long long>(mix(~(serial * 4 + salt))));
  return buf;
}

// The JSON string body of `s`, without the quotes (the generated text is JSON-safe filler; this
// keeps the arguments valid whatever it is).
std::string json_escaped(std::string_view s) {
  std::string q = json::serialize(json::string(s));
  return q.substr(1, q.size() - 2);
}

json::value echo(const json::object& o, std::string_view key, json::value fallback) {
  const json::value* v = find(o, key);
  return v ? *v : fallback;
}

}  // namespace

AgentReply::AgentReply(const AgentRequest& request, uint64_t serial, std::string model, int64_t created,
                       uint64_t max_tokens)
    : req_(request), model_(std::move(model)), created_(created), max_tokens_(max_tokens) {
  const bool messages = req_.api == AgentApi::kMessages;
  response_id_ = (messages ? "chatcmpl-" : "resp_") + hex_id(serial, 0);
  item_id_ = hex_id(serial, 1);
  call_id_ = (messages ? "chatcmpl-tool-" : "call_") + hex_id(serial, 2);
  final_item_id_ = (tool_call() ? "fc_" : "msg_") + hex_id(serial, 3);
}

std::string AgentReply::event(std::string_view type, json::object data) {
  if (req_.api == AgentApi::kResponses) {
    data["sequence_number"] = sequence_++;
    data["type"] = type;
  }
  return "event: " + std::string(type) + "\ndata: " + json::serialize(data) + "\n\n";
}

json::object AgentReply::response_object(std::string_view status, json::array output, const AgentUsage* usage,
                                         bool length) const {
  const json::object& o = req_.original;
  json::object r{{"id", response_id_},
                 {"created_at", created_},
                 {"incomplete_details", status == "incomplete" && length
                                            ? json::value(json::object{{"reason", "max_output_tokens"}})
                                            : json::value(nullptr)},
                 {"instructions", echo(o, "instructions", nullptr)},
                 {"metadata", echo(o, "metadata", nullptr)},
                 {"model", model_},
                 {"object", "response"},
                 {"output", std::move(output)},
                 {"parallel_tool_calls", echo(o, "parallel_tool_calls", true)},
                 {"temperature", echo(o, "temperature", 1.0)},
                 {"tool_choice", echo(o, "tool_choice", "auto")},
                 {"tools", echo(o, "tools", json::array{})},
                 {"top_p", echo(o, "top_p", 1.0)},
                 {"background", false},
                 {"max_output_tokens", max_tokens_},
                 {"max_tool_calls", echo(o, "max_tool_calls", nullptr)},
                 {"previous_response_id", nullptr},
                 {"prompt", nullptr},
                 {"reasoning", echo(o, "reasoning", nullptr)},
                 {"service_tier", echo(o, "service_tier", "auto")},
                 {"status", status},
                 {"text", echo(o, "text", nullptr)},
                 {"top_logprobs", nullptr},
                 {"truncation", echo(o, "truncation", "disabled")}};
  if (usage) {
    // vLLM's ResponseUsage from a SimpleContext: cached tokens are always reported; the per-turn
    // lists stay empty (SimpleContext.all_turn_metrics is "not implemented yet").
    r["usage"] = json::object{
        {"input_tokens", usage->prompt},
        {"input_tokens_details", json::object{{"cached_tokens", usage->cached},
                                              {"input_tokens_per_turn", json::array{}},
                                              {"cached_tokens_per_turn", json::array{}}}},
        {"output_tokens", usage->completion},
        {"output_tokens_details", json::object{{"reasoning_tokens", 0},
                                               {"tool_output_tokens", 0},
                                               {"output_tokens_per_turn", json::array{}},
                                               {"tool_output_tokens_per_turn", json::array{}}}},
        {"total_tokens", usage->prompt + usage->completion}};
  } else {
    r["usage"] = nullptr;
  }
  r["user"] = echo(o, "user", nullptr);
  r["input_messages"] = nullptr;
  r["output_messages"] = nullptr;
  return r;
}

json::array AgentReply::final_output(std::string_view text) const {
  if (tool_call()) {
    return json::array{json::object{{"arguments", args_prefix() + json_escaped(text) + "\"}"},
                                    {"call_id", call_id_},
                                    {"name", req_.tool_name},
                                    {"type", "function_call"},
                                    {"id", final_item_id_},
                                    {"namespace", nullptr},
                                    {"status", "completed"}}};
  }
  // The no-parser fallback of _make_response_output_items: one message, no part when empty.
  json::array content;
  if (!text.empty()) {
    content.push_back(json::object{{"annotations", json::array{}}, {"text", text}, {"type", "output_text"},
                                   {"logprobs", nullptr}});
  }
  return json::array{json::object{{"id", final_item_id_}, {"content", std::move(content)}, {"role", "assistant"},
                                  {"status", "completed"}, {"type", "message"}}};
}

std::string AgentReply::head() {
  if (req_.api != AgentApi::kResponses) return "";
  std::string out = event("response.created", json::object{{"response", response_object("in_progress", {}, nullptr, false)}});
  out += event("response.in_progress", json::object{{"response", response_object("in_progress", {}, nullptr, false)}});
  return out;
}

std::string AgentReply::first_output(uint32_t prompt_tokens) {
  if (req_.api != AgentApi::kMessages) return "";
  // model_dump_json(exclude_unset=True): the message's defaults (type, role) are not written.
  json::object message{{"id", response_id_},
                       {"content", json::array{}},
                       {"model", model_},
                       {"stop_reason", nullptr},
                       {"stop_sequence", nullptr},
                       {"usage", json::object{{"input_tokens", prompt_tokens}, {"output_tokens", 0}}}};
  return event("message_start", json::object{{"type", "message_start"}, {"message", std::move(message)}});
}

std::string AgentReply::text(std::string_view delta) {
  if (delta.empty()) return "";
  std::string out;
  const bool first = !opened_;
  opened_ = true;
  if (req_.api == AgentApi::kMessages) {
    if (tool_call()) {
      if (first) {
        json::object block{{"type", "tool_use"}, {"id", call_id_}, {"name", req_.tool_name}, {"input", json::object{}}};
        out += event("content_block_start",
                     json::object{{"type", "content_block_start"}, {"content_block", std::move(block)}, {"index", 0}});
      }
      std::string part = (first ? args_prefix() : std::string()) + json_escaped(delta);
      accumulated_ += part;
      out += event("content_block_delta",
                   json::object{{"type", "content_block_delta"},
                                {"delta", json::object{{"type", "input_json_delta"}, {"partial_json", part}}},
                                {"index", 0}});
      return out;
    }
    if (first) {
      out += event("content_block_start", json::object{{"type", "content_block_start"},
                                                       {"content_block", json::object{{"type", "text"}, {"text", ""}}},
                                                       {"index", 0}});
    }
    accumulated_ += delta;
    out += event("content_block_delta", json::object{{"type", "content_block_delta"},
                                                     {"delta", json::object{{"type", "text_delta"}, {"text", delta}}},
                                                     {"index", 0}});
    return out;
  }
  if (tool_call()) {
    if (first) {
      json::object item{{"arguments", ""}, {"call_id", call_id_}, {"name", req_.tool_name},
                        {"type", "function_call"}, {"id", item_id_}, {"status", "in_progress"}};
      out += event("response.output_item.added", json::object{{"item", std::move(item)}, {"output_index", 0}});
    }
    std::string part = (first ? args_prefix() : std::string()) + json_escaped(delta);
    accumulated_ += part;
    out += event("response.function_call_arguments.delta",
                 json::object{{"delta", part}, {"item_id", item_id_}, {"output_index", 0}});
    return out;
  }
  if (first) {
    json::object item{{"id", item_id_}, {"content", json::array{}}, {"role", "assistant"},
                      {"status", "in_progress"}, {"type", "message"}};
    out += event("response.output_item.added", json::object{{"item", std::move(item)}, {"output_index", 0}});
    json::object part{{"annotations", json::array{}}, {"text", ""}, {"type", "output_text"}, {"logprobs", json::array{}}};
    out += event("response.content_part.added", json::object{{"content_index", 0}, {"item_id", item_id_},
                                                              {"output_index", 0}, {"part", std::move(part)}});
  }
  accumulated_ += delta;
  out += event("response.output_text.delta", json::object{{"content_index", 0}, {"delta", delta}, {"item_id", item_id_},
                                                           {"logprobs", json::array{}}, {"output_index", 0}});
  return out;
}

std::string AgentReply::close(const AgentUsage& usage, bool length) {
  std::string out;
  if (req_.api == AgentApi::kMessages) {
    if (opened_ && tool_call()) {
      accumulated_ += "\"}";
      out += event("content_block_delta",
                   json::object{{"type", "content_block_delta"},
                                {"delta", json::object{{"type", "input_json_delta"}, {"partial_json", "\"}"}}},
                                {"index", 0}});
    }
    if (opened_) out += event("content_block_stop", json::object{{"type", "content_block_stop"}, {"index", 0}});
    const std::string_view stop = tool_call() ? "tool_use" : length ? "max_tokens" : "end_turn";
    out += event("message_delta",
                 json::object{{"type", "message_delta"},
                              {"delta", json::object{{"stop_reason", stop}}},
                              {"usage", json::object{{"input_tokens", usage.prompt}, {"output_tokens", usage.completion}}}});
    out += event("message_stop", json::object{{"type", "message_stop"}});
    return out;
  }
  if (opened_ && tool_call()) {
    accumulated_ += "\"}";
    out += event("response.function_call_arguments.delta",
                 json::object{{"delta", "\"}"}, {"item_id", item_id_}, {"output_index", 0}});
    out += event("response.function_call_arguments.done",
                 json::object{{"arguments", accumulated_}, {"item_id", item_id_}, {"name", req_.tool_name},
                              {"output_index", 0}});
    json::object item{{"arguments", accumulated_}, {"call_id", call_id_}, {"name", req_.tool_name},
                      {"type", "function_call"}, {"id", item_id_}, {"status", "completed"}};
    out += event("response.output_item.done", json::object{{"item", std::move(item)}, {"output_index", 0}});
  } else if (opened_) {
    out += event("response.output_text.done", json::object{{"content_index", 0}, {"item_id", item_id_},
                                                            {"logprobs", json::array{}}, {"output_index", 0},
                                                            {"text", accumulated_}});
    json::object part{{"annotations", json::array{}}, {"text", accumulated_}, {"type", "output_text"},
                      {"logprobs", nullptr}};
    out += event("response.content_part.done", json::object{{"content_index", 0}, {"item_id", item_id_},
                                                             {"output_index", 0}, {"part", part}});
    json::object item{{"id", item_id_}, {"content", json::array{part}}, {"role", "assistant"},
                      {"status", "completed"}, {"type", "message"}, {"summary", json::array{}}};
    out += event("response.output_item.done", json::object{{"item", std::move(item)}, {"output_index", 0}});
  }
  // The final body reports what was streamed (the arguments as they went out).
  const bool incomplete = length && !tool_call();
  json::array output = tool_call() ? json::array{json::object{{"arguments", accumulated_},
                                                              {"call_id", call_id_},
                                                              {"name", req_.tool_name},
                                                              {"type", "function_call"},
                                                              {"id", final_item_id_},
                                                              {"namespace", nullptr},
                                                              {"status", "completed"}}}
                                   : final_output(accumulated_);
  out += event("response.completed",
               json::object{{"response", response_object(incomplete ? "incomplete" : "completed", std::move(output),
                                                         &usage, length)}});
  return out;
}

std::string AgentReply::full(const AgentUsage& usage, bool length, std::string_view generated) {
  if (req_.api == AgentApi::kMessages) {
    json::array content;
    if (tool_call()) {
      content.push_back(json::object{{"type", "tool_use"},
                                     {"id", call_id_},
                                     {"name", req_.tool_name},
                                     {"input", json::object{{"input", generated}}}});
    } else if (!generated.empty()) {
      content.push_back(json::object{{"type", "text"}, {"text", generated}});
    }
    const std::string_view stop = tool_call() ? "tool_use" : length ? "max_tokens" : "end_turn";
    json::object o{{"id", response_id_},
                   {"type", "message"},
                   {"role", "assistant"},
                   {"content", std::move(content)},
                   {"model", model_},
                   {"stop_reason", stop},
                   {"usage", json::object{{"input_tokens", usage.prompt}, {"output_tokens", usage.completion}}}};
    return json::serialize(o);
  }
  const bool incomplete = length && !tool_call();
  return json::serialize(
      response_object(incomplete ? "incomplete" : "completed", final_output(generated), &usage, length));
}

}  // namespace ramjet::sim
