// Microbenchmarks for request/prepare: the one JSON parse on the request path. Chat bodies of
// 2 KiB, 64 KiB and 2 MiB, forwarded unchanged or rewritten by the shims (oversized max_tokens
// stripped, all-text content arrays flattened, an unknown reasoning_effort dropped).
// prepare() takes the body by value, as the proxy moves it in; each iteration therefore pays one
// copy of the body, which BM_CopyBody measures on its own so it can be subtracted.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <string>

#include "request/prepare/prepare.h"

namespace {

using ramjet::request::Endpoint;
using ramjet::request::PrepareConfig;
using ramjet::request::prepare;

constexpr const char* kFiller =
    "The service proxies streaming completions to several engines and keeps per-engine load. "
    "Latency at the 99th percentile matters more than the mean, so measure before tuning. ";

// A chat body of about `target` bytes: a system prompt and alternating user/assistant turns.
// rewritten=true adds one trigger per shim; the text volume stays the same.
std::string chat_body(size_t target, bool rewritten) {
  std::string b = R"({"model":"bench-model","messages":[)";
  b += R"({"role":"system","content":"You are a careful senior software engineer."})";
  size_t turn = 0;
  while (b.size() + 256 < target) {
    const bool user = turn % 2 == 0;
    std::string text;
    const size_t want = std::min<size_t>(target - b.size() - 200, 1500);
    while (text.size() < want) text += kFiller;
    text.resize(want);
    b += user ? R"(,{"role":"user","content":)" : R"(,{"role":"assistant","content":)";
    if (rewritten && user) {  // the same text as an all-text parts array: flattened by the shim
      const size_t half = text.size() / 2;
      b += R"([{"type":"text","text":")" + text.substr(0, half) + R"("},{"type":"text","text":")" +
           text.substr(half) + R"("}]})";
    } else {
      b += "\"" + text + "\"}";
    }
    ++turn;
  }
  b += R"(],"temperature":0.7,"top_p":0.95,"stream":true)";
  b += rewritten ? R"(,"max_tokens":1000000,"reasoning_effort":"extreme"})" : R"(,"max_tokens":256})";
  return b;
}

void BM_Prepare(benchmark::State& state, bool rewritten) {
  const std::string body = chat_body(static_cast<size_t>(state.range(0)), rewritten);
  const PrepareConfig config;
  {
    const auto check = prepare(Endpoint::kChat, body, config);
    if (!check.json_object || check.rewritten != rewritten) {
      state.SkipWithError("prepare() did not classify the generated body as expected");
      return;
    }
  }
  for (auto _ : state) {
    auto prepared = prepare(Endpoint::kChat, body, config);
    benchmark::DoNotOptimize(prepared);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(body.size()));
  state.counters["body_bytes"] = static_cast<double>(body.size());
}

void BM_PrepareUnchanged(benchmark::State& state) { BM_Prepare(state, false); }
void BM_PrepareRewritten(benchmark::State& state) { BM_Prepare(state, true); }

// The copy every BM_Prepare iteration makes to hand prepare() its own string.
void BM_CopyBody(benchmark::State& state) {
  const std::string body = chat_body(static_cast<size_t>(state.range(0)), false);
  for (auto _ : state) {
    std::string copy = body;
    benchmark::DoNotOptimize(copy);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(body.size()));
}

}  // namespace

BENCHMARK(BM_PrepareUnchanged)->Arg(2 << 10)->Arg(64 << 10)->Arg(2 << 20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PrepareRewritten)->Arg(2 << 10)->Arg(64 << 10)->Arg(2 << 20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CopyBody)->Arg(2 << 10)->Arg(64 << 10)->Arg(2 << 20)->Unit(benchmark::kMicrosecond);
