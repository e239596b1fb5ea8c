// sim/server/agent_reply (see agent_reply.h).
#include "sim/server/agent_reply.h"

#include <boost/json.hpp>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

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

// 16 hex digits (vLLM's random_uuid()), distinct per (serial, salt).
std::string hex_id(uint64_t serial, uint64_t salt) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(mix(serial * 4 + salt)));
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

// The request's tools as ResponsesResponse echoes them: a function tool as openai's FunctionTool
// dumps it (every declared field, null when unset, "async" by alias; extras after them), any
// other tool as sent.
json::value echo_tools(const json::object& o) {
  const json::value* tools = find(o, "tools");
  if (!tools || !tools->is_array()) return json::array{};
  static constexpr std::string_view kDeclared[] = {"name",  "parameters",     "strict",      "type",         "allowed_callers",
                                                   "async", "defer_loading", "description", "output_schema"};
  json::array out;
  for (const auto& t : tools->as_array()) {
    const json::object* tool = t.if_object();
    const json::value* type = tool ? find(*tool, "type") : nullptr;
    if (!type || !type->is_string() || type->as_string() != "function") {
      out.push_back(t);
      continue;
    }
    json::object dumped;
    for (std::string_view k : kDeclared) {
      auto it = tool->find(k);
      dumped[k] = it == tool->end() ? json::value(nullptr) : it->value();
    }
    for (const auto& kv : *tool) {
      if (!dumped.contains(kv.key())) dumped[kv.key()] = kv.value();
    }
    out.push_back(std::move(dumped));
  }
  return out;
}

}  // namespace

AgentReply::AgentReply(const AgentRequest& request, uint64_t serial, std::string response_id, std::string model,
                       int64_t created, uint64_t max_tokens, bool details)
    : req_(request),
      model_(std::move(model)),
      created_(created),
      max_tokens_(max_tokens),
      details_(details),
      response_id_(std::move(response_id)) {
  const bool messages = req_.api == AgentApi::kMessages;
  item_id_ = (tool_call() ? "fc_" : "msg_") + hex_id(serial, 1);
  call_id_ = (messages ? "chatcmpl-tool-" : "call_") + hex_id(serial, 2);
}

std::string AgentReply::event(std::string_view type, json::object data) {
  if (req_.api == AgentApi::kResponses) {
    // The openai event models declare their fields alphabetically (sequence_number, type among
    // them): pydantic dumps them in that order.
    data["sequence_number"] = sequence_++;
    data["type"] = type;
    std::vector<std::pair<std::string, json::value>> fields;
    for (auto& kv : data) fields.emplace_back(std::string(kv.key()), std::move(kv.value()));
    std::sort(fields.begin(), fields.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    json::object sorted;
    for (auto& [k, v] : fields) sorted[k] = std::move(v);
    data = std::move(sorted);
  }
  return "event: " + std::string(type) + "\ndata: " + json::serialize(data) + "\n\n";
}

json::object AgentReply::anthropic_usage(const AgentUsage& u) const {
  if (!details_) return json::object{{"input_tokens", u.prompt}, {"output_tokens", u.completion}};
  const int64_t input = static_cast<int64_t>(u.prompt) - u.cached - u.created;
  return json::object{{"input_tokens", std::max<int64_t>(0, input)},
                      {"output_tokens", u.completion},
                      {"cache_creation_input_tokens", u.created},
                      {"cache_read_input_tokens", u.cached}};
}

json::object AgentReply::call_item(std::string_view arguments, std::string_view status) const {
  // openai's ResponseFunctionToolCall, dumped whole (by alias: async_ is "async").
  return json::object{{"arguments", arguments}, {"call_id", call_id_}, {"name", req_.tool_name},
                      {"type", "function_call"}, {"id", item_id_}, {"async", nullptr},
                      {"caller", nullptr}, {"namespace", nullptr}, {"status", status}};
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
                 {"tool_choice", echo(o, "tool_choice", "auto")},  // ("none" without tools: parse_responses)
                 {"tools", echo_tools(o)},
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
    // vLLM's ResponseUsage from a SimpleContext: cached and cache-write tokens are always
    // reported; the per-turn lists stay empty (SimpleContext.all_turn_metrics is "not
    // implemented yet").
    r["usage"] = json::object{
        {"input_tokens", usage->prompt},
        {"input_tokens_details", json::object{{"cached_tokens", usage->cached},
                                              {"cache_write_tokens", usage->created},
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
  // The sampling params' penalties (the request's, else 0.0), then vLLM's transfer fields;
  // metrics is left out while None.
  r["presence_penalty"] = echo(o, "presence_penalty", 0.0);
  r["frequency_penalty"] = echo(o, "frequency_penalty", 0.0);
  r["kv_transfer_params"] = nullptr;
  r["ec_transfer_params"] = nullptr;
  r["input_messages"] = nullptr;
  r["output_messages"] = nullptr;
  return r;
}

namespace {

// A message output item (openai's ResponseOutputMessage, phase last).
json::object message_item(std::string_view id, json::array content, std::string_view status) {
  return json::object{{"id", id},         {"content", std::move(content)}, {"role", "assistant"},
                      {"status", status}, {"type", "message"},             {"phase", nullptr}};
}

}  // namespace

json::array AgentReply::final_output(std::string_view text) const {
  if (tool_call()) return json::array{call_item(args_prefix() + json_escaped(text) + "\"}", "completed")};
  // The no-parser fallback of _make_response_output_items: one message, no part when empty.
  json::array content;
  if (!text.empty()) {
    content.push_back(json::object{{"annotations", json::array{}}, {"text", text}, {"type", "output_text"},
                                   {"logprobs", nullptr}});
  }
  return json::array{message_item(item_id_, std::move(content), "completed")};
}

std::string AgentReply::head() {
  if (req_.api != AgentApi::kResponses) return "";
  std::string out = event("response.created", json::object{{"response", response_object("in_progress", {}, nullptr, false)}});
  out += event("response.in_progress", json::object{{"response", response_object("in_progress", {}, nullptr, false)}});
  return out;
}

std::string AgentReply::first_output(uint32_t prompt_tokens) {
  if (req_.api != AgentApi::kMessages) return "";
  // From the chat stream's first chunk (continuous usage: the prompt, no details yet); type and
  // role set explicitly so that exclude_unset keeps them.
  json::object message{{"id", response_id_},
                       {"type", "message"},
                       {"role", "assistant"},
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
      out += event("response.output_item.added", json::object{{"item", call_item("", "in_progress")}, {"output_index", 0}});
    }
    std::string part = (first ? args_prefix() : std::string()) + json_escaped(delta);
    accumulated_ += part;
    out += event("response.function_call_arguments.delta",
                 json::object{{"delta", part}, {"item_id", item_id_}, {"output_index", 0}});
    return out;
  }
  if (first) {
    out += event("response.output_item.added",
                 json::object{{"item", message_item(item_id_, json::array{}, "in_progress")}, {"output_index", 0}});
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
    // From the chat stream's usage chunk: stop_sequence set (None) so exclude_unset keeps it.
    // The sim's tool call is complete (its arguments closed): tool_use, as vLLM reports a parsed call.
    const std::string_view stop = tool_call() ? "tool_use" : length ? "max_tokens" : "end_turn";
    out += event("message_delta", json::object{{"type", "message_delta"},
                                               {"delta", json::object{{"stop_reason", stop}, {"stop_sequence", nullptr}}},
                                               {"usage", anthropic_usage(usage)}});
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
    out += event("response.output_item.done", json::object{{"item", call_item(accumulated_, "completed")}, {"output_index", 0}});
  } else if (opened_) {
    out += event("response.output_text.done", json::object{{"content_index", 0}, {"item_id", item_id_},
                                                            {"logprobs", json::array{}}, {"output_index", 0},
                                                            {"text", accumulated_}});
    json::object part{{"annotations", json::array{}}, {"text", accumulated_}, {"type", "output_text"},
                      {"logprobs", nullptr}};
    out += event("response.content_part.done", json::object{{"content_index", 0}, {"item_id", item_id_},
                                                             {"output_index", 0}, {"part", part}});
    out += event("response.output_item.done",
                 json::object{{"item", message_item(item_id_, json::array{part}, "completed")}, {"output_index", 0}});
  }
  // The final body reports what was streamed (the arguments as they went out).
  const bool incomplete = length && !tool_call();
  json::array output = tool_call() ? json::array{call_item(accumulated_, "completed")} : final_output(accumulated_);
  out += event("response.completed",
               json::object{{"response", response_object(incomplete ? "incomplete" : "completed", std::move(output),
                                                         &usage, length)}});
  return out;
}

std::string AgentReply::full(const AgentUsage& usage, bool length, std::string_view generated,
                             const json::object* kv) {
  if (req_.api == AgentApi::kMessages) {
    json::array content;
    if (tool_call()) {
      content.push_back(json::object{{"type", "tool_use"},
                                     {"id", call_id_},
                                     {"name", req_.tool_name},
                                     {"input", json::object{{"input", generated}}}});
    } else {
      // Anthropic's shape for an empty completion is one empty text block, not [].
      content.push_back(json::object{{"type", "text"}, {"text", generated}});
    }
    const std::string_view stop = tool_call() ? "tool_use" : length ? "max_tokens" : "end_turn";
    // model_dump(exclude_none=True): stop_sequence and the transfer params are left out (a
    // prefill leg's params are not None).
    json::object o{{"id", response_id_},
                   {"type", "message"},
                   {"role", "assistant"},
                   {"content", std::move(content)},
                   {"model", model_},
                   {"stop_reason", stop},
                   {"usage", anthropic_usage(usage)}};
    if (kv != nullptr) o["kv_transfer_params"] = *kv;
    return json::serialize(o);
  }
  const bool incomplete = length && !tool_call();
  json::object r = response_object(incomplete ? "incomplete" : "completed", final_output(generated), &usage, length);
  if (kv != nullptr) r["kv_transfer_params"] = *kv;
  return json::serialize(r);
}

}  // namespace ramjet::sim
