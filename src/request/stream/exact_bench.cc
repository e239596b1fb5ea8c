// CPU per routed request in exact mode (docs/benchmarks.md): what ramjet itself spends on a
// 100K-token agent prompt — the /tokenize body built from the request (one JSON parse), the
// engine's answer decoded, the chain of block keys computed and looked up in 8 engines' indexes
// (each holding the prompt's first half plus 100K other blocks). The tokenization itself runs on
// the engine (RJ_EXACT_TOKENS=remote) and is not ramjet's CPU.
#include <benchmark/benchmark.h>

#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cache/events/inventory.h"
#include "render/identity/tokenize_payload.h"
#include "request/stream/exact_tokens.h"

namespace {

namespace ev = ramjet::cache::events;
constexpr size_t kTokens = 100 * 1024;
constexpr uint32_t kBlock = 16;

std::vector<uint32_t> prompt_tokens() {
  std::mt19937_64 rng(5);
  std::vector<uint32_t> t(kTokens);
  for (auto& x : t) x = static_cast<uint32_t>(rng() % 150000);
  return t;
}

// A chat request of ~400 KB (about 4 bytes of text per token).
std::string request_body() {
  std::string system;
  for (int i = 0; system.size() < 4 * kTokens; ++i) system += "Tool rule " + std::to_string(i) + ": keep the invariant. ";
  return R"({"model":"m","stream":true,"max_tokens":512,"reasoning_effort":"high","messages":[{"role":"system","content":")" +
         system + R"("},{"role":"user","content":"next step"}]})";
}

std::string tokenize_answer(const std::vector<uint32_t>& t) {
  std::string s = R"({"count":)" + std::to_string(t.size()) + R"(,"max_model_len":262144,"tokens":[)";
  for (size_t i = 0; i < t.size(); ++i) s += (i ? "," : "") + std::to_string(t[i]);
  return s + R"(],"token_strs":null})";
}

std::vector<std::unique_ptr<ev::Inventory>> fleet(const std::vector<uint32_t>& t) {
  std::vector<std::unique_ptr<ev::Inventory>> out;
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
    store(other, 100000, (uint64_t{1} << 40) * (e + 1));
    store(t, t.size() / kBlock / 2, (uint64_t{1} << 50) * (e + 1));
    out.push_back(std::move(inv));
  }
  return out;
}

void BM_ExactRequestCpu(benchmark::State& state) {
  const auto tokens = prompt_tokens();
  const std::string body = request_body();
  const std::string answer = tokenize_answer(tokens);
  const auto inventories = fleet(tokens);
  std::vector<const ev::Inventory*> inv;
  for (const auto& i : inventories) inv.push_back(i.get());
  std::vector<std::optional<uint32_t>> out(inv.size());
  for (auto _ : state) {
    auto call = ramjet::request::tokenize_call(ramjet::request::Endpoint::kChat, body);
    auto ids = ramjet::render::decode_tokenize_response(answer);
    ev::lookup(inv, ev::ExactRequest{*ids, call->model, call->cache_salt}, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["resident_tokens_engine0"] = static_cast<double>(out[0].value_or(0));
}
BENCHMARK(BM_ExactRequestCpu)->Unit(benchmark::kMillisecond);

// Its parts.
void BM_ExactPayloadOnly(benchmark::State& state) {
  const std::string body = request_body();
  for (auto _ : state) benchmark::DoNotOptimize(ramjet::request::tokenize_call(ramjet::request::Endpoint::kChat, body));
}
BENCHMARK(BM_ExactPayloadOnly)->Unit(benchmark::kMillisecond);

void BM_TokenizeAnswerDecode(benchmark::State& state) {
  const std::string answer = tokenize_answer(prompt_tokens());
  for (auto _ : state) benchmark::DoNotOptimize(ramjet::render::decode_tokenize_response(answer));
}
BENCHMARK(BM_TokenizeAnswerDecode)->Unit(benchmark::kMillisecond);

void BM_LookupOnly(benchmark::State& state) {
  const auto tokens = prompt_tokens();
  const auto inventories = fleet(tokens);
  std::vector<const ev::Inventory*> inv;
  for (const auto& i : inventories) inv.push_back(i.get());
  std::vector<std::optional<uint32_t>> out(inv.size());
  for (auto _ : state) {
    ev::lookup(inv, ev::ExactRequest{tokens, {}, {}}, out);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_LookupOnly)->Unit(benchmark::kMicrosecond);

}  // namespace
