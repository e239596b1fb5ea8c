// ramjet-jinja-render: test driver for the differential oracle (test/oracle/jinja_oracle.py).
// Reads JSON lines on stdin, one case each:
//   {"template": "<path>", "config": "<tokenizer_config.json path>", "request": {...},
//    "api": "chat" (default) | "responses" | "messages"}
//       -> render::api_conversion (responses, messages), then render::chat_template
//          preprocessing + render; a refused conversion prints {"ok": false, "code":
//          "convert_bad_request" | "convert_unsupported", ...}
//   {"template": "<path>" | "source": "<template text>", "context": {...}}
//       -> render::jinja with the context as given
// and prints one JSON line per case: {"ok": true, "rendered": "..."} or
// {"ok": false, "code": "<RenderErrc>", "message": "..."}. strftime_now is fixed at
// 2026-01-01T00:00:00Z.
#include <boost/json.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "render/template/api_conversion.h"
#include "render/template/chat_template.h"

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int main() {
  using namespace ramjet::render;
  std::ios::sync_with_stdio(false);
  std::map<std::string, ChatTemplate> templates;
  std::map<std::string, SpecialTokens> configs;
  jinja::RenderOptions opt;
  opt.now = [] { return int64_t{1767225600}; };
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    boost::json::object out;
    boost::system::error_code ec;
    auto v = boost::json::parse(line, ec);
    if (ec || !v.is_object()) {
      std::cout << R"({"ok": false, "code": "tool", "message": "bad input line"})" << "\n";
      continue;
    }
    const auto& o = v.as_object();
    jinja::RenderResult<std::string> r = std::string();
    std::string src;
    std::string key;
    if (const auto* t = o.if_contains("template")) {
      key = std::string(t->as_string());
      src = slurp(key);
    } else {
      src = std::string(o.at("source").as_string());
      key = "\x01" + src;
    }
    auto it = templates.find(key);
    if (it == templates.end()) {
      auto p = ChatTemplate::parse(src);
      if (!p.ok()) {
        r = p.error();
      } else {
        it = templates.emplace(key, p.value()).first;
      }
    }
    if (it != templates.end()) {
      if (const auto* req = o.if_contains("request")) {
        SpecialTokens st;
        if (const auto* c = o.if_contains("config")) {
          std::string path(c->as_string());
          auto ci = configs.find(path);
          if (ci == configs.end()) {
            auto s = special_tokens_from_config(slurp(path));
            ci = configs.emplace(path, s.ok() ? s.value() : SpecialTokens{}).first;
          }
          st = ci->second;
        }
        const auto* api = o.if_contains("api");
        const std::string_view name = api != nullptr && api->is_string() ? std::string_view(api->get_string()) : "chat";
        if (name == "chat") {
          r = render(it->second, boost::json::serialize(*req), st, {}, opt);
        } else {
          auto chat = to_chat_request(name == "responses" ? PromptApi::kResponses : PromptApi::kMessages,
                                      req->is_object() ? req->get_object() : boost::json::object());
          if (!chat.ok()) {
            out["ok"] = false;
            out["code"] = chat.error().kind == ConversionError::kBadRequest ? "convert_bad_request" : "convert_unsupported";
            out["message"] = chat.error().message;
            std::cout << boost::json::serialize(out) << "\n";
            std::cout.flush();
            continue;
          }
          r = render(it->second, boost::json::serialize(chat.value()), st, {}, opt);
        }
      } else {
        auto ctx = value_from_json(boost::json::serialize(o.at("context")));
        if (!ctx.ok()) r = ctx.error();
        else r = it->second.tpl->render(ctx.value(), opt);
      }
    }
    if (r.ok()) {
      out["ok"] = true;
      out["rendered"] = r.value();
    } else {
      out["ok"] = false;
      out["code"] = std::string(jinja::to_string(r.error().code));
      out["message"] = r.error().message;
    }
    std::cout << boost::json::serialize(out) << "\n";
    std::cout.flush();
  }
  return 0;
}
