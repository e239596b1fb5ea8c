// Every chat golden rendered by a Jinja template (qwen3, qwen3.6, deepseek-v3.1) reproduced
// exactly, and its token ids when the golden has them.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <fstream>
#include <map>
#include <sstream>

#include "render/template/chat_template.h"
#include "render/tokenize/tokenizer.h"

namespace ramjet::render {
namespace {

const std::string kData = RAMJET_TESTDATA_DIR;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

SpecialTokens specials_for(const std::string& family) {
  std::string cfg = family.rfind("deepseek", 0) == 0 ? kData + "/models/deepseek-v3/tokenizer_config.json"
                                                      : kData + "/models/qwen3/tokenizer_config.json";
  auto st = special_tokens_from_config(slurp(cfg));
  EXPECT_TRUE(st.ok());
  return st.ok() ? st.value() : SpecialTokens{};
}

std::shared_ptr<const Tokenizer> tokenizer_for(const std::string& family) {
  static std::map<std::string, std::shared_ptr<const Tokenizer>> cache;
  std::string key = family.rfind("deepseek", 0) == 0 ? "deepseek" : family == "qwen3" ? "qwen3" : "";
  if (key.empty()) return nullptr;
  auto& t = cache[key];
  if (!t) {
    auto r = key == "qwen3" ? Tokenizer::from_file(kData + "/models/qwen3/tokenizer.json")
                            : Tokenizer::from_file(kData + "/models/deepseek-v3/tokenizer.json", {},
                                                   kData + "/models/deepseek-v3.1/added_tokens_override.json");
    EXPECT_TRUE(r.ok());
    if (r.ok()) t = r.value();
  }
  return t;
}

void run_goldens(const std::string& file, int expected_lines) {
  std::ifstream in(kData + "/goldens/" + file);
  ASSERT_TRUE(in) << file;
  std::string line;
  int n = 0, ids_checked = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto g = boost::json::parse(line).as_object();
    std::string id(g.at("id").as_string());
    std::string family(g.at("family").as_string());
    std::string tpl_src = slurp(kData + "/models/" + std::string(g.at("template").as_string()));
    std::string request = boost::json::serialize(g.at("request"));
    jinja::RenderOptions opt;
    opt.now = [] { return int64_t{1767225600}; };
    auto r = render(tpl_src, request, specials_for(family), {}, opt);
    ASSERT_TRUE(r.ok()) << id << ": " << r.error().message;
    EXPECT_EQ(r.value(), std::string(g.at("rendered").as_string())) << id;
    if (g.at("token_ids").is_array()) {
      auto tok = tokenizer_for(family);
      ASSERT_TRUE(tok) << id;
      auto ids = tok->encode(r.value());
      ASSERT_TRUE(ids.ok()) << id;
      std::vector<uint32_t> want;
      for (const auto& v : g.at("token_ids").as_array()) want.push_back(static_cast<uint32_t>(v.to_number<int64_t>()));
      EXPECT_EQ(ids.value(), want) << id;
      ++ids_checked;
    }
    ++n;
  }
  EXPECT_EQ(n, expected_lines) << file;
  std::printf("%s: %d rendered, %d token-id checks\n", file.c_str(), n, ids_checked);
}

TEST(ChatTemplateGoldens, Qwen3) { run_goldens("qwen3.jsonl", 25); }
TEST(ChatTemplateGoldens, Qwen36) { run_goldens("qwen3.6.jsonl", 25); }
TEST(ChatTemplateGoldens, DeepSeekV31) { run_goldens("deepseek-v3.1.jsonl", 25); }

TEST(ChatTemplate, Preprocessing) {
  SpecialTokens st;
  st.tokens = {{"bos_token", "<s>"}};
  auto ctx = build_context(
      R"({"messages":[{"role":"assistant","content":null,"reasoning":"r",
          "tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]},
          {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
          {"role":"assistant","content":"x","tool_calls":[]}],
          "tools":[{"type":"function","function":{"name":"f"}}],
          "chat_template_kwargs":{"thinking":true}})",
      st);
  ASSERT_TRUE(ctx.ok()) << ctx.error().message;
  std::string s = ctx.value().to_str();
  EXPECT_EQ(s,
            "{'messages': [{'role': 'assistant', 'content': '', 'tool_calls': [{'id': '1', 'type': "
            "'function', 'function': {'name': 'f', 'arguments': {'a': 1}}}], 'reasoning': 'r', "
            "'reasoning_content': 'r'}, {'role': 'user', 'content': 'a\\nb'}, {'role': "
            "'assistant', 'content': 'x'}], 'tools': [{'type': 'function', 'function': {'name': "
            "'f', 'description': None, 'parameters': None}}], 'documents': None, "
            "'add_generation_prompt': True, 'bos_token': '<s>', 'thinking': True}");
  EXPECT_FALSE(build_context("[]", st).ok());
  EXPECT_FALSE(build_context(R"({"messages":[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":"{bad"}}]}]})", st).ok());
}

}  // namespace
}  // namespace ramjet::render

namespace ramjet::render {
namespace {
TEST(ChatTemplate, ContentFormatDetection) {
  EXPECT_FALSE(template_uses_openai_content(slurp(kData + "/models/qwen3/chat_template.jinja")));
  EXPECT_TRUE(template_uses_openai_content(slurp(kData + "/models/qwen3.6/chat_template.jinja")));
  EXPECT_FALSE(template_uses_openai_content(slurp(kData + "/models/deepseek-v3.1/chat_template.jinja")));
  EXPECT_FALSE(template_uses_openai_content(
      slurp(kData + "/models/deepseek-v3.1/tool_chat_template_deepseekv31.jinja")));
  EXPECT_TRUE(template_uses_openai_content("{% for part in message['content'] %}{% endfor %}"));
}
}  // namespace
}  // namespace ramjet::render

namespace ramjet::render {
namespace {

// Request JSON becomes template values in one pass: duplicate keys keep the last value (as
// Python's json.loads does) and a very wide object is converted without a per-key scan.
TEST(ChatTemplate, JsonObjectsConvertLikePythonAndInLinearTime) {
  auto v = value_from_json(R"({"a": 1, "b": 2, "a": 3})");
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(v->is_dict());
  ASSERT_EQ(v->dict_ref().items.size(), 2u);
  EXPECT_EQ(v->dict_ref().items[0].first, "a");
  EXPECT_EQ(v->dict_ref().find("a")->as_int(), 3);
  std::string wide = "{";
  for (int i = 0; i < 200000; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  wide += "}";
  auto w = value_from_json(wide);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->dict_ref().items.size(), 200000u);
  EXPECT_EQ(w->dict_ref().items.back().second.as_int(), 199999);
}

}  // namespace
}  // namespace ramjet::render
