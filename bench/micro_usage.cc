// Microbenchmarks for request/usage: what usage accounting costs per streamed response. A
// vLLM-shaped 200-event chat stream (plus the usage chunk and [DONE]) is fed whole, one event
// per feed() call (an engine flushing each token), and in 1460-byte pieces that split lines
// (TCP segments). A non-streaming chat.completion JSON body is measured for comparison.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "request/usage/usage.h"

namespace {

using ramjet::request::Endpoint;
using ramjet::request::UsageAccumulator;

constexpr int kEvents = 200;

std::vector<std::string> chat_events() {
  const std::string head =
      R"(data: {"id":"chatcmpl-bench0000000000000000","object":"chat.completion.chunk","created":1700000000,"model":"bench-model","choices":[)";
  std::vector<std::string> ev;
  for (int i = 0; i < kEvents; ++i) {
    const std::string delta = i == 0 ? R"({"role":"assistant","content":"Hello"})"
                                     : R"({"content":" token)" + std::to_string(i) + "\"}";
    const std::string finish = i == kEvents - 1 ? R"("stop")" : "null";
    ev.push_back(head + R"({"index":0,"delta":)" + delta + R"(,"logprobs":null,"finish_reason":)" + finish +
                 "}]}\n\n");
  }
  ev.push_back(head + R"(],"usage":{"prompt_tokens":1200,"total_tokens":1400,"completion_tokens":200,)"
                      R"("prompt_tokens_details":{"cached_tokens":1024}}})" "\n\n");
  ev.push_back("data: [DONE]\n\n");
  return ev;
}

bool usage_ok(const UsageAccumulator& acc) {
  const auto& u = acc.usage();
  return u.completion_tokens == 200u && u.prompt_tokens == 1200u && u.cached_tokens == 1024u &&
         u.finish_reason == "stop" && u.generated && acc.parse_failures() == 0;
}

template <typename Feed>
void run_stream(benchmark::State& state, const std::vector<std::string>& pieces, Feed feed, size_t bytes) {
  {
    UsageAccumulator acc(Endpoint::kChat, true);
    feed(acc, pieces);
    acc.finish();
    if (!usage_ok(acc)) {
      state.SkipWithError("usage accounting did not read the generated stream as expected");
      return;
    }
  }
  for (auto _ : state) {
    UsageAccumulator acc(Endpoint::kChat, true);
    feed(acc, pieces);
    acc.finish();
    benchmark::DoNotOptimize(acc.usage());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["events"] = benchmark::Counter(static_cast<double>(state.iterations()) * (kEvents + 2),
                                                benchmark::Counter::kIsRate);
}

void feed_all(UsageAccumulator& acc, const std::vector<std::string>& pieces) {
  bool first = false;
  for (const auto& p : pieces) first |= acc.feed(p);
  benchmark::DoNotOptimize(first);
}

void BM_UsageSseWhole(benchmark::State& state) {
  std::string all;
  for (const auto& e : chat_events()) all += e;
  run_stream(state, {all}, feed_all, all.size());
}

void BM_UsageSsePerEvent(benchmark::State& state) {
  const auto ev = chat_events();
  size_t bytes = 0;
  for (const auto& e : ev) bytes += e.size();
  run_stream(state, ev, feed_all, bytes);
}

void BM_UsageSseSegments(benchmark::State& state) {
  std::string all;
  for (const auto& e : chat_events()) all += e;
  std::vector<std::string> segments;
  for (size_t off = 0; off < all.size(); off += 1460) segments.push_back(all.substr(off, 1460));
  run_stream(state, segments, feed_all, all.size());
}

void BM_UsageJson(benchmark::State& state) {
  const std::string body =
      R"({"id":"chatcmpl-bench0000000000000000","object":"chat.completion","created":1700000000,)"
      R"("model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":")" +
      std::string(800, 'x') +
      R"("},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1200,"total_tokens":1400,)"
      R"("completion_tokens":200,"prompt_tokens_details":{"cached_tokens":1024}}})";
  for (auto _ : state) {
    UsageAccumulator acc(Endpoint::kChat, false);
    acc.feed(body);
    acc.finish();
    benchmark::DoNotOptimize(acc.usage());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}

}  // namespace

BENCHMARK(BM_UsageSseWhole)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_UsageSsePerEvent)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_UsageSseSegments)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_UsageJson)->Unit(benchmark::kMicrosecond);
