// render::turn_resume: exact routing's follow-up fast path gives the full path's tokens. Generated
// agent conversations (compact and pretty-printed bodies, several sessions interleaved on one
// cache) where each turn extends the last — the fast path must be taken — and adversarial
// follow-ups that are not extensions (an edit in an earlier message, changed tools or kwargs,
// reordered keys, whitespace, a truncated or duplicated body, a second "messages" key, messages
// the formatter or the profile refuses): fast path and full path give the same outcome and ids.
#include "render/identity/turn_resume.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <functional>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include "model/model_profile.h"
#include "render/identity/tokenize_payload.h"
#include "render/prompt/prompt.h"
#include "render/prompt/session_cache.h"
#include "render/prompt/turn_cache.h"

#ifndef RAMJET_TESTDATA_DIR
#define RAMJET_TESTDATA_DIR "test/data/testdata"
#endif

namespace ramjet::render {
namespace {

namespace json = boost::json;
const std::string kData = RAMJET_TESTDATA_DIR;

struct Env {
  const model::ModelProfile* profile = nullptr;
  std::shared_ptr<const PromptRenderer> renderer;
};

const Env& env() {
  static const Env e = [] {
    Env x;
    x.profile = model::find_profile("qwen3");
    PromptSources s;
    s.tokenizer_path = kData + "/models/qwen3/tokenizer.json";
    s.template_path = kData + "/models/qwen3/tokenizer_config.json";
    s.sibling_config = false;
    s.template_formatter = std::string(kTemplateFormatterQwen3);
    auto r = PromptRenderer::load(s);
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    if (r) x.renderer = *r;
    return x;
  }();
  return e;
}

RoutingTokens full(std::string_view body) {
  return render_routing_body(*env().profile, *env().renderer, nullptr, PromptApi::kChat, body);
}
RoutingTokens cached(SessionCache& cache, std::string_view body) {
  return render_routing_body(*env().profile, *env().renderer, &cache, PromptApi::kChat, body);
}

// The same outcome, ids and namespace fields with the cache as without.
void expect_same(SessionCache& cache, const std::string& body, const std::string& what) {
  const RoutingTokens a = full(body);
  const RoutingTokens b = cached(cache, body);
  ASSERT_EQ(to_string(b.outcome), to_string(a.outcome)) << what;
  ASSERT_EQ(b.ids, a.ids) << what;
  EXPECT_EQ(b.model, a.model) << what;
  EXPECT_EQ(b.cache_salt, a.cache_salt) << what;
}

// A pretty printer: the same JSON with newlines and indentation (an agent's own serialiser).
void pretty(const json::value& v, std::string& out, int indent) {
  const std::string pad(static_cast<size_t>(indent) * 2, ' ');
  if (v.is_object() && !v.as_object().empty()) {
    out += "{\n";
    bool first = true;
    for (const auto& kv : v.as_object()) {
      if (!first) out += ",\n";
      first = false;
      out += pad + "  " + json::serialize(json::value(kv.key())) + ": ";
      pretty(kv.value(), out, indent + 1);
    }
    out += "\n" + pad + "}";
  } else if (v.is_array() && !v.as_array().empty()) {
    out += "[\n";
    bool first = true;
    for (const auto& e : v.as_array()) {
      if (!first) out += ",\n";
      first = false;
      out += pad + "  ";
      pretty(e, out, indent + 1);
    }
    out += "\n" + pad + "]";
  } else {
    out += json::serialize(v);
  }
}

// A generated agent conversation grown turn by turn (as qwen3_native_test's): the assistant
// answers with text, reasoning, inline <think> and tool calls; tool results and/or a new user
// message (sometimes a wrapped <tool_response>) come back. Tools and kwargs stay the session's.
struct Agent {
  std::mt19937_64 rng;
  json::array messages;
  json::array tools;
  bool thinking_off = false, pretty_body = false, salt = false;
  int call = 0;

  explicit Agent(uint64_t seed) : rng(seed) {
    if (pick(4) != 0) messages.push_back(json::object{{"role", "system"}, {"content", text()}});
    if (pick(3) != 0) {
      for (int i = 0, n = 1 + pick(3); i < n; ++i)
        tools.push_back(json::object{{"type", "function"},
                                     {"function", json::object{{"name", "tool_" + std::to_string(i)},
                                                               {"description", text()},
                                                               {"parameters", json::object{{"type", "object"}}}}}});
    }
    thinking_off = pick(4) == 0;
    pretty_body = pick(3) == 0;
    salt = pick(4) == 0;
    messages.push_back(user());
  }
  int pick(int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); }
  std::string text() {
    static const char* words[] = {"alpha", "β", "<think>", "</think>", "\n", "\n\n", "code();", "  ", "数据", "\"q\"",
                                  "<tool_response>", "</tool_response>", "ok", "{\"k\": [1]}", "🙂", "<|im_end|>", "\\"};
    std::string s;
    for (int i = 0, n = pick(9); i < n; ++i) s += words[pick(17)];
    return s;
  }
  json::object user() {
    if (pick(6) == 0) return json::object{{"role", "user"}, {"content", "<tool_response>" + text() + "</tool_response>"}};
    if (pick(5) == 0)
      return json::object{{"role", "user"},
                          {"content", json::array{json::object{{"type", "text"}, {"text", text()}},
                                                  json::object{{"type", "input_text"}, {"text", text()}}}}};
    return json::object{{"role", "user"}, {"content", text()}};
  }
  // The next request's messages: what came back since the last one, sometimes only part of it
  // (a request ending with the assistant's message, or between two tool results).
  json::array pending;
  void advance() {
    if (pending.empty()) {
      json::array mine = std::move(messages);
      messages = json::array{};
      step();
      pending = std::move(messages);
      messages = std::move(mine);
    }
    size_t take = pending.size();
    if (pick(3) == 0) take = 1 + static_cast<size_t>(pick(static_cast<int>(pending.size())));
    for (size_t i = 0; i < take; ++i) messages.push_back(pending[i]);
    pending.erase(pending.begin(), pending.begin() + static_cast<ptrdiff_t>(take));
  }
  void step() {
    json::object a{{"role", "assistant"}};
    const int shape = pick(4);
    a["content"] = shape == 0 ? json::value(nullptr) : json::value(text());
    if (shape == 1) a["content"] = "<think>\n" + text() + "\n</think>\n\n" + text();
    if (pick(2) == 0) a[pick(2) ? "reasoning_content" : "reasoning"] = text();
    const int calls = tools.empty() ? 0 : pick(3);
    json::array tc;
    for (int i = 0; i < calls; ++i) {
      json::object args{{"path", text()}, {"n", pick(100)}};
      tc.push_back(json::object{{"id", "call_" + std::to_string(++call)},
                                {"type", "function"},
                                {"function", json::object{{"name", "tool_0"}, {"arguments", json::serialize(args)}}}});
    }
    if (calls) a["tool_calls"] = std::move(tc);
    messages.push_back(std::move(a));
    for (int i = 0; i < calls; ++i)
      messages.push_back(json::object{{"role", "tool"}, {"tool_call_id", "call_x"}, {"content", text()}});
    if (calls == 0 || pick(3) == 0) messages.push_back(user());
  }
  json::object request() const {
    json::object r{{"model", "Qwen/Qwen3-8B"}, {"stream", true}, {"messages", messages}};
    if (!tools.empty()) r["tools"] = tools;
    if (thinking_off) r["chat_template_kwargs"] = json::object{{"enable_thinking", false}};
    if (salt) r["cache_salt"] = "tenant-1";
    r["max_tokens"] = 64;
    return r;
  }
  std::string body() const { return serialize(request()); }
  std::string serialize(const json::object& r) const {
    if (!pretty_body) return json::serialize(r);
    std::string out;
    pretty(r, out, 0);
    return out;
  }
};

// Whether a conversation has a query: a user message that is not a wrapped <tool_response>.
bool has_query(const json::array& messages) {
  for (const json::value& m : messages) {
    if (m.at("role") != "user") continue;
    std::string text;
    if (m.at("content").is_string()) {
      text = m.at("content").as_string();
    } else {
      bool first = true;
      for (const json::value& part : m.at("content").as_array()) {
        if (!first) text += '\n';
        text += part.at("text").as_string();
        first = false;
      }
    }
    if (!(text.starts_with("<tool_response>") && text.ends_with("</tool_response>"))) return true;
  }
  return false;
}

TurnKey key() { return TurnKey{env().renderer->tokenizer()->serial(), env().renderer.get(), env().profile}; }

TEST(TurnResume, FollowUpsThatExtendTheLastTurnAreResumedAndGiveTheFullPathsIds) {
  ASSERT_TRUE(env().renderer && env().profile);
  SessionCache cache;
  std::vector<Agent> agents;
  std::vector<std::string> last_body;
  for (uint64_t seed = 1; seed <= 48; ++seed) agents.emplace_back(seed);
  last_body.resize(agents.size());
  size_t requests = 0, extensions = 0, without_query = 0;
  std::vector<bool> had_query(agents.size());
  // Sessions interleaved on one cache: eight at a time, round robin.
  for (size_t group = 0; group < agents.size(); group += 8) {
    for (int turn = 0; turn < 10; ++turn) {
      for (size_t k = group; k < group + 8; ++k) {
        last_body[k] = agents[k].body();
        expect_same(cache, last_body[k], "seed " + std::to_string(k + 1) + " turn " + std::to_string(turn) + "\n" + last_body[k]);
        if (HasFatalFailure()) return;
        ++requests;
        if (turn > 0) ++extensions;
        if (turn > 0 && !had_query[k]) ++without_query;
        had_query[k] = had_query[k] || has_query(agents[k].messages);
        agents[k].advance();
      }
    }
  }
  const TurnStats st = cache.turns().stats();
  EXPECT_EQ(requests, 480u);
  // Every extension is resumed but those of a conversation with no query yet (its first user
  // message a wrapped <tool_response>): the last query would move with the length.
  EXPECT_GT(st.resumed, extensions * 8 / 10) << st.resumed << " of " << extensions;
  EXPECT_EQ(st.declined, without_query);  // only for want of a query
  EXPECT_LE(without_query, extensions / 10);
  EXPECT_EQ(st.misses, agents.size());      // the first turns
  EXPECT_EQ(st.resumed + st.declined + st.misses, requests);
  EXPECT_LE(st.entries, agents.size());

  // Each kept turn holds its last body, and ids and cuts that a full encode of its text gives.
  const Tokenizer& tok = *env().renderer->tokenizer();
  size_t checked = 0;
  for (size_t k = 0; k < agents.size(); ++k) {
    std::unique_ptr<Turn> t = cache.turns().take(key(), last_body[k]);
    if (!t) continue;
    ++checked;
    EXPECT_EQ(t->body, last_body[k]);
    std::vector<uint32_t> ids;
    std::vector<Tokenizer::Cut> cuts;
    ASSERT_FALSE(tok.encode_with_cuts(t->text, ids, cuts));
    EXPECT_EQ(t->ids, ids) << k;
    ASSERT_EQ(t->cuts.size(), cuts.size()) << k;
    for (size_t j = 0; j < cuts.size(); ++j) {
      EXPECT_EQ(t->cuts[j].byte, cuts[j].byte);
      EXPECT_EQ(t->cuts[j].ids, cuts[j].ids);
    }
  }
  EXPECT_GT(checked, agents.size() * 3 / 4);
}

// Follow-ups that are not extensions of the cached turn, or extensions the fast path must not
// take: the same outcome and ids as the full path, whatever path they take.
TEST(TurnResume, AdversarialFollowUpsGiveTheFullPathsOutcomeAndIds) {
  ASSERT_TRUE(env().renderer && env().profile);
  Agent agent(7);
  while (agent.tools.empty() || agent.messages.size() < 12) {
    if (agent.tools.empty()) agent = Agent(agent.rng());
    agent.step();
  }
  agent.pretty_body = false;
  agent.thinking_off = false;
  agent.salt = false;
  const std::string base = agent.body();
  const json::object base_req = agent.request();
  Agent next = agent;
  next.step();
  const json::object next_req = next.request();
  const std::string extended = next.body();
  ASSERT_EQ(extended.compare(0, 64, base, 0, 64), 0);

  // The bytes around the last message of `base`, for splicing by hand.
  const size_t msgs_close = base.rfind("],\"tools\"");
  ASSERT_NE(msgs_close, std::string::npos);
  const std::string prefix = base.substr(0, msgs_close);  // up to the end of the last message
  const std::string rest = base.substr(msgs_close);        // "],"tools":...}"
  auto with = [&](const std::string& elements) { return prefix + elements + rest; };

  std::vector<std::pair<std::string, std::string>> cases;
  cases.emplace_back("the extension itself", extended);
  cases.emplace_back("the same body again", base);
  {
    std::string edited = extended;
    const size_t at = edited.find("\"content\":\"", edited.size() / 3);
    ASSERT_NE(at, std::string::npos);
    edited.insert(at + 11, "X");
    cases.emplace_back("an edit in an earlier message", edited);
  }
  {
    json::object r = next_req;
    r["tools"].as_array().pop_back();
    r["tools"].as_array().push_back(json::object{{"type", "function"}, {"function", json::object{{"name", "other"}}}});
    cases.emplace_back("changed tools", json::serialize(r));
  }
  {
    json::object r = next_req;
    r["chat_template_kwargs"] = json::object{{"enable_thinking", false}};
    cases.emplace_back("a kwarg added after the messages", json::serialize(r));
  }
  {
    json::object r{{"model", next_req.at("model")}, {"stream", true}, {"tools", next_req.at("tools")},
                   {"messages", next_req.at("messages")}, {"max_tokens", 64}};
    cases.emplace_back("keys reordered", json::serialize(r));
  }
  {
    std::string ws = extended;
    ws.insert(ws.find(",\"tools\""), " ");
    cases.emplace_back("whitespace before the rest", ws);
    std::string ws2 = extended;
    ws2.insert(ws2.find("\"messages\":[") + 12, "\n");
    cases.emplace_back("whitespace in the head", ws2);
  }
  {
    json::object r = base_req;
    r["messages"].as_array().pop_back();
    cases.emplace_back("the previous body truncated by a message", json::serialize(r));
    cases.emplace_back("the previous body cut short", base.substr(0, base.size() - 3));
  }
  {
    json::object r = next_req;
    r["model"] = "Qwen/Qwen3-32B";
    cases.emplace_back("another model", json::serialize(r));
  }
  const std::string user_q = R"({"role":"user","content":"and now?"})";
  cases.emplace_back("a new query appended", with("," + user_q));
  cases.emplace_back("whitespace between appended messages", with(" ,\n\t" + user_q + " , " + user_q + "\n"));
  cases.emplace_back("a second messages key", with("],\"messages\":[" + user_q));
  cases.emplace_back("the array closed early", with("],\"x\":[" + user_q));
  cases.emplace_back("an element that is not a message", with(",1"));
  cases.emplace_back("a number continuing the last message", with(".5"));
  cases.emplace_back("a trailing comma", with("," + user_q + ","));
  cases.emplace_back("a multimodal message",
                     with(R"(,{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]})"));
  cases.emplace_back("a role the formatter does not model", with(R"(,{"role":"developer","content":"d"})"));
  cases.emplace_back("output_text parts", with(R"(,{"role":"user","content":[{"type":"output_text","text":"o"}]})"));
  cases.emplace_back("escapes in the appended message",
                     with(R"(,{"r\u006fle":"user","content":"\u00e9]}\"\\ \ud83d\ude00 [{"})"));
  cases.emplace_back("an escaped duplicate key in the appended message",
                     with(R"(,{"r\u006fle":"assistant","content":"\u00e9]}\"\\","role":"user"})"));
  cases.emplace_back("a duplicate key in the appended message",
                     with(R"(,{"role":"assistant","content":"a","role":"user"})"));
  cases.emplace_back("invalid UTF-8 appended", with(",{\"role\":\"user\",\"content\":\"\xff\"}"));
  cases.emplace_back("too deep appended", with("," + std::string(130, '[') + std::string(130, ']')));
  cases.emplace_back("a wrapped tool response appended",
                     with(R"(,{"role":"user","content":"<tool_response>r</tool_response>"})"));
  cases.emplace_back("a tool message appended", with(R"(,{"role":"tool","content":"t"})"));
  cases.emplace_back("a reasoning assistant appended",
                     with(R"(,{"role":"assistant","content":"c","reasoning_content":"r"})"));

  size_t resumed = 0;
  for (const auto& [what, body] : cases) {
    SessionCache cache;
    (void)cached(cache, base);  // the turn kept
    const uint64_t before = cache.turns().stats().resumed;
    expect_same(cache, body, what);
    if (HasFatalFailure()) return;
    resumed += cache.turns().stats().resumed - before;
    // And what the follow-up left in the cache serves the next turn the same.
    boost::system::error_code ec;
    json::value v = json::parse(body, ec);
    if (!ec && v.is_object() && v.as_object().contains("messages") && v.as_object().at("messages").is_array()) {
      v.as_object()["messages"].as_array().push_back(json::parse(user_q));
      expect_same(cache, json::serialize(v), what + ", then one more");
      if (HasFatalFailure()) return;
    }
  }
  // Taken where the body is an extension the formatter renders: the extension, the same body,
  // a new query, whitespace between appended messages, output_text parts, escapes, two
  // duplicate keys, a wrapped tool response, a tool message, a reasoning assistant.
  EXPECT_EQ(resumed, 11u);
}

// Threads sharing one cache, two of them on the same conversations (same seeds, so the same
// bodies race for one kept turn): every answer is the full path's.
TEST(TurnResume, ThreadsSharingACacheGetTheFullPathsIds) {
  ASSERT_TRUE(env().renderer && env().profile);
  (void)full("{}");  // the tokenizer's and profile's statics, before the threads
  SessionCache cache;
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      const uint64_t base = th < 2 ? 200 : 200 + 10 * static_cast<uint64_t>(th);
      std::vector<Agent> agents;
      for (uint64_t i = 0; i < 3; ++i) agents.emplace_back(base + i);
      for (int turn = 0; turn < 8; ++turn) {
        for (Agent& a : agents) {
          const std::string body = a.body();
          const RoutingTokens x = full(body);
          const RoutingTokens y = cached(cache, body);
          if (x.outcome != y.outcome || x.ids != y.ids) ++wrong[static_cast<size_t>(th)];
          a.advance();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
  EXPECT_GT(cache.turns().stats().resumed, 0u);
}

TEST(TurnResume, KeptTurnsStayWithinTheirLimits) {
  ASSERT_TRUE(env().renderer && env().profile);
  SessionCache cache({}, {}, TurnLimits{.max_entries = 3, .max_bytes = 1u << 20});
  for (uint64_t seed = 100; seed < 110; ++seed) {
    Agent a(seed);
    for (int turn = 0; turn < 3; ++turn) {
      expect_same(cache, a.body(), "seed " + std::to_string(seed));
      a.step();
    }
    const TurnStats st = cache.turns().stats();
    EXPECT_LE(st.entries, 3u);
    EXPECT_LE(st.bytes, 1u << 20);
  }
  EXPECT_GT(cache.turns().stats().evictions, 0u);
  SessionCache none({}, {}, TurnLimits{.max_entries = 0});
  Agent a(5);
  expect_same(none, a.body(), "no turns kept");
  EXPECT_EQ(none.turns().stats().entries, 0u);
}

}  // namespace
}  // namespace ramjet::render
