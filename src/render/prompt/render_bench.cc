// Google Benchmark of prompt rendering + encoding for a long agent conversation (Qwen3 chat
// template and tokenizer), with and without render::SessionCache.
//
// The conversation is deterministic: a system prompt, the tools of the qwen3 tool-call golden,
// then turns of user -> assistant (reasoning + tool call) -> tool -> assistant, their texts taken
// in order from the goldens' tokenizer texts and chat messages, until the rendered prompt has
// about 80K tokens. "Previous" is that conversation ending with a user message; the follow-up
// adds the assistant's answer and one new user message (what an agent sends next turn). The
// argument scales the golden texts per message: /1 gives ~2,100 short messages, /8 ~280 longer
// ones (closer to an agent's file-sized tool results); render cost grows with the message count.
//
//   BM_FullRenderEncode   render + full encode of the follow-up (no cache)
//   BM_FollowUpWithCache  render + SessionCache encode of the follow-up, the cache holding the
//                         previous turn (re-warmed outside the timed region every iteration)
//   BM_RenderOnly         render (= BM_BuildContext + BM_TemplateOnly)
//   BM_RenderParsed       render of the already-parsed request (render_parsed: no JSON parse)
//   BM_BuildContext       request JSON -> template context (parse, vLLM preprocessing)
//   BM_TemplateOnly       the Jinja template on a ready context
//   BM_EncodeOnly         full encode of the follow-up
//   BM_CacheEncodeOnly    SessionCache encode of the follow-up (warm with the previous turn)
//   BM_ColdCacheEncode    SessionCache encode of it into an empty cache (a miss, then stored)
//   BM_FindCuts           the added-token scan every SessionCache lookup starts with
// With the native Qwen3 formatter (render/template/qwen3_native.h; its output is checked against
// the template's here):
//   BM_NativeFullRenderEncode  parse + native render + full encode of the follow-up (no cache)
//   BM_NativeFollowUp          parse + native render reusing the previous turn's rendered prefix
//                              + SessionCache encode (both caches warmed with the previous turn
//                              outside the timed region every iteration)
//   BM_NativeRender            parse + native render, no cache
//   BM_NativeFollowUpRender    parse + native render with the warm prefix cache
#include <benchmark/benchmark.h>

#include <boost/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "render/template/chat_template.h"
#include "render/template/qwen3_native.h"
#include "render/prompt/session_cache.h"
#include "render/tokenize/tokenizer.h"

namespace {

using namespace ramjet::render;

const std::string kData = RAMJET_TESTDATA_DIR;
constexpr size_t kTargetTokens = 80000;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "render_bench: %s\n", what.c_str());
  std::exit(1);
}

struct Fixture {
  std::shared_ptr<const Tokenizer> tok;
  ChatTemplate tpl;
  SpecialTokens special;
  ramjet::render::jinja::RenderOptions opt;
  std::string previous_request, follow_up_request;  // chat request bodies (JSON)
  std::string previous, follow_up;                  // their renderings
  size_t follow_up_tokens = 0, messages = 0;

  std::string render_request(const std::string& request) const {
    auto r = render(tpl, request, special, {}, opt);
    if (!r.ok()) die("render failed: " + r.error().message);
    return r.value();
  }
};

// Golden texts in file order: tokenizer texts, then every chat message's content.
std::vector<std::string> texts() {
  std::vector<std::string> out;
  for (const char* file : {"qwen3-tokenize.jsonl", "deepseek-v3-tokenize.jsonl"}) {
    std::ifstream in(kData + "/goldens/" + file);
    std::string line;
    while (std::getline(in, line)) {
      const auto v = boost::json::parse(line).as_object();
      const std::string text(v.at("text").as_string());
      if (text.size() >= 8) out.push_back(text);
    }
  }
  for (const char* file : {"qwen3.jsonl", "deepseek-v3.1.jsonl"}) {
    std::ifstream in(kData + "/goldens/" + file);
    std::string line;
    while (std::getline(in, line)) {
      const auto v = boost::json::parse(line).as_object();
      for (const auto& m : v.at("request").at("messages").as_array()) {
        const auto* c = m.as_object().if_contains("content");
        if (c && c->is_string() && c->as_string().size() >= 8) out.emplace_back(c->as_string());
      }
    }
  }
  if (out.empty()) die("no golden texts under " + kData);
  return out;
}

boost::json::array golden_tools() {
  std::ifstream in(kData + "/goldens/qwen3.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto v = boost::json::parse(line).as_object();
    if (v.at("id").as_string() != "qwen3-22-tool-call-roundtrip") continue;
    return v.at("request").at("tools").as_array();
  }
  die("qwen3-22-tool-call-roundtrip not found");
}

Fixture make_fixture(size_t scale) {
  Fixture f;
  auto tok = Tokenizer::from_file(kData + "/models/qwen3/tokenizer.json");
  if (!tok) die("tokenizer: " + tok.error().message);
  f.tok = *tok;
  auto tpl = ChatTemplate::parse(slurp(kData + "/models/qwen3/chat_template.jinja"));
  if (!tpl.ok()) die("template: " + tpl.error().message);
  f.tpl = tpl.value();
  auto st = special_tokens_from_config(slurp(kData + "/models/qwen3/tokenizer_config.json"));
  if (!st.ok()) die("tokenizer_config: " + st.error().message);
  f.special = st.value();
  f.opt.now = [] { return int64_t{1767225600}; };

  const std::vector<std::string> parts = texts();
  const boost::json::array tools = golden_tools();
  const std::string tool_name(tools.at(0).at("function").at("name").as_string());
  size_t next = 0;
  auto take_n = [&](size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) {
      if (i) s += "\n\n";
      s += parts[next++ % parts.size()];
    }
    return s;
  };
  auto take = [&](size_t n) { return take_n(n * scale); };
  auto msg = [](const char* role, std::string content) {
    return boost::json::object{{"role", role}, {"content", std::move(content)}};
  };
  boost::json::array messages;
  messages.push_back(msg("system", "You are a coding agent. " + take(2)));
  size_t tokens = 0;
  for (int turn = 0; tokens < kTargetTokens; ++turn) {
    const size_t before = messages.size();
    messages.push_back(msg("user", take(3)));
    boost::json::object call = msg("assistant", "");
    call["reasoning_content"] = take(1);
    boost::json::object args{{"location", take(1)}, {"turn", turn}};
    call["tool_calls"] = boost::json::array{boost::json::object{
        {"id", "call_" + std::to_string(turn)},
        {"type", "function"},
        {"function",
         boost::json::object{{"name", tool_name}, {"arguments", boost::json::serialize(args)}}}}};
    messages.push_back(call);
    boost::json::object result = msg("tool", take(2));
    result["tool_call_id"] = "call_" + std::to_string(turn);
    messages.push_back(result);
    messages.push_back(msg("assistant", take(2)));
    for (size_t i = before; i < messages.size(); ++i) {
      const auto& m = messages[i].as_object();
      for (const char* key : {"content", "reasoning_content"}) {
        if (const auto* c = m.if_contains(key)) tokens += f.tok->encode(c->as_string())->size() + 8;
      }
    }
  }
  messages.push_back(msg("user", take(3)));
  boost::json::object request{
      {"messages", messages}, {"tools", tools}, {"add_generation_prompt", true}};
  f.previous_request = boost::json::serialize(request);
  messages.push_back(msg("assistant", take(2)));
  messages.push_back(msg("user", "Thanks. Now also run the tests and summarise the failures."));
  request["messages"] = messages;
  f.follow_up_request = boost::json::serialize(request);
  f.previous = f.render_request(f.previous_request);
  f.follow_up = f.render_request(f.follow_up_request);
  f.follow_up_tokens = f.tok->encode(f.follow_up)->size();
  for (const std::string* req : {&f.previous_request, &f.follow_up_request}) {
    auto native = qwen3::format(boost::json::parse(*req));
    if (!native || native->text != (req == &f.previous_request ? f.previous : f.follow_up))
      die("the native formatter differs from the template");
  }
  // The cache is only useful if the previous prompt is a prefix of the follow-up up to a cut.
  size_t common = 0;
  while (common < f.previous.size() && f.previous[common] == f.follow_up[common]) ++common;
  f.messages = messages.size();
  std::fprintf(stderr,
               "render_bench /%zu: %zu messages, follow-up %zu bytes / %zu tokens, previous "
               "%zu bytes, common prefix %zu bytes\n",
               scale, messages.size(), f.follow_up.size(), f.follow_up_tokens, f.previous.size(),
               common);
  return f;
}

const Fixture& fixture(const benchmark::State& state) {
  static std::map<size_t, Fixture> fixtures;  // benchmarks run one at a time
  const auto scale = static_cast<size_t>(state.range(0));
  auto it = fixtures.find(scale);
  if (it == fixtures.end()) it = fixtures.emplace(scale, make_fixture(scale)).first;
  return it->second;
}

void counters(benchmark::State& state, const Fixture& f) {
  state.counters["tokens"] = static_cast<double>(f.follow_up_tokens);
  state.counters["bytes"] = static_cast<double>(f.follow_up.size());
  state.counters["messages"] = static_cast<double>(f.messages);
}

void BM_FullRenderEncode(benchmark::State& state) {
  const Fixture& f = fixture(state);
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    const std::string text = f.render_request(f.follow_up_request);
    ids.clear();
    if (f.tok->encode_into(text, ids)) state.SkipWithError("encode failed");
    benchmark::DoNotOptimize(ids.data());
  }
  counters(state, f);
}

// A cache holding only the previous turn (outside the timed region).
void warm(SessionCache& cache, const Fixture& f) {
  cache.clear();
  std::vector<uint32_t> ids;
  if (cache.encode(*f.tok, f.previous, ids)) die("cache encode failed");
}

void BM_FollowUpWithCache(benchmark::State& state) {
  const Fixture& f = fixture(state);
  SessionCache cache;
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    state.PauseTiming();
    warm(cache, f);
    state.ResumeTiming();
    const std::string text = f.render_request(f.follow_up_request);
    ids.clear();
    if (cache.encode(*f.tok, text, ids)) state.SkipWithError("encode failed");
    benchmark::DoNotOptimize(ids.data());
  }
  // What the last follow-up reused and encoded (the stats also count the warming encodes).
  const auto st = cache.stats();
  warm(cache, f);
  const auto warmed = cache.stats();
  if (cache.encode(*f.tok, f.follow_up, ids)) state.SkipWithError("encode failed");
  const auto last = cache.stats();
  state.counters["reused_bytes"] = static_cast<double>(last.reused_bytes - warmed.reused_bytes);
  state.counters["encoded_bytes"] = static_cast<double>(last.encoded_bytes - warmed.encoded_bytes);
  (void)st;
  counters(state, f);
}

void BM_RenderOnly(benchmark::State& state) {
  const Fixture& f = fixture(state);
  for (auto _ : state) {
    std::string text = f.render_request(f.follow_up_request);
    benchmark::DoNotOptimize(text.data());
  }
  counters(state, f);
}

void BM_RenderParsed(benchmark::State& state) {
  const Fixture& f = fixture(state);
  boost::json::parse_options opt;
  opt.max_depth = 256;
  const boost::json::value request = boost::json::parse(f.follow_up_request, {}, opt);
  for (auto _ : state) {
    auto text = render_parsed(f.tpl, request, f.special, {}, f.opt);
    if (!text.ok() || text.value() != f.follow_up) state.SkipWithError("render differs");
    benchmark::DoNotOptimize(text);
  }
  counters(state, f);
}

void BM_BuildContext(benchmark::State& state) {
  const Fixture& f = fixture(state);
  for (auto _ : state) {
    auto ctx = build_context(f.follow_up_request, f.special, {}, f.tpl.openai_content_format);
    if (!ctx.ok()) state.SkipWithError("build_context failed");
    benchmark::DoNotOptimize(ctx);
  }
  counters(state, f);
}

void BM_TemplateOnly(benchmark::State& state) {
  const Fixture& f = fixture(state);
  auto ctx = build_context(f.follow_up_request, f.special, {}, f.tpl.openai_content_format);
  if (!ctx.ok()) die("build_context failed");
  for (auto _ : state) {
    auto text = f.tpl.tpl->render(ctx.value(), f.opt);
    if (!text.ok() || text.value() != f.follow_up) state.SkipWithError("render differs");
    benchmark::DoNotOptimize(text);
  }
  counters(state, f);
}

void BM_EncodeOnly(benchmark::State& state) {
  const Fixture& f = fixture(state);
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    ids.clear();
    if (f.tok->encode_into(f.follow_up, ids)) state.SkipWithError("encode failed");
    benchmark::DoNotOptimize(ids.data());
  }
  counters(state, f);
}

void BM_CacheEncodeOnly(benchmark::State& state) {
  const Fixture& f = fixture(state);
  SessionCache cache;
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    state.PauseTiming();
    warm(cache, f);
    state.ResumeTiming();
    ids.clear();
    if (cache.encode(*f.tok, f.follow_up, ids)) state.SkipWithError("encode failed");
    benchmark::DoNotOptimize(ids.data());
  }
  counters(state, f);
}

// A miss: the first turn of a session through an empty cache (the cost of storing it).
void BM_ColdCacheEncode(benchmark::State& state) {
  const Fixture& f = fixture(state);
  SessionCache cache;
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    state.PauseTiming();
    cache.clear();
    state.ResumeTiming();
    ids.clear();
    if (cache.encode(*f.tok, f.follow_up, ids)) state.SkipWithError("encode failed");
    benchmark::DoNotOptimize(ids.data());
  }
  counters(state, f);
}

// The scan a lookup does before anything else.
void BM_FindCuts(benchmark::State& state) {
  const Fixture& f = fixture(state);
  std::vector<Tokenizer::Cut> cuts;
  for (auto _ : state) {
    cuts.clear();
    if (f.tok->find_cuts(f.follow_up, cuts)) state.SkipWithError("find_cuts failed");
    benchmark::DoNotOptimize(cuts.data());
  }
  state.counters["cuts"] = static_cast<double>(cuts.size());
  counters(state, f);
}

// As PromptRenderer::chat parses a request body: one arena for the DOM, freed at once.
struct Parsed {
  boost::json::monotonic_resource arena;
  boost::json::value value;
  explicit Parsed(const std::string& json) : arena(json.size() + 4096) {
    boost::json::parse_options opt;
    opt.max_depth = 256;
    boost::system::error_code ec;
    value = boost::json::parse(json, ec, &arena, opt);
    if (ec) die("request does not parse");
  }
};

void warm_native(SessionCache& cache, const Fixture& f);

// From an already-parsed request (what the tokenizer service renders: the payload it built):
// the template's full render + encode, and the native follow-up with both caches warm.
void BM_FullRenderEncodeParsed(benchmark::State& state) {
  const Fixture& f = fixture(state);
  const Parsed request(f.follow_up_request);
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    auto text = render_parsed(f.tpl, request.value, f.special, {}, f.opt);
    if (!text.ok()) state.SkipWithError("render failed");
    ids.clear();
    if (f.tok->encode_into(text.value(), ids)) state.SkipWithError("encode failed");
    benchmark::DoNotOptimize(ids.data());
  }
  counters(state, f);
}

void BM_NativeFollowUpParsed(benchmark::State& state) {
  const Fixture& f = fixture(state);
  const Parsed request(f.follow_up_request);
  SessionCache cache;
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    state.PauseTiming();
    warm_native(cache, f);
    state.ResumeTiming();
    auto text = qwen3::format(request.value, &cache.render_prefixes());
    if (!text) state.SkipWithError("native render failed");
    ids.clear();
    if (cache.encode(*f.tok, text->text, ids)) state.SkipWithError("encode failed");
    benchmark::DoNotOptimize(ids.data());
  }
  counters(state, f);
}

void BM_ParseOnly(benchmark::State& state) {
  const Fixture& f = fixture(state);
  for (auto _ : state) {
    Parsed p(f.follow_up_request);
    benchmark::DoNotOptimize(p.value);
  }
  counters(state, f);
}

// Both caches holding only the previous turn (outside the timed region).
void warm_native(SessionCache& cache, const Fixture& f) {
  cache.clear();
  const Parsed request(f.previous_request);
  auto prev = qwen3::format(request.value, &cache.render_prefixes());
  if (!prev) die("native render failed");
  std::vector<uint32_t> ids;
  if (cache.encode(*f.tok, prev->text, ids)) die("cache encode failed");
}

void BM_NativeFullRenderEncode(benchmark::State& state) {
  const Fixture& f = fixture(state);
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    const Parsed request(f.follow_up_request);
    auto text = qwen3::format(request.value);
    if (!text) state.SkipWithError("native render failed");
    ids.clear();
    if (f.tok->encode_into(text->text, ids)) state.SkipWithError("encode failed");
    benchmark::DoNotOptimize(ids.data());
  }
  counters(state, f);
}

void BM_NativeFollowUp(benchmark::State& state) {
  const Fixture& f = fixture(state);
  SessionCache cache;
  std::vector<uint32_t> ids;
  size_t reused = 0;
  for (auto _ : state) {
    state.PauseTiming();
    warm_native(cache, f);
    state.ResumeTiming();
    const Parsed request(f.follow_up_request);
    auto text = qwen3::format(request.value, &cache.render_prefixes());
    if (!text) state.SkipWithError("native render failed");
    ids.clear();
    if (cache.encode(*f.tok, text->text, ids)) state.SkipWithError("encode failed");
    reused = text->reused_messages;
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["reused_messages"] = static_cast<double>(reused);
  counters(state, f);
}

void BM_NativeRender(benchmark::State& state) {
  const Fixture& f = fixture(state);
  for (auto _ : state) {
    const Parsed request(f.follow_up_request);
    auto text = qwen3::format(request.value);
    if (!text) state.SkipWithError("native render failed");
    benchmark::DoNotOptimize(text);
  }
  counters(state, f);
}

void BM_NativeFollowUpRender(benchmark::State& state) {
  const Fixture& f = fixture(state);
  SessionCache cache;
  for (auto _ : state) {
    state.PauseTiming();
    warm_native(cache, f);
    state.ResumeTiming();
    const Parsed request(f.follow_up_request);
    auto text = qwen3::format(request.value, &cache.render_prefixes());
    if (!text || text->text != f.follow_up) state.SkipWithError("native render differs");
    benchmark::DoNotOptimize(text);
  }
  counters(state, f);
}

#define RENDER_BENCH(name) BENCHMARK(name)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)
RENDER_BENCH(BM_FullRenderEncode);
RENDER_BENCH(BM_FollowUpWithCache);
RENDER_BENCH(BM_RenderOnly);
RENDER_BENCH(BM_RenderParsed);
RENDER_BENCH(BM_BuildContext);
RENDER_BENCH(BM_TemplateOnly);
RENDER_BENCH(BM_EncodeOnly);
RENDER_BENCH(BM_CacheEncodeOnly);
RENDER_BENCH(BM_ColdCacheEncode);
RENDER_BENCH(BM_FindCuts);
RENDER_BENCH(BM_NativeFullRenderEncode);
RENDER_BENCH(BM_NativeFollowUp);
RENDER_BENCH(BM_NativeRender);
RENDER_BENCH(BM_NativeFollowUpRender);
RENDER_BENCH(BM_ParseOnly);
RENDER_BENCH(BM_FullRenderEncodeParsed);
RENDER_BENCH(BM_NativeFollowUpParsed);

}  // namespace
