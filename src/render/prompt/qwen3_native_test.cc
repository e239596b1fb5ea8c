// render::qwen3: every qwen3 golden renders natively to its `rendered` text (and, through
// PromptRenderer, to its token ids); requests it does not cover fall back to the template with
// the same result; and follow-up turns of generated agent conversations, rendered with the
// prefix cache + SessionCache, equal a full Jinja render + encode — text and ids — turn by turn.
#include "render/template/qwen3_native.h"

#include <cstdint>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "render/template/chat_template.h"
#include "render/prompt/prompt.h"
#include "render/prompt/session_cache.h"

#ifndef RAMJET_TESTDATA_DIR
#define RAMJET_TESTDATA_DIR "test/data/testdata"
#endif

namespace ramjet::render {
namespace {

namespace json = boost::json;
const std::string kData = RAMJET_TESTDATA_DIR;

struct Golden {
  std::string id;
  json::value request;
  std::string rendered;
  std::vector<uint32_t> ids;
};

std::vector<Golden> goldens(const std::string& file) {
  std::vector<Golden> out;
  std::ifstream in(kData + "/goldens/" + file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json::object g = json::parse(line).as_object();
    Golden x;
    x.id = std::string(g.at("id").as_string());
    x.request = g.at("request");
    x.rendered = std::string(g.at("rendered").as_string());
    if (const auto* t = g.if_contains("token_ids"); t && t->is_array())
      for (const auto& id : t->as_array()) x.ids.push_back(static_cast<uint32_t>(id.to_number<uint64_t>()));
    out.push_back(std::move(x));
  }
  return out;
}

std::shared_ptr<const PromptRenderer> renderer(const std::string& model, bool native, bool tokenizer = true) {
  PromptSources s;
  if (tokenizer) s.tokenizer_path = kData + "/models/" + model + "/tokenizer.json";
  s.template_path = kData + "/models/" + model + "/chat_template.jinja";
  s.tokenizer_config_path = kData + "/models/qwen3/tokenizer_config.json";
  if (native) s.template_formatter = std::string(kTemplateFormatterQwen3);
  auto r = PromptRenderer::load(s);
  EXPECT_TRUE(r) << (r ? "" : r.error().message);
  return r ? r.value() : nullptr;
}

TEST(Qwen3Native, ReproducesEveryQwen3GoldenItCoversAndFallsBackOnlyOnTheUnmodelledKwarg) {
  size_t native = 0;
  for (const Golden& g : goldens("qwen3.jsonl")) {
    auto f = qwen3::format(g.request);
    if (!f) {
      EXPECT_EQ(g.id, "qwen3-28-reasoning-effort-ignored") << qwen3::to_string(f.error());
      EXPECT_EQ(f.error(), qwen3::Fallback::kKwargs);
      continue;
    }
    ++native;
    EXPECT_EQ(f->text, g.rendered) << g.id;
  }
  EXPECT_EQ(native, 24u);
}

TEST(Qwen3Native, PromptRendererUsesItForThePinnedQwen3TemplateWithTheGoldensTokenIds) {
  auto r = renderer("qwen3", true);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->native_stats().active);
  SessionCache cache;
  for (const Golden& g : goldens("qwen3.jsonl")) {
    for (SessionCache* c : {static_cast<SessionCache*>(nullptr), &cache}) {
      auto out = r->chat_parsed(g.request, c);
      ASSERT_TRUE(out) << g.id << ": " << out.error().message;
      EXPECT_EQ(out->text, g.rendered) << g.id;
      EXPECT_EQ(out->ids, g.ids) << g.id;
    }
  }
  const NativeRenderStats st = r->native_stats();
  EXPECT_EQ(st.native, 48u);
  EXPECT_EQ(st.fallbacks, 2u);
  EXPECT_EQ(st.by_reason[static_cast<size_t>(qwen3::Fallback::kKwargs)], 2u);
}

TEST(Qwen3Native, IsNotUsedForATemplateItDoesNotReproduce) {
  auto r = renderer("qwen3.6", true, false);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->native_stats().active);
  for (const Golden& g : goldens("qwen3.6.jsonl")) {
    auto out = r->chat_parsed(g.request);
    if (out) {
      EXPECT_EQ(out->text, g.rendered) << g.id;
    }
  }
  EXPECT_EQ(r->native_stats().native, 0u);
  EXPECT_FALSE(qwen3::reproduces("e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259"));
}

TEST(Qwen3Native, UnknownTemplateFormatterIsAUsageError) {
  PromptSources s;
  s.template_path = kData + "/models/qwen3/chat_template.jinja";
  s.template_formatter = "qwen9";
  auto r = PromptRenderer::load(s);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, PromptErrc::kUsage);
}

// Requests outside what the formatter models: a Fallback, and the renderer's answer (template)
// equals the plain template's.
TEST(Qwen3Native, FallsBackOnWhatItDoesNotModelAndTheTemplateAnswers) {
  struct Case {
    const char* json;
    qwen3::Fallback why;
  };
  const Case cases[] = {
      {R"({"messages":[]})", qwen3::Fallback::kMessages},
      {R"({"messages":[{"role":"developer","content":"x"},{"role":"user","content":"hi"}]})", qwen3::Fallback::kRole},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]})",
       qwen3::Fallback::kContent},
      {R"({"messages":[{"role":"user","content":7}]})", qwen3::Fallback::kContent},
      {R"({"messages":[{"role":"assistant","content":"a","reasoning_content":3},{"role":"user","content":"q"}]})",
       qwen3::Fallback::kReasoning},
      {R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"","tool_calls":[{"id":"1","function":{"name":"f","arguments":"{not json"}}]}]})",
       qwen3::Fallback::kToolCall},
      {R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"","tool_calls":[{"id":"1","function":{}}]}]})",
       qwen3::Fallback::kToolCall},
      {R"({"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function"}]})", qwen3::Fallback::kTools},
      {R"({"messages":[{"role":"user","content":"q"}],"chat_template_kwargs":{"tools":[1]}})", qwen3::Fallback::kKwargs},
      {R"({"messages":[{"role":"user","content":"q"}],"add_generation_prompt":1})", qwen3::Fallback::kGeneration},
      {R"({"messages":[{"role":"user","content":"q"}],"tools":{"a":1}})", qwen3::Fallback::kRequest},
  };
  auto native = renderer("qwen3", true, false);
  auto plain = renderer("qwen3", false, false);
  ASSERT_TRUE(native && plain);
  for (const Case& c : cases) {
    const json::value req = json::parse(c.json);
    auto f = qwen3::format(req);
    ASSERT_FALSE(f) << c.json;
    EXPECT_EQ(f.error(), c.why) << c.json << " -> " << qwen3::to_string(f.error());
    auto a = native->chat_parsed(req);
    auto b = plain->chat_parsed(req);
    ASSERT_EQ(a.ok(), b.ok()) << c.json;
    if (a) EXPECT_EQ(a->text, b->text) << c.json;
    else EXPECT_EQ(a.error().code, b.error().code) << c.json;
  }
}

TEST(Qwen3Native, CoversTextPartsInlineThinkNonStringArgumentsAndThinkingOff) {
  auto plain = renderer("qwen3", false, false);
  ASSERT_TRUE(plain);
  const char* cases[] = {
      R"({"messages":[{"role":"system","content":[{"type":"text","text":"s1"},"s2"]},{"role":"user","content":[{"type":"input_text","text":"q"}]}]})",
      R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"\n<think>\nr1\n</think>\n\nmid</think>\n\nans"},{"role":"user","content":"<tool_response>x</tool_response>"}]})",
      R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"reasoning":"\n\nr\n","tool_calls":[{"type":"function","function":{"name":"f","arguments":{"a":[1,2.5,1e100,18446744073709551615,"é\n\u0001"],"b":null}}},{"function":{"name":"g","arguments":"\"raw\""}},{"function":{"name":"h","arguments":""}}]},{"role":"tool","content":"r1"},{"role":"tool","content":"r2"}],"tools":[{"function":{"name":"f","parameters":{"type":"object"},"strict":null}},{"defer_loading":true,"function":{"name":"g","description":"d","x-extra":1}}],"chat_template_kwargs":{"enable_thinking":false}})",
      R"({"messages":[{"role":"tool","content":"t"},{"role":"system","content":"late"},{"role":"assistant","content":"a","reasoning_content":""}],"add_generation_prompt":false})",
  };
  for (const char* c : cases) {
    const json::value req = json::parse(c);
    auto f = qwen3::format(req);
    ASSERT_TRUE(f) << c << " -> " << qwen3::to_string(f.error());
    auto b = plain->chat_parsed(req);
    ASSERT_TRUE(b) << c;
    EXPECT_EQ(f->text, b->text) << c;
  }
}

// ---- follow-up turns -------------------------------------------------------------------------

// A generated agent conversation, grown turn by turn like an agent resends it: after a request
// the assistant answers (text, reasoning, inline <think>, tool calls), then tool results and/or a
// new user message (sometimes a user message that is a wrapped <tool_response>).
struct Agent {
  std::mt19937_64 rng;
  json::array messages;
  json::array tools;
  int call = 0;

  explicit Agent(uint64_t seed) : rng(seed) {
    if (pick(4) != 0)
      messages.push_back(json::object{{"role", "system"}, {"content", text()}});
    if (pick(3) != 0) {
      for (int i = 0, n = 1 + pick(3); i < n; ++i)
        tools.push_back(json::object{
            {"type", "function"},
            {"function", json::object{{"name", "tool_" + std::to_string(i)},
                                      {"description", text()},
                                      {"parameters", json::object{{"type", "object"}}}}}});
    }
    messages.push_back(user());
  }
  int pick(int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); }
  std::string text() {
    static const char* words[] = {"alpha", "β", "<think>", "</think>", "\n", "\n\n", "code();", "  ", "数据",
                                  "<tool_response>", "</tool_response>", "ok", "{\"k\": 1}", "🙂"};
    std::string s;
    for (int i = 0, n = pick(8); i < n; ++i) s += words[pick(14)];
    return s;
  }
  json::object user() {
    if (pick(6) == 0) return json::object{{"role", "user"}, {"content", "<tool_response>" + text() + "</tool_response>"}};
    return json::object{{"role", "user"}, {"content", text()}};
  }
  // The assistant's answer, then what comes back: tool results, a user message, or both.
  void step() {
    json::object a{{"role", "assistant"}};
    const int shape = pick(4);
    a["content"] = shape == 0 ? json::value(nullptr) : json::value(text());
    if (shape == 1) a["content"] = "<think>\n" + text() + "\n</think>\n\n" + text();
    if (pick(2) == 0) a[pick(2) ? "reasoning_content" : "reasoning"] = text();
    int calls = tools.empty() ? 0 : pick(3);
    json::array tc;
    for (int i = 0; i < calls; ++i) {
      json::object args{{"path", text()}, {"n", pick(100)}};
      tc.push_back(json::object{{"id", "call_" + std::to_string(++call)},
                                {"type", "function"},
                                {"function", json::object{{"name", "tool_0"},
                                                          {"arguments", json::serialize(args)}}}});
    }
    if (calls) a["tool_calls"] = std::move(tc);
    messages.push_back(std::move(a));
    for (int i = 0; i < calls; ++i)
      messages.push_back(json::object{{"role", "tool"}, {"tool_call_id", "call_x"}, {"content", text()}});
    if (calls == 0 || pick(3) == 0) messages.push_back(user());
  }
  json::value request() const {
    json::object r{{"messages", messages}, {"add_generation_prompt", true}};
    if (!tools.empty()) r["tools"] = tools;
    if (pick_const() == 0) r["chat_template_kwargs"] = json::object{{"enable_thinking", false}};
    return r;
  }
  int pick_const() const { return static_cast<int>(messages.size() % 5); }
};

TEST(Qwen3Native, FollowUpTurnsReuseThePreviousRenderingAndEqualAFullRenderAndEncode) {
  auto native = renderer("qwen3", true);
  auto plain = renderer("qwen3", false);
  ASSERT_TRUE(native && plain);
  SessionCache cache;
  size_t requests = 0, reused = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    Agent agent(seed);
    for (int turn = 0; turn < 12; ++turn) {
      const json::value req = agent.request();
      auto full = plain->chat_parsed(req);
      ASSERT_TRUE(full) << full.error().message;
      const NativeRenderStats before = native->native_stats();
      auto fast = native->chat_parsed(req, &cache);
      ASSERT_TRUE(fast) << fast.error().message;
      ASSERT_EQ(fast->text, full->text) << "seed " << seed << " turn " << turn << "\n" << json::serialize(req);
      ASSERT_EQ(fast->ids, full->ids) << "seed " << seed << " turn " << turn;
      const NativeRenderStats after = native->native_stats();
      EXPECT_EQ(after.native, before.native + 1);
      if (after.reused_messages > before.reused_messages) ++reused;
      ++requests;
      agent.step();
    }
  }
  EXPECT_EQ(requests, 720u);
  EXPECT_GT(reused, requests / 2) << "most follow-ups reuse a prefix";
  EXPECT_GT(cache.render_prefixes().stats().hits, 0u);
}

// The trap: an assistant turn with reasoning after the last query shows it; once a new user
// query follows, the same message must render without it. A prefix rendered while it was shown
// must not be reused.
TEST(Qwen3Native, ReasoningBeforeANewQueryIsNotReusedFromTheTurnThatShowedIt) {
  auto plain = renderer("qwen3", false, false);
  ASSERT_TRUE(plain);
  RenderPrefixCache prefixes;
  json::array msgs{json::object{{"role", "user"}, {"content", "q1"}},
                   json::object{{"role", "assistant"}, {"content", ""}, {"reasoning_content", "R1"},
                                {"tool_calls", json::array{json::object{
                                                   {"function", json::object{{"name", "f"}, {"arguments", "{}"}}}}}}},
                   json::object{{"role", "tool"}, {"content", "t1"}},
                   json::object{{"role", "assistant"}, {"content", "a1"}, {"reasoning_content", "R2"}},
                   json::object{{"role", "tool"}, {"content", "t2"}}};
  auto render_both = [&](const json::array& m) {
    const json::value req = json::object{{"messages", m}};
    auto f = qwen3::format(req, &prefixes);
    auto j = plain->chat_parsed(req);
    ASSERT_TRUE(f && j);
    EXPECT_EQ(f->text, j->text);
  };
  render_both(msgs);  // R1, R2 shown
  msgs.push_back(json::object{{"role", "user"}, {"content", "q2"}});
  render_both(msgs);  // now hidden
  const json::value req = json::object{{"messages", msgs}};
  EXPECT_EQ(qwen3::format(req, &prefixes)->text.find("R1"), std::string::npos);
}

// A tool-loop prefix ending with a tool message is reused only when the message after it is
// again (or again not) a tool message: a tool message's <|im_end|> depends on its successor.
TEST(Qwen3Native, ToolLoopPrefixIsReusedOnlyWithTheSameKindOfSuccessor) {
  auto plain = renderer("qwen3", false, false);
  ASSERT_TRUE(plain);
  RenderPrefixCache prefixes;
  auto call = [](const char* name) {
    return json::array{json::object{{"function", json::object{{"name", name}, {"arguments", "{}"}}}}};
  };
  const json::array base{json::object{{"role", "user"}, {"content", "q"}},
                         json::object{{"role", "assistant"}, {"content", ""}, {"tool_calls", call("f")}},
                         json::object{{"role", "tool"}, {"content", "t1"}}};
  auto check = [&](json::array m, size_t want_reused) {
    const json::value req = json::object{{"messages", std::move(m)}};
    auto f = qwen3::format(req, &prefixes);
    auto j = plain->chat_parsed(req);
    ASSERT_TRUE(f && j);
    EXPECT_EQ(f->text, j->text);
    EXPECT_EQ(f->reused_messages, want_reused);
  };
  json::array a = base;
  a.push_back(json::object{{"role", "tool"}, {"content", "t2"}});
  check(a, 0);  // stores a conditional prefix [q, call, t1] followed by a tool message
  json::array b = base;
  b.push_back(json::object{{"role", "assistant"}, {"content", "done"}});
  check(b, 1);  // t1 is now followed by an assistant: only the final prefix [q] is reusable
  json::array c = a;
  c.push_back(json::object{{"role", "assistant"}, {"content", ""}, {"tool_calls", call("g")}});
  c.push_back(json::object{{"role", "tool"}, {"content", "t3"}});
  check(c, 3);  // the tool loop went on: [q, call, t1] reused
}

}  // namespace
}  // namespace ramjet::render
