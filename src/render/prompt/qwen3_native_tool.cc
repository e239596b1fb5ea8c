// ramjet-qwen3-native: test driver for test/oracle/qwen3_native_oracle.py. Loads the Qwen3
// template + tokenizer twice — with the native formatter (render::qwen3) and one SessionCache
// shared by every line, and with the template only — and reads JSON lines on stdin:
//   {"request": {...}}   a chat request (lines of one conversation in turn order; conversations
//                        may interleave: the caches are keyed by content)
// printing one JSON line per request:
//   {"ok": true, "native": <rendered natively?>, "rendered": "...", "jinja_same": <text equals
//    the template's>, "ids_same": <ids equal a full encode of the template's text>,
//    "reused_messages": n}
//   {"ok": false, "code": "...", "jinja_failed": <the template fails too>}
// Usage: ramjet-qwen3-native <testdata dir>
#include <boost/json.hpp>
#include <iostream>
#include <string>

#include "render/prompt/prompt.h"
#include "render/prompt/session_cache.h"

int main(int argc, char** argv) {
  using namespace ramjet::render;
  if (argc != 2) {
    std::cerr << "usage: ramjet-qwen3-native <testdata dir>\n";
    return 2;
  }
  const std::string data = argv[1];
  PromptSources s;
  s.tokenizer_path = data + "/models/qwen3/tokenizer.json";
  s.template_path = data + "/models/qwen3/chat_template.jinja";
  s.tokenizer_config_path = data + "/models/qwen3/tokenizer_config.json";
  auto plain = PromptRenderer::load(s);
  s.template_formatter = std::string(kTemplateFormatterQwen3);
  auto native = PromptRenderer::load(s);
  if (!plain || !native || !(*native)->native_stats().active) {
    std::cerr << "ramjet-qwen3-native: cannot load the qwen3 model files\n";
    return 2;
  }
  SessionCache cache;
  std::ios::sync_with_stdio(false);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(line, ec);
    boost::json::object out;
    if (ec || !v.is_object() || !v.as_object().contains("request")) {
      out["ok"] = false;
      out["code"] = "tool";
      std::cout << boost::json::serialize(out) << "\n";
      continue;
    }
    const boost::json::value& req = v.as_object().at("request");
    const NativeRenderStats before = (*native)->native_stats();
    auto fast = (*native)->chat_parsed(req, &cache);
    const NativeRenderStats after = (*native)->native_stats();
    auto full = (*plain)->chat_parsed(req);
    if (!fast) {
      out["ok"] = false;
      out["code"] = fast.error().code;
      out["jinja_failed"] = !full;
    } else {
      out["ok"] = true;
      out["native"] = after.native > before.native;
      out["rendered"] = fast->text;
      out["jinja_same"] = full && full->text == fast->text;
      out["ids_same"] = full && full->ids == fast->ids;
      out["reused_messages"] = after.reused_messages - before.reused_messages;
    }
    std::cout << boost::json::serialize(out) << "\n";
  }
  return 0;
}
