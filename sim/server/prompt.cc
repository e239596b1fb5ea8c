// sim/server/prompt (see prompt.h).
#include "sim/server/prompt.h"

#include <boost/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "render/prompt/prompt.h"
#include "sim/engine/tokenizer.h"

namespace ramjet::sim {

namespace json = boost::json;

namespace {

const json::value* find(const json::object& o, std::string_view k) {
  auto it = o.find(k);
  return it == o.end() || it->value().is_null() ? nullptr : &it->value();
}

Error bad_request(std::string message) { return Error{"bad_request", std::move(message)}; }

Error from(const render::PromptError& e) {
  std::string m = "cannot render the prompt (" + std::string(render::to_string(e.kind));
  if (!e.code.empty()) m += ", " + e.code;
  return Error{std::string(render::to_string(e.kind)), m + "): " + e.message};
}

// A boolean field: `fallback` when absent or null, an error when not a boolean.
std::optional<std::string> read_bool(const json::object& o, std::string_view key, bool& out) {
  const json::value* v = find(o, key);
  if (!v) return std::nullopt;
  if (!v->is_bool()) return std::string(key) + " must be a boolean";
  out = v->as_bool();
  return std::nullopt;
}

bool file_has_chat_template(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  boost::system::error_code ec;
  json::value v = json::parse(ss.str(), ec);
  return !ec && v.is_object() && v.as_object().contains("chat_template");
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
std::string_view lstrip(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}
std::string_view strip(std::string_view s) {
  s = lstrip(s);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// continue_final_message, as transformers' apply_chat_template does it: the prompt ends where the
// final message's text ends (its trailing whitespace kept only when the template kept it).
Result<std::string, Error> cut_after_final_message(std::string rendered, const json::array& messages) {
  const json::object* last = messages.empty() ? nullptr : messages.back().if_object();
  const json::value* content = last ? find(*last, "content") : nullptr;
  std::string final_text;
  bool found = false;
  if (content && content->is_string()) {
    final_text = content->as_string();
    found = true;
  } else if (content && content->is_array()) {
    const auto& parts = content->as_array();
    for (auto it = parts.rbegin(); it != parts.rend() && !found; ++it) {
      const json::object* part = it->if_object();
      const json::value* t = part ? find(*part, "text") : nullptr;
      if (t && t->is_string()) {
        final_text = t->as_string();
        found = true;
      }
    }
  }
  if (!found) return bad_request("continue_final_message needs a final message with text content");
  const std::string_view stripped = strip(final_text);
  const size_t loc = rendered.rfind(stripped);
  if (loc == std::string::npos) {
    return bad_request("continue_final_message is set but the final message does not appear in the chat "
                       "after applying the chat template");
  }
  const std::string_view kept = lstrip(final_text);
  if (std::string_view(rendered).substr(loc, kept.size()) == final_text) {
    rendered.resize(loc + kept.size());
  } else {
    rendered.resize(loc + stripped.size());
  }
  return rendered;
}

}  // namespace

Prompter::Prompter(std::shared_ptr<const render::PromptRenderer> renderer) : renderer_(std::move(renderer)) {
  if (renderer_) description_ = "real";
}

Result<Prompter, Error> Prompter::load(const PromptFlags& f) {
  if (f.tokenizer.empty()) return Prompter();
  render::PromptSources s;
  s.tokenizer_path = f.tokenizer;
  s.added_tokens_path = f.added_tokens;
  s.template_path = f.chat_template;
  s.native_formatter = f.native_formatter;
  s.tokenizer_config_path = f.tokenizer_config;
  if (s.template_path.empty() && s.native_formatter.empty()) {
    // The model's own template, as vLLM uses it when --chat-template is not given.
    const auto dir = std::filesystem::path(f.tokenizer).parent_path();
    std::error_code ec;
    if (std::filesystem::is_regular_file(dir / "chat_template.jinja", ec)) {
      s.template_path = (dir / "chat_template.jinja").string();
    } else if (file_has_chat_template(dir / "tokenizer_config.json")) {
      s.template_path = (dir / "tokenizer_config.json").string();
    } else {
      return Error{"usage", "--tokenizer needs --chat-template or --native-formatter (there is no "
                            "chat_template.jinja, nor a tokenizer_config.json with a chat_template, beside " +
                                f.tokenizer + ")"};
    }
  }
  auto r = render::PromptRenderer::load(s);
  if (!r) {
    const auto& e = r.error();
    std::string m = std::string(render::to_string(e.kind)) + " error";
    if (!e.code.empty()) m += " (" + e.code + ")";
    return Error{std::string(render::to_string(e.kind)), m + ": " + e.message};
  }
  Prompter p(std::move(r.value()));
  p.description_ = "tokenizer=" + s.tokenizer_path +
                   (s.native_formatter.empty() ? " chat_template=" + s.template_path
                                               : " native_formatter=" + s.native_formatter) +
                   (s.added_tokens_path.empty() ? "" : " added_tokens=" + s.added_tokens_path) +
                   (s.tokenizer_config_path.empty() ? "" : " tokenizer_config=" + s.tokenizer_config_path);
  return p;
}

Result<std::vector<uint32_t>, Error> Prompter::chat(const json::object& body) const {
  const json::value* messages = find(body, "messages");
  bool add_generation_prompt = true;
  if (!renderer_) {  // the built-in rendering: messages and add_generation_prompt only
    if (const json::value* g = find(body, "add_generation_prompt"); g && g->is_bool())
      add_generation_prompt = g->as_bool();
    return tokenize(render_chat(messages ? json::serialize(*messages) : std::string("[]"), add_generation_prompt));
  }
  if (!messages || !messages->is_array()) return bad_request("messages must be an array");
  bool continue_final = false, add_special = false;
  for (auto [key, out] : {std::pair{"add_generation_prompt", &add_generation_prompt},
                          std::pair{"continue_final_message", &continue_final},
                          std::pair{"add_special_tokens", &add_special}}) {
    if (auto e = read_bool(body, key, *out)) return bad_request(*e);
  }
  if (continue_final && add_generation_prompt)
    return bad_request("Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  if (find(body, "chat_template")) {
    return bad_request("Chat template is passed with request, but --trust-request-chat-template is not set. "
                       "Refused request with untrusted chat template.");
  }
  // The request the renderer takes: what the template can see.
  json::object request{{"messages", *messages}, {"add_generation_prompt", add_generation_prompt}};
  if (const json::value* t = find(body, "tools")) request["tools"] = *t;
  if (const json::value* kw = find(body, "chat_template_kwargs")) request["chat_template_kwargs"] = *kw;
  // vLLM 0.32 build_chat_params: the request's reasoning_effort overrides the kwargs' (null and
  // "auto" are unset), and turns enable_thinking on or off (effort != "none") unless the kwargs
  // set it: templates like Qwen3's read enable_thinking.
  if (const json::value* effort = find(body, "reasoning_effort")) {
    json::value& kw = request["chat_template_kwargs"];
    if (kw.is_null()) kw = json::object{};
    if (json::object* k = kw.if_object()) {
      const bool is_auto = effort->is_string() && effort->as_string() == "auto";
      const bool none = effort->is_string() && effort->as_string() == "none";
      if (!k->contains("enable_thinking")) (*k)["enable_thinking"] = !none;
      if (!is_auto) (*k)["reasoning_effort"] = *effort;
    }
  }
  auto rendered = renderer_->chat(json::serialize(request));
  if (!rendered) return from(rendered.error());
  if (!continue_final && !add_special) return std::move(rendered->ids);
  std::string text = std::move(rendered->text);
  if (continue_final) {
    auto cut = cut_after_final_message(std::move(text), messages->as_array());
    if (!cut) return cut.error();
    text = std::move(cut.value());
  }
  return this->text(text, add_special);
}

std::string Prompter::disabled_thinking_effort() const {
  auto render = [&](std::string_view effort) {
    const json::object body{{"messages", json::array{json::object{{"role", "user"}, {"content", "Hi"}}}},
                            {"reasoning_effort", effort}};
    return chat(body);
  };
  const auto none = render("none");
  if (!none) return "low";
  for (std::string_view effort : {"low", "medium", "high", "xhigh", "max"}) {
    const auto r = render(effort);
    if (r && r.value() == none.value()) return "low";
  }
  return "none";
}

Result<std::vector<uint32_t>, Error> Prompter::text(std::string_view prompt, bool add_special_tokens) const {
  if (!renderer_) return tokenize(prompt);
  auto ids = renderer_->text(prompt, add_special_tokens);
  if (!ids) return from(ids.error());
  return std::move(ids.value());
}

}  // namespace ramjet::sim
