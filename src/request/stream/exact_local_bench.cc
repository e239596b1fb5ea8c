// CPU per routed request in exact mode with local tokens (docs/benchmarks.md): what ramjet spends
// on a ~100K-token Qwen3 agent prompt when it renders and encodes the prompt itself — the steps of
// TokenizerService::render_routing (request parse, tokenize payload with the profile's template
// arguments, render with the pinned Qwen3 template — the native formatter where it covers it —,
// encode with the session cache) followed by the chain + lookup in 8 engines' indexes (each
// holding the previous turn's first half plus 100K other blocks).
//
//   BM_ExactLocalFollowUp       the next turn of a conversation whose previous turn is cached
//                               (rendered prefix + encoded ids; re-warmed outside the timed region)
//   BM_ExactLocalCold           the same request with empty caches
//   BM_ExactLocalColdJinja      cold, with the template rendered by Jinja (no native formatter)
//   BM_ExactLocalFollowUpJinja  follow-up with Jinja rendering (SessionCache only)
#include <benchmark/benchmark.h>
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

#include <boost/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cache/events/inventory.h"
#include "model/model_profile.h"
#include "render/prompt/prompt.h"
#include "render/prompt/session_cache.h"
#include "render/identity/tokenize_payload.h"

namespace {

namespace ev = ramjet::cache::events;
namespace json = boost::json;
using namespace ramjet::render;

const std::string kData = RAMJET_TESTDATA_DIR;
constexpr size_t kTargetTokens = 100 * 1024;
constexpr uint32_t kBlock = 16;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "exact_local_bench: %s\n", what.c_str());
  std::exit(1);
}

// Golden texts (tokenizer goldens, then chat messages), as render_bench uses them.
std::vector<std::string> texts() {
  std::vector<std::string> out;
  for (const char* file : {"qwen3-tokenize.jsonl", "deepseek-v3-tokenize.jsonl"}) {
    std::ifstream in(kData + "/goldens/" + file);
    std::string line;
    while (std::getline(in, line)) {
      const auto v = json::parse(line).as_object();
      const std::string text(v.at("text").as_string());
      if (text.size() >= 8) out.push_back(text);
    }
  }
  if (out.empty()) die("no golden texts under " + kData);
  return out;
}

struct Fixture {
  const ramjet::model::ModelProfile* profile = nullptr;
  std::shared_ptr<const PromptRenderer> native, jinja;
  std::string previous, follow_up;  // request bodies
  std::vector<uint32_t> previous_ids;
  std::vector<std::unique_ptr<ev::Inventory>> engines;
  std::vector<const ev::Inventory*> inventories;
  size_t tokens = 0;
};

std::shared_ptr<const PromptRenderer> load(bool native) {
  PromptSources s;
  s.tokenizer_path = kData + "/models/qwen3/tokenizer.json";
  s.template_path = kData + "/models/qwen3/tokenizer_config.json";
  s.sibling_config = false;
  if (native) s.template_formatter = std::string(kTemplateFormatterQwen3);
  auto r = PromptRenderer::load(s);
  if (!r) die("load: " + r.error().message);
  if (native && !(*r)->native_stats().active) die("the native formatter does not cover the template");
  return *r;
}

// One routed request: TokenizerService::render_routing (render_routing_body), then the lookup.
size_t route(const Fixture& f, const PromptRenderer& r, const std::string& body, SessionCache* cache,
             std::vector<std::optional<uint32_t>>& out) {
  RoutingTokens t = render_routing_body(*f.profile, r, cache, PromptApi::kChat, body);
  if (t.outcome != ShadowOutcome::kSuccess) die("render failed");
  ev::lookup(f.inventories, ev::ExactRequest{t.ids, t.model, {}}, out);
  return t.ids.size();
}

Fixture make_fixture() {
  Fixture f;
  f.profile = ramjet::model::find_profile("qwen3");
  if (!f.profile) die("no qwen3 profile");
  f.native = load(true);
  f.jinja = load(false);
  const std::vector<std::string> parts = texts();
  size_t next = 0;
  auto take = [&](size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += (i ? "\n\n" : "") + parts[next++ % parts.size()];
    return s;
  };
  auto msg = [](const char* role, std::string content) { return json::object{{"role", role}, {"content", std::move(content)}}; };
  const json::array tools{json::object{
      {"type", "function"},
      {"function", json::object{{"name", "read_file"},
                                {"description", "Read a file of the repository."},
                                {"parameters", json::object{{"type", "object"},
                                                            {"properties", json::object{{"path", json::object{{"type", "string"}}}}},
                                                            {"required", json::array{"path"}}}}}}}};
  json::array messages;
  messages.push_back(msg("system", "You are a coding agent. " + take(4)));
  messages.push_back(msg("user", take(6)));
  size_t tokens = 0;
  const auto* tok = f.jinja->tokenizer();
  auto count = [&](const json::value& v) { return tok->encode(std::string_view(v.as_string()))->size() + 8; };
  for (int turn = 0; tokens < kTargetTokens * 11 / 10; ++turn) {  // the count misses the template's tokens
    json::object call = msg("assistant", "");
    call["reasoning_content"] = take(2);
    call["tool_calls"] = json::array{json::object{
        {"id", "call_" + std::to_string(turn)},
        {"type", "function"},
        {"function", json::object{{"name", "read_file"},
                                  {"arguments", json::serialize(json::object{{"path", "src/f" + std::to_string(turn) + ".cc"}})}}}}};
    messages.push_back(call);
    json::object result = msg("tool", take(16));
    result["tool_call_id"] = "call_" + std::to_string(turn);
    tokens += count(result["content"]) + count(call["reasoning_content"]) + 24;
    messages.push_back(result);
    if (turn % 8 == 7) {
      messages.push_back(msg("assistant", take(2)));
      messages.push_back(msg("user", take(2)));
      tokens += count(messages[messages.size() - 2].as_object().at("content")) +
                count(messages.back().as_object().at("content"));
    }
  }
  json::object request{{"model", "Qwen/Qwen3-8B"}, {"stream", true}, {"max_tokens", 512},
                       {"messages", messages}, {"tools", tools}};
  f.previous = json::serialize(request);
  // The agent's next turn: the answer's tool call and its result (no new user message).
  json::object call = msg("assistant", "");
  call["reasoning_content"] = "Now the tests.";
  call["tool_calls"] = json::array{json::object{
      {"id", "call_next"}, {"type", "function"},
      {"function", json::object{{"name", "read_file"}, {"arguments", R"({"path": "test/t.cc"})"}}}}};
  messages.push_back(call);
  json::object result = msg("tool", take(2));
  result["tool_call_id"] = "call_next";
  messages.push_back(result);
  request["messages"] = messages;
  f.follow_up = json::serialize(request);

  // Engines: each holds the previous turn's first half plus 100K other blocks.
  {
    json::parse_options opt;
    opt.max_depth = 128;
    auto payload = build_tokenize_payload(*f.profile, true, json::parse(f.previous, {}, opt).as_object());
    LocalRender r = render_local(*f.jinja, *payload, nullptr);
    if (r.outcome != ShadowOutcome::kSuccess) die("previous turn does not render");
    f.previous_ids = std::move(r.ids);
  }
  std::mt19937_64 rng(9);
  for (int e = 0; e < 8; ++e) {
    auto inv = std::make_unique<ev::Inventory>(ev::InventoryLimits{.shard = {.max_blocks = 262144}});
    auto store = [&](const std::vector<uint32_t>& tokens, size_t blocks, uint64_t base) {
      ramjet::cache::kv::BlockStored s;
      for (size_t b = 0; b < blocks; ++b) s.block_hashes.push_back(ramjet::cache::kv::BlockHash::from_uint(base + b));
      s.token_ids.assign(tokens.begin(), tokens.begin() + static_cast<long>(blocks * kBlock));
      s.block_size = kBlock;
      ramjet::cache::kv::EventBatch batch;
      batch.events.push_back(s);
      (void)inv->apply(batch);
    };
    std::vector<uint32_t> other(100000 * kBlock);
    for (auto& x : other) x = static_cast<uint32_t>(rng() % 150000);
    store(other, 100000, (uint64_t{1} << 40) * static_cast<uint64_t>(e + 1));
    store(f.previous_ids, f.previous_ids.size() / kBlock / 2, (uint64_t{1} << 50) * static_cast<uint64_t>(e + 1));
    f.inventories.push_back(inv.get());
    f.engines.push_back(std::move(inv));
  }
  // The native and the template paths agree, with and without the caches.
  std::vector<std::optional<uint32_t>> out(8);
  SessionCache cache;
  f.tokens = route(f, *f.native, f.previous, &cache, out);
  const size_t a = route(f, *f.native, f.follow_up, &cache, out);
  const size_t b = route(f, *f.jinja, f.follow_up, nullptr, out);
  if (a != b || f.tokens != f.previous_ids.size()) die("native and template token counts differ");
  if ((*f.native).native_stats().native != 2) die("the native formatter did not render the requests");
  std::fprintf(stderr, "exact_local_bench: previous %zu tokens (%zu bytes), follow-up %zu tokens (%zu bytes), %zu messages\n",
               f.tokens, f.previous.size(), a, f.follow_up.size(), messages.size());
  f.tokens = a;
  return f;
}

const Fixture& fixture() {
  static const Fixture f = make_fixture();
  return f;
}

// Timed turns, for instruction counts: under `valgrind --tool=callgrind --instr-atstart=no`
// only the timed route() calls of the follow-up and cold benchmarks are instrumented; the count
// printed at exit divides callgrind's total (docs/benchmarks.md).
size_t g_measured = 0;
struct PrintMeasured {
  ~PrintMeasured() {
    if (g_measured) std::fprintf(stderr, "exact_local_bench: %zu timed turns\n", g_measured);
  }
} g_print_measured;

size_t measured_route(const Fixture& f, const PromptRenderer& r, const std::string& body, SessionCache* cache,
                      std::vector<std::optional<uint32_t>>& out) {
  CALLGRIND_START_INSTRUMENTATION;
  const size_t n = route(f, r, body, cache, out);
  CALLGRIND_STOP_INSTRUMENTATION;
  ++g_measured;
  return n;
}

void warm(const Fixture& f, const PromptRenderer& r, SessionCache& cache) {
  cache.clear();
  std::vector<std::optional<uint32_t>> out(8);
  route(f, r, f.previous, &cache, out);
}

void follow_up(benchmark::State& state, const PromptRenderer& r) {
  const Fixture& f = fixture();
  SessionCache cache;
  std::vector<std::optional<uint32_t>> out(8);
  for (auto _ : state) {
    state.PauseTiming();
    warm(f, r, cache);
    state.ResumeTiming();
    benchmark::DoNotOptimize(measured_route(f, r, f.follow_up, &cache, out));
  }
  state.counters["tokens"] = static_cast<double>(f.tokens);
  state.counters["resident_tokens_engine0"] = static_cast<double>(out[0].value_or(0));
}

void cold(benchmark::State& state, const PromptRenderer& r) {
  const Fixture& f = fixture();
  SessionCache cache;
  std::vector<std::optional<uint32_t>> out(8);
  for (auto _ : state) {
    state.PauseTiming();
    cache.clear();
    state.ResumeTiming();
    benchmark::DoNotOptimize(measured_route(f, r, f.follow_up, &cache, out));
  }
  state.counters["tokens"] = static_cast<double>(f.tokens);
}

// The follow-up's parts: the body parse, the tokenize payload, render + encode with warm caches
// (native), and the lookup.
void BM_PartParse(benchmark::State& state) {
  const Fixture& f = fixture();
  json::parse_options opt;
  opt.max_depth = 128;
  for (auto _ : state) benchmark::DoNotOptimize(json::parse(f.follow_up, {}, opt));
}
void BM_PartParseArena(benchmark::State& state) {  // as render_routing_body parses
  const Fixture& f = fixture();
  json::parse_options opt;
  opt.max_depth = 128;
  std::vector<unsigned char> warm(f.follow_up.size() * 2 + 4096);
  for (auto _ : state) {
    json::monotonic_resource arena(warm.data(), warm.size());
    benchmark::DoNotOptimize(json::parse(f.follow_up, &arena, opt));
  }
}
void BM_PartPayload(benchmark::State& state) {
  const Fixture& f = fixture();
  json::parse_options opt;
  opt.max_depth = 128;
  const json::value v = json::parse(f.follow_up, {}, opt);
  for (auto _ : state) {
    state.PauseTiming();
    json::object copy = v.as_object();
    state.ResumeTiming();
    benchmark::DoNotOptimize(build_local_payload(*f.profile, PromptApi::kChat, std::move(copy)));
  }
}
void BM_PartRenderEncodeFollowUp(benchmark::State& state) {
  const Fixture& f = fixture();
  json::parse_options opt;
  opt.max_depth = 128;
  const auto payload = build_tokenize_payload(*f.profile, true, json::parse(f.follow_up, {}, opt).as_object());
  SessionCache cache;
  for (auto _ : state) {
    state.PauseTiming();
    warm(f, *f.native, cache);
    state.ResumeTiming();
    benchmark::DoNotOptimize(render_local(*f.native, *payload, &cache));
  }
}
void BM_PartLookup(benchmark::State& state) {
  const Fixture& f = fixture();
  std::vector<std::optional<uint32_t>> out(8);
  for (auto _ : state) {
    ev::lookup(f.inventories, ev::ExactRequest{f.previous_ids, {}, {}}, out);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_PartParse)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PartParseArena)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PartPayload)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PartRenderEncodeFollowUp)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PartLookup)->Unit(benchmark::kMillisecond);

void BM_ExactLocalFollowUp(benchmark::State& state) { follow_up(state, *fixture().native); }
void BM_ExactLocalCold(benchmark::State& state) { cold(state, *fixture().native); }
void BM_ExactLocalFollowUpJinja(benchmark::State& state) { follow_up(state, *fixture().jinja); }
void BM_ExactLocalColdJinja(benchmark::State& state) { cold(state, *fixture().jinja); }
BENCHMARK(BM_ExactLocalFollowUp)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExactLocalCold)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExactLocalFollowUpJinja)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExactLocalColdJinja)->Unit(benchmark::kMillisecond);

}  // namespace
