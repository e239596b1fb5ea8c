// sim/server/agent_convert (see agent_convert.h).
#include "sim/server/agent_convert.h"

#include <boost/json.hpp>

#include <algorithm>
#include <ctime>
#include <initializer_list>
#include <string_view>

#include "sim/server/python_json.h"
#include "sim/server/validation.h"

namespace ramjet::sim {

namespace json = boost::json;

namespace {

const json::value* find(const json::object& o, std::string_view k) {
  auto it = o.find(k);
  return it == o.end() || it->value().is_null() ? nullptr : &it->value();
}

std::string_view str_or(const json::object& o, std::string_view k, std::string_view fallback = {}) {
  const json::value* v = find(o, k);
  return v && v->is_string() ? std::string_view(v->as_string()) : fallback;
}

AgentError bad(std::string message, std::string param = {}) {
  return AgentError{400, "BadRequestError", std::move(message), std::move(param)};
}

// --- shared -----------------------------------------------------------------------------------

// vLLM's validate_cache_salt (the chat request a Messages body becomes runs it; Responses ran it
// in validation.h already): a non-empty string of at most 128 characters without '@', '/', '\\'
// or NUL when given.
std::optional<AgentError> read_cache_salt(const json::object& o, std::string& out) {
  const json::value* v = find(o, "cache_salt");
  if (!v) return std::nullopt;
  if (!v->is_string() || v->as_string().empty())
    return bad("Parameter 'cache_salt' must be a non-empty string if provided. (parameter=cache_salt)", "cache_salt");
  size_t chars = 0;
  for (unsigned char c : v->as_string()) chars += (c & 0xc0) != 0x80;
  if (chars > 128 || v->as_string().find_first_of(std::string_view("@/\\\0", 4)) != std::string::npos) {
    return bad("Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or "
               "NUL. (parameter=cache_salt)",
               "cache_salt");
  }
  out = std::string(v->as_string());
  return std::nullopt;
}

// FunctionDefinition(...).model_dump() in vLLM 0.32 (generate/base/protocol.py): its serializer
// keeps the declared fields only — name, description, parameters, then strict and defer_loading
// when they are set (None is left out); any other field of the client's tool is dropped. The
// flags are pydantic booleans.
Result<json::object, AgentError> function_definition(json::value name, json::value description, json::value parameters,
                                                     const json::object& tool) {
  json::object fn{{"name", std::move(name)}, {"description", std::move(description)}, {"parameters", std::move(parameters)}};
  for (std::string_view k : {"strict", "defer_loading"}) {
    const json::value* v = find(tool, k);
    if (!v) continue;
    if (!v->is_bool()) return bad("tool " + std::string(k) + " must be a boolean", "tools");
    fn[k] = *v;
  }
  return fn;
}

// The sim's tool-call answer: a user turn with tools declared and tool_choice not "none".
void decide_tool_call(AgentRequest& r, std::string_view forced_name) {
  const json::value* tools = find(r.chat, "tools");
  const json::value* msgs = find(r.chat, "messages");
  if (!tools || !tools->is_array() || tools->as_array().empty() || !msgs || !msgs->is_array()) return;
  if (const json::value* tc = find(r.chat, "tool_choice"); tc && tc->is_string() && tc->as_string() == "none") return;
  const auto& m = msgs->as_array();
  const json::object* last = m.empty() ? nullptr : m.back().if_object();
  if (!last || str_or(*last, "role") != "user") return;
  if (!forced_name.empty()) {
    r.tool_name = std::string(forced_name);
    return;
  }
  const json::object* first = tools->as_array().front().if_object();
  const json::value* fn = first ? find(*first, "function") : nullptr;
  if (fn && fn->is_object()) r.tool_name = std::string(str_or(fn->as_object(), "name"));
}

// An output budget validation.h already checked is an integer (its limits come later).
void read_max_tokens(const json::object& o, std::string_view key, AgentRequest& r) {
  const json::value* v = find(o, key);
  if (v && v->is_int64()) r.max_tokens = v->as_int64();
  if (v && v->is_uint64()) r.max_tokens = static_cast<int64_t>(std::min<uint64_t>(v->as_uint64(), INT64_MAX));
}

// --- Responses --------------------------------------------------------------------------------

json::object* last_assistant(json::array& messages) {
  if (messages.empty()) return nullptr;
  json::object* m = messages.back().if_object();
  return m && str_or(*m, "role") == "assistant" ? m : nullptr;
}

std::string first_text(const json::value* content) {
  if (!content) return "";
  if (content->is_string()) return std::string(content->as_string());
  if (!content->is_array() || content->as_array().empty()) return "";
  const json::value& first = content->as_array().front();
  if (first.is_string()) return std::string(first.as_string());
  if (const json::object* o = first.if_object()) return std::string(str_or(*o, "text"));
  return "";
}

// responses/utils.py construct_chat_messages_with_tool_call + _construct_message_from_response_item.
std::optional<AgentError> responses_items(const json::array& items, json::array& messages) {
  for (const auto& it : items) {
    const json::object* item = it.if_object();
    if (!item) return bad("input items must be objects", "input");
    const std::string_view type = str_or(*item, "type");
    json::object* prev = last_assistant(messages);
    if (type == "function_call") {
      const json::value* call_id = find(*item, "call_id");
      const json::value* name = find(*item, "name");
      const json::value* args = find(*item, "arguments");
      if (!call_id || !call_id->is_string() || !name || !name->is_string() || !args || !args->is_string())
        return bad("a function_call input item needs string call_id, name and arguments", "input");
      // vLLM parses the item into openai's ResponseFunctionToolCall; a namespaced call's name is
      // flat_namespace_tool_name(namespace, name) = "<namespace>__<name>".
      json::value full = *name;
      if (const json::value* ns = find(*item, "namespace"); ns && ns->is_string() && !ns->as_string().empty())
        full = json::string(std::string(ns->as_string()) + "__" + std::string(name->as_string()));
      json::object call{{"id", *call_id},
                        {"function", json::object{{"name", std::move(full)}, {"arguments", *args}}},
                        {"type", "function"}};
      if (prev) {
        const json::value* calls = find(*prev, "tool_calls");
        if (!calls) {
          (*prev)["tool_calls"] = json::array{std::move(call)};
          continue;
        }
        if (calls->is_array()) {
          (*prev)["tool_calls"].as_array().push_back(std::move(call));
          continue;
        }
      }
      messages.push_back(json::object{{"role", "assistant"}, {"tool_calls", json::array{std::move(call)}}});
    } else if (type == "function_call_output") {
      json::object tool{{"role", "tool"}};
      auto out = item->find("output");
      tool["content"] = out == item->end() ? json::value(nullptr) : out->value();
      auto cid = item->find("call_id");
      tool["tool_call_id"] = cid == item->end() ? json::value(nullptr) : cid->value();
      messages.push_back(std::move(tool));
    } else if (type == "reasoning") {
      std::string text;
      if (const json::value* c = find(*item, "content"); c && c->is_array() && !c->as_array().empty()) {
        text = first_text(c);
      } else if (const json::value* s = find(*item, "summary"); s && s->is_array() && !s->as_array().empty()) {
        text = first_text(s);
      }
      if (prev && !find(*prev, "reasoning")) {
        (*prev)["reasoning"] = text;
        continue;
      }
      messages.push_back(json::object{{"role", "assistant"}, {"reasoning", text}});
    } else if (str_or(*item, "role") == "assistant") {
      const std::string text = first_text(find(*item, "content"));
      if (prev && !find(*prev, "content")) {
        (*prev)["content"] = text;
        continue;
      }
      messages.push_back(json::object{{"role", "assistant"}, {"content", text}});
    } else {
      if (!find(*item, "role")) return bad("an input item needs a role or a known type", "input");
      messages.push_back(*item);  // user/system/developer messages pass as they are
    }
  }
  return std::nullopt;
}

// responses/utils.py should_continue_final_message.
bool continue_final(const json::value& input) {
  if (!input.is_array() || input.as_array().empty()) return false;
  const json::object* last = input.as_array().back().if_object();
  if (!last) return false;
  const std::string_view type = str_or(*last, "type", "message");
  if (type != "message" && type != "reasoning") return false;
  const std::string_view status = str_or(*last, "status");
  return status == "in_progress" || status == "incomplete";
}

Result<AgentRequest, AgentError> parse_responses(json::object o) {
  AgentRequest r;
  r.api = AgentApi::kResponses;
  if (const json::value* m = find(o, "model")) {
    if (!m->is_string()) return bad("model must be a string", "model");
    r.model = m->as_string();
  }
  if (const json::value* s = find(o, "stream")) {
    if (!s->is_bool()) return bad("stream must be a boolean", "stream");
    r.stream = s->as_bool();
  }
  if (const json::value* b = find(o, "background")) {
    if (!b->is_bool()) return bad("background must be a boolean", "background");
    r.background = b->as_bool();
    const json::value* store = find(o, "store");
    if (r.background && store && store->is_bool() && !store->as_bool())
      return bad("background can only be used when `store` is true", "background");
  }
  if (find(o, "prompt")) return bad("prompt template is not supported", "prompt");
  if (const json::value* p = find(o, "previous_response_id")) {
    if (!p->is_string()) return bad("previous_response_id must be a string", "previous_response_id");
    r.previous_response_id = p->as_string();
  }
  read_max_tokens(o, "max_output_tokens", r);
  if (auto e = read_cache_salt(o, r.cache_salt)) return *e;

  json::array messages;
  if (const json::value* ins = find(o, "instructions")) {
    if (!ins->is_string()) return bad("instructions must be a string", "instructions");
    if (!ins->as_string().empty()) messages.push_back(json::object{{"role", "system"}, {"content", *ins}});
  }
  const json::value* input = find(o, "input");
  if (!input) return bad("Field required: input", "input");
  if (input->is_string()) {
    messages.push_back(json::object{{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    if (auto e = responses_items(input->as_array(), messages)) return *e;
  } else {
    return bad("input must be a string or an array of items", "input");
  }
  if (messages.empty()) return bad("input must not be empty", "input");
  const bool cont = continue_final(*input);

  // construct_tool_dicts: each openai FunctionTool (and each function of a NamespaceTool,
  // renamed "<namespace>__<name>") becomes a FunctionDefinition, dumped as vLLM 0.32 dumps it.
  json::array tools;
  std::string forced;
  auto function_of = [](const json::object& tool, json::value name) -> Result<json::object, AgentError> {
    auto d = tool.find("description");
    auto p = tool.find("parameters");
    auto fn = function_definition(std::move(name), d == tool.end() ? json::value(nullptr) : d->value(),
                                  p == tool.end() ? json::value(nullptr) : p->value(), tool);
    if (!fn) return fn.error();
    return json::object{{"type", "function"}, {"function", std::move(fn.value())}};
  };
  if (const json::value* t = find(o, "tools")) {
    if (!t->is_array()) return bad("tools must be an array", "tools");
    for (const auto& tv : t->as_array()) {
      const json::object* tool = tv.if_object();
      if (!tool) return bad("tools must be objects", "tools");
      const std::string_view type = str_or(*tool, "type");
      if (type == "namespace") {
        const json::value* ns = find(*tool, "name");
        const json::value* members = find(*tool, "tools");
        if (!ns || !ns->is_string() || !members || !members->is_array())
          return bad("a namespace tool needs a name and tools", "tools");
        for (const auto& mv : members->as_array()) {
          const json::object* member = mv.if_object();
          if (!member) return bad("namespace tools must be objects", "tools");
          if (str_or(*member, "type") != "function") continue;
          const json::value* name = find(*member, "name");
          if (!name || !name->is_string()) return bad("a function tool needs a name", "tools");
          auto fn = function_of(*member, json::string(std::string(ns->as_string()) + "__" + std::string(name->as_string())));
          if (!fn) return fn.error();
          tools.push_back(std::move(fn.value()));
        }
        continue;
      }
      if (type != "function") continue;
      const json::value* name = find(*tool, "name");
      if (!name || !name->is_string()) return bad("a function tool needs a name", "tools");
      auto fn = function_of(*tool, *name);
      if (!fn) return fn.error();
      tools.push_back(std::move(fn.value()));
    }
  }
  json::value tool_choice = "auto";
  if (const json::value* tc = find(o, "tool_choice")) {
    tool_choice = *tc;
    if (const json::object* named = tc->if_object(); named && str_or(*named, "type") == "function")
      forced = std::string(str_or(*named, "name"));
  }
  // ResponsesRequest.check_tool_usage: without tools, auto becomes none (what the response
  // echoes), and a required or named choice is refused.
  if (const json::value* t = find(o, "tools"); !t || !t->is_array() || t->as_array().empty()) {
    const json::object* named = tool_choice.if_object();
    const std::string_view kind = named ? str_or(*named, "type") : std::string_view();
    if (tool_choice == "auto" || tool_choice == "none") {
      o["tool_choice"] = "none";
    } else if (tool_choice == "required") {
      return bad("Tool choice 'required' must be specified with 'tools' parameter. (parameter=tool_choice)",
                 "tool_choice");
    } else if (kind == "function" || kind == "custom") {
      return bad("Tool choice 'function' not found in 'tools' parameter. (parameter=tool_choice)", "tool_choice");
    }
  }
  // build_chat_params (vLLM 0.32): the request's chat_template_kwargs, and reasoning.effort as the
  // chat's reasoning_effort (Prompter::chat merges it, with enable_thinking, over the kwargs).
  json::object kwargs;
  if (const json::value* kw = find(o, "chat_template_kwargs")) {
    if (!kw->is_object()) return bad("chat_template_kwargs must be an object", "chat_template_kwargs");
    kwargs = kw->as_object();
  }
  if (const json::value* reasoning = find(o, "reasoning"); reasoning && reasoning->is_object()) {
    if (const json::value* effort = find(reasoning->as_object(), "effort")) r.chat["reasoning_effort"] = *effort;
  }
  r.chat["messages"] = std::move(messages);
  if (!tools.empty()) r.chat["tools"] = std::move(tools);
  r.chat["tool_choice"] = std::move(tool_choice);
  r.chat["add_generation_prompt"] = !cont;
  r.chat["continue_final_message"] = cont;
  if (!kwargs.empty()) r.chat["chat_template_kwargs"] = std::move(kwargs);
  decide_tool_call(r, forced);
  r.original = std::move(o);
  return r;
}

// --- Anthropic Messages -------------------------------------------------------------------------

bool known_block_type(std::string_view t) {
  return t == "text" || t == "image" || t == "tool_use" || t == "tool_result" || t == "tool_reference" ||
         t == "thinking" || t == "redacted_thinking";
}

std::optional<AgentError> check_blocks(const json::value& content, std::string_view where) {
  if (content.is_string()) return std::nullopt;
  if (!content.is_array()) return bad(std::string(where) + " must be a string or an array of content blocks");
  for (const auto& b : content.as_array()) {
    const json::object* block = b.if_object();
    if (!block || !known_block_type(str_or(*block, "type")))
      return bad(std::string(where) + " holds a content block of unknown type");
    if (const json::value* in = find(*block, "input"); in && !in->is_object())
      return bad("tool_use input must be an object");
    if (const json::value* c = find(*block, "content"); c && !c->is_string() && !c->is_array())
      return bad("tool_result content must be a string or an array");
  }
  return std::nullopt;
}

bool is_billing_header(std::string_view text) { return text.rfind("x-anthropic-billing-header", 0) == 0; }

void append_system_blocks(const json::array& blocks, std::string& system) {
  for (const auto& b : blocks) {
    const json::object& block = b.as_object();
    const std::string_view text = str_or(block, "text");
    if (str_or(block, "type") != "text" || text.empty() || is_billing_header(text)) continue;
    system += text;
  }
}

std::string image_url(const json::object& source) {
  if (str_or(source, "type") == "url") return std::string(str_or(source, "url"));
  return "data:" + std::string(str_or(source, "media_type", "image/jpeg")) + ";base64," +
         std::string(str_or(source, "data"));
}

// _convert_user_tool_result: a tool message (+ a user message with its images, + a tool message
// with its tool references).
void user_tool_result(const json::object& block, json::array& out) {
  std::string text;
  json::array images, refs;
  const json::value* content = find(block, "content");
  if (content && content->is_string()) {
    text = content->as_string();
  } else if (content && content->is_array()) {
    bool first = true;
    for (const auto& iv : content->as_array()) {
      const json::object* item = iv.if_object();
      if (!item) continue;
      const std::string_view t = str_or(*item, "type");
      if (t == "text") {
        if (!first) text += "\n";
        first = false;
        text += str_or(*item, "text");
      } else if (t == "image") {
        const json::value* src = find(*item, "source");
        std::string url = image_url(src && src->is_object() ? src->as_object() : json::object{});
        if (!url.empty()) images.push_back(json::object{{"type", "image_url"}, {"image_url", json::object{{"url", url}}}});
      } else if (t == "tool_reference") {
        std::string_view name = str_or(*item, "tool_name");
        if (name.empty()) name = str_or(*item, "name");
        if (!name.empty()) refs.push_back(json::object{{"type", "tool_reference"}, {"name", name}});
      }
    }
  }
  const std::string id(str_or(block, "tool_use_id"));
  out.push_back(json::object{{"role", "tool"}, {"tool_call_id", id}, {"content", text}});
  if (!images.empty()) out.push_back(json::object{{"role", "user"}, {"content", std::move(images)}});
  if (!refs.empty()) out.push_back(json::object{{"role", "tool"}, {"tool_call_id", id}, {"content", std::move(refs)}});
}

Result<AgentRequest, AgentError> parse_messages(json::object o, std::string_view disabled_thinking_effort) {
  AgentRequest r;
  r.api = AgentApi::kMessages;
  const json::value* model = find(o, "model");
  if (!model || !model->is_string() || model->as_string().empty()) return bad("Model is required");
  r.model = model->as_string();
  read_max_tokens(o, "max_tokens", r);
  if (auto e = read_cache_salt(o, r.cache_salt)) return *e;  // passed on to the chat request
  if (const json::value* s = find(o, "stream")) {
    if (!s->is_bool()) return bad("stream must be a boolean");
    r.stream = s->as_bool();
  }
  const json::value* msgs = find(o, "messages");
  if (!msgs || !msgs->is_array()) return bad("messages must be an array");
  for (const auto& mv : msgs->as_array()) {
    const json::object* m = mv.if_object();
    if (!m) return bad("messages must be objects");
    const std::string_view role = str_or(*m, "role");
    if (role != "user" && role != "assistant" && role != "system" && role != "ctx" && role != "msg")
      return bad("message role must be user, assistant or system");
    const json::value* content = find(*m, "content");
    if (!content) return bad("message content is required");
    if (auto e = check_blocks(*content, "message content")) return *e;
  }
  const json::value* system = find(o, "system");
  if (system) {
    if (auto e = check_blocks(*system, "system")) return *e;
  }

  json::array out;
  // _convert_system_message: the system field and system-role messages, joined.
  std::string sys;
  bool any_system = false;
  if (system && system->is_string() && !system->as_string().empty()) {
    sys += system->as_string();
    any_system = true;
  } else if (system && system->is_array()) {
    const size_t before = sys.size();
    append_system_blocks(system->as_array(), sys);
    any_system = sys.size() > before;
  }
  for (const auto& mv : msgs->as_array()) {
    const json::object& m = mv.as_object();
    if (str_or(m, "role") != "system") continue;
    const json::value& c = *find(m, "content");
    if (c.is_string()) {
      sys += c.as_string();
      any_system = true;
    } else {
      const size_t before = sys.size();
      append_system_blocks(c.as_array(), sys);
      any_system = any_system || sys.size() > before;
    }
  }
  if (any_system) out.push_back(json::object{{"role", "system"}, {"content", sys}});

  // _convert_messages.
  const auto now = static_cast<long long>(std::time(nullptr));
  for (const auto& mv : msgs->as_array()) {
    const json::object& m = mv.as_object();
    std::string role(str_or(m, "role"));
    if (role == "system") continue;
    if (role == "ctx" || role == "msg") role = "user";
    json::object msg{{"role", role}};
    const json::value& content = *find(m, "content");
    if (content.is_string()) {
      msg["content"] = content;
    } else {
      json::array parts, calls;
      std::string reasoning;
      bool any_reasoning = false;
      for (const auto& bv : content.as_array()) {
        const json::object& b = bv.as_object();
        const std::string_view t = str_or(b, "type");
        if (t == "text" && !str_or(b, "text").empty()) {
          parts.push_back(json::object{{"type", "text"}, {"text", *find(b, "text")}});
        } else if (t == "image" && find(b, "source") && find(b, "source")->is_object() &&
                   !find(b, "source")->as_object().empty()) {  // (an empty dict is falsy in Python)
          parts.push_back(json::object{{"type", "image_url"},
                                       {"image_url", json::object{{"url", image_url(find(b, "source")->as_object())}}}});
        } else if (t == "thinking" && find(b, "thinking")) {
          reasoning += str_or(b, "thinking");
          any_reasoning = true;
        } else if (t == "tool_use") {
          std::string id(str_or(b, "id"));
          if (id.empty()) id = "call_" + std::to_string(now);
          const json::value* input = find(b, "input");
          const bool empty_input = !input || input->as_object().empty();
          std::string args = python_json_dumps(empty_input ? json::value(json::object{}) : *input);
          calls.push_back(json::object{{"id", id}, {"type", "function"},
                                       {"function", json::object{{"name", str_or(b, "name")}, {"arguments", args}}}});
        } else if (t == "tool_result") {
          if (role == "user") {
            user_tool_result(b, out);
          } else {
            const json::value* c = find(b, "content");
            const bool truthy = c && !(c->is_string() && c->as_string().empty()) && !(c->is_array() && c->as_array().empty());
            parts.push_back(json::object{{"type", "text"}, {"text", "Tool result: " + (truthy ? python_str(*c) : "")}});
          }
        }
      }
      if (any_reasoning) msg["reasoning"] = reasoning;
      if (!calls.empty()) msg["tool_calls"] = std::move(calls);
      if (parts.size() == 1 && str_or(parts.front().as_object(), "type") == "text") {
        msg["content"] = parts.front().as_object().at("text");
      } else if (!parts.empty()) {
        msg["content"] = std::move(parts);
      }
    }
    if (!(role == "user" && !msg.contains("content"))) out.push_back(std::move(msg));
  }
  if (out.empty()) return bad("Cannot apply chat template to an empty conversation. Provide at least one message.");

  // tool_choice, tools, output_config, chat_template_kwargs.
  json::value tool_choice = nullptr;
  std::string forced;
  if (const json::value* tc = find(o, "tool_choice")) {
    const json::object* c = tc->if_object();
    const std::string_view t = c ? str_or(*c, "type") : std::string_view();
    if (t == "auto") tool_choice = "auto";
    else if (t == "any") tool_choice = "required";
    else if (t == "none") tool_choice = "none";
    else if (t == "tool") {
      forced = std::string(str_or(*c, "name"));
      if (forced.empty()) return bad("tool_choice.name is required when type is 'tool'");
      tool_choice = json::object{{"type", "function"}, {"function", json::object{{"name", forced}}}};
    } else {
      return bad("tool_choice.type must be auto, any, tool or none");
    }
  }
  json::array tools;
  if (const json::value* t = find(o, "tools")) {
    if (!t->is_array()) return bad("tools must be an array");
    for (const auto& tv : t->as_array()) {
      const json::object* tool = tv.if_object();
      const json::value* name = tool ? find(*tool, "name") : nullptr;
      const json::value* schema = tool ? find(*tool, "input_schema") : nullptr;
      if (!name || !name->is_string()) return bad("a tool needs a name");
      if (!schema || !schema->is_object()) return bad("input_schema must be a dictionary");
      json::object params = schema->as_object();
      if (!params.contains("type")) params["type"] = "object";
      auto d = tool->find("description");
      auto fn = function_definition(*name, d == tool->end() ? json::value(nullptr) : d->value(), std::move(params), *tool);
      if (!fn) return fn.error();
      tools.push_back(json::object{{"type", "function"}, {"function", std::move(fn.value())}});
    }
    if (tool_choice.is_null()) tool_choice = "auto";
  }
  json::object kwargs;
  if (const json::value* kw = find(o, "chat_template_kwargs")) {
    if (!kw->is_object()) return bad("chat_template_kwargs must be an object");
    kwargs = kw->as_object();
  }
  if (const json::value* oc = find(o, "output_config")) {
    if (!oc->is_object()) return bad("output_config must be an object");
    if (const json::value* effort = find(oc->as_object(), "effort")) {
      const std::string_view e = effort->is_string() ? std::string_view(effort->as_string()) : std::string_view();
      if (e != "low" && e != "medium" && e != "high" && e != "xhigh" && e != "max")
        return bad("output_config.effort must be low, medium, high, xhigh or max");
      r.chat["reasoning_effort"] = *effort;  // the chat request's reasoning_effort (Prompter::chat merges it)
    }
  }
  // _handle_thinking (after _handle_output_config): thinking.type "disabled" sets the effort the
  // server probed for it ("none" where the template honours it); "enabled" only budgets
  // sampling, "adaptive" pins nothing.
  if (const json::value* th = find(o, "thinking"); th && th->is_object()) {
    const std::string_view type = str_or(th->as_object(), "type");
    if (type != "enabled" && type != "disabled" && type != "adaptive")
      return bad("thinking.type must be enabled, disabled or adaptive");
    if (type == "disabled") r.chat["reasoning_effort"] = std::string(disabled_thinking_effort);
  }
  r.chat["messages"] = std::move(out);
  if (!tools.empty() || find(o, "tools")) r.chat["tools"] = std::move(tools);
  if (!tool_choice.is_null()) r.chat["tool_choice"] = std::move(tool_choice);
  if (!kwargs.empty()) r.chat["chat_template_kwargs"] = std::move(kwargs);
  decide_tool_call(r, forced);
  r.original = std::move(o);
  return r;
}

}  // namespace

std::string agent_error_body(AgentApi api, const AgentError& e) {
  if (!e.body.empty()) return e.body;
  if (api == AgentApi::kMessages) {
    return json::serialize(json::object{{"type", "error"},
                                        {"error", json::object{{"type", e.type}, {"message", e.message}}}});
  }
  json::object err{{"message", e.message},
                   {"type", e.type},
                   {"param", e.param.empty() ? json::value(nullptr) : json::value(e.param)},
                   {"code", e.status}};
  return json::serialize(json::object{{"error", std::move(err)}});
}

Result<AgentRequest, AgentError> parse_agent_request(AgentApi api, std::string_view body,
                                                     std::string_view disabled_thinking_effort) {
  auto v = validate_body(api == AgentApi::kMessages ? BodyApi::kMessages : BodyApi::kResponses, body);
  if (!v) return AgentError{v.error().status, "Bad Request", {}, {}, v.error().body};
  if (api == AgentApi::kMessages) return parse_messages(std::move(v.value()), disabled_thinking_effort);
  return parse_responses(std::move(v.value()));
}

}  // namespace ramjet::sim
