// What turning a Responses or Messages request into vLLM's chat request adds to exact routing's
// CPU (docs/benchmarks.md, "Agent APIs"): an ~400 KB agent conversation (100 turns of a user
// message, reasoning, a tool call, its ~3.5 KB result and an answer, after a 24 KB system prompt)
// in each shape, already parsed (the proxy parses once); against it, the tokenize payload of the
// same conversation sent as chat.
#include <benchmark/benchmark.h>

#include <boost/json.hpp>
#include <string>

#include "model/model_profile.h"
#include "render/template/api_conversion.h"
#include "render/identity/tokenize_payload.h"

namespace {

namespace json = boost::json;
using ramjet::render::PromptApi;

std::string text(int i, size_t bytes) {
  std::string s;
  while (s.size() < bytes) s += "line " + std::to_string(i) + ": the build step " + std::to_string(s.size()) + " passed. ";
  return s;
}

constexpr int kTurns = 100;

json::object responses_request() {
  json::array input;
  for (int t = 0; t < kTurns; ++t) {
    input.push_back(json::object{{"role", "user"}, {"content", text(t, 200)}});
    input.push_back(json::object{{"type", "reasoning"}, {"id", "rs"}, {"summary", json::array{}},
                                 {"content", json::array{json::object{{"type", "reasoning_text"}, {"text", text(t, 300)}}}}});
    input.push_back(json::object{{"type", "function_call"}, {"call_id", "call_" + std::to_string(t)}, {"name", "shell"},
                                 {"arguments", R"({"command":["make","test"]})"}});
    input.push_back(json::object{{"type", "function_call_output"}, {"call_id", "call_" + std::to_string(t)}, {"output", text(t, 3500)}});
  }
  input.push_back(json::object{{"role", "user"}, {"content", "next"}});
  return json::object{{"model", "m"}, {"instructions", text(0, 24 << 10)}, {"input", std::move(input)},
                      {"tools", json::array{json::object{{"type", "function"}, {"name", "shell"}, {"strict", false},
                                                         {"parameters", json::object{{"type", "object"}}}}}}};
}

json::object messages_request() {
  json::array messages;
  for (int t = 0; t < kTurns; ++t) {
    messages.push_back(json::object{{"role", "user"}, {"content", text(t, 200)}});
    messages.push_back(json::object{
        {"role", "assistant"},
        {"content", json::array{json::object{{"type", "thinking"}, {"thinking", text(t, 300)}, {"signature", "s"}},
                                json::object{{"type", "tool_use"}, {"id", "t" + std::to_string(t)}, {"name", "Bash"},
                                             {"input", json::object{{"command", "make test"}}}}}}});
    messages.push_back(json::object{
        {"role", "user"},
        {"content", json::array{json::object{{"type", "tool_result"}, {"tool_use_id", "t" + std::to_string(t)},
                                             {"content", text(t, 3500)}}}}});
  }
  messages.push_back(json::object{{"role", "user"}, {"content", "next"}});
  return json::object{{"model", "m"}, {"max_tokens", 512}, {"system", text(0, 24 << 10)}, {"messages", std::move(messages)},
                      {"tools", json::array{json::object{{"name", "Bash"}, {"input_schema", json::object{{"type", "object"}}}}}}};
}

void BM_ResponsesToChat(benchmark::State& state) {
  const json::object req = responses_request();
  state.counters["request_bytes"] = static_cast<double>(json::serialize(req).size());
  for (auto _ : state) benchmark::DoNotOptimize(ramjet::render::to_chat_request(PromptApi::kResponses, req));
}
BENCHMARK(BM_ResponsesToChat)->Unit(benchmark::kMillisecond);

void BM_MessagesToChat(benchmark::State& state) {
  const json::object req = messages_request();
  state.counters["request_bytes"] = static_cast<double>(json::serialize(req).size());
  for (auto _ : state) benchmark::DoNotOptimize(ramjet::render::to_chat_request(PromptApi::kMessages, req));
}
BENCHMARK(BM_MessagesToChat)->Unit(benchmark::kMillisecond);

// The whole tokenize payload (conversion + the chat payload) of each shape, and of the same
// conversation sent as chat.
void BM_Payload(benchmark::State& state) {
  const auto api = static_cast<PromptApi>(state.range(0));
  const ramjet::model::ModelProfile& qwen = *ramjet::model::find_profile("qwen3");
  json::object req = api == PromptApi::kMessages ? messages_request() : responses_request();
  if (api == PromptApi::kChat) req = ramjet::render::to_chat_request(PromptApi::kResponses, req).value();
  state.SetLabel(std::string(ramjet::render::to_string(api)));
  for (auto _ : state) benchmark::DoNotOptimize(ramjet::render::build_tokenize_payload(qwen, api, req));
}
BENCHMARK(BM_Payload)
    ->Arg(static_cast<int>(PromptApi::kChat))
    ->Arg(static_cast<int>(PromptApi::kResponses))
    ->Arg(static_cast<int>(PromptApi::kMessages))
    ->Unit(benchmark::kMillisecond);

// What exact routing's local render pays before the template: the payload from a body it parsed
// itself (consumed: moved, not copied, and not serialised).
void BM_LocalPayload(benchmark::State& state) {
  const auto api = static_cast<PromptApi>(state.range(0));
  const ramjet::model::ModelProfile& qwen = *ramjet::model::find_profile("qwen3");
  json::object req = api == PromptApi::kMessages ? messages_request() : responses_request();
  if (api == PromptApi::kChat) req = ramjet::render::to_chat_request(PromptApi::kResponses, req).value();
  state.SetLabel(std::string(ramjet::render::to_string(api)));
  for (auto _ : state) {
    state.PauseTiming();
    json::object copy = req;
    state.ResumeTiming();
    benchmark::DoNotOptimize(ramjet::render::build_local_payload(qwen, api, std::move(copy)));
  }
}
BENCHMARK(BM_LocalPayload)
    ->Arg(static_cast<int>(PromptApi::kChat))
    ->Arg(static_cast<int>(PromptApi::kResponses))
    ->Arg(static_cast<int>(PromptApi::kMessages))
    ->Unit(benchmark::kMillisecond);

}  // namespace
