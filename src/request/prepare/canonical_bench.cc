// Microbenchmark for the preparation budget of issue 4: parse + shims + canonical + fingerprints
// must stay within 2x a bare simdjson parse of the same 256 KiB and 2 MiB chat bodies. Every
// piece is measured on its own in one run so the ratios can be read off directly:
//   BM_SimdjsonParse         the yardstick (dom::parser reused, as a server would)
//   BM_BoostParse            the Boost.JSON parse the Boost path of prepare() does
//   BM_Prepare               prepare(): parse + shims + facts (+ one body copy, see BM_CopyBody)
//   BM_PrepareFingerprinted  prepare() with fingerprints on, what a prefix-policy request pays:
//                            json_tape parse + facts + canonical bytes + XXH3 chain (+ body copy)
//   BM_PrepareFingerprintedReference  the same through the frozen Boost-only implementation
//                            (test/oracle/prepare_reference.cc), the "before" in the same run
//   BM_Fingerprint           canonical bytes streamed into the XXH3 chain, from a parsed value
//   BM_ChainOnly             the chained XXH3 over the canonical bytes alone
//   BM_ReferenceFnvChain     the reference's chained FNV-1a (ramjet 0.4.0) over the same bytes: the
//                            chain before 43884d1, kept as the same-run baseline of BM_ChainOnly
//   BM_ParseAndFingerprint   Boost parse + canonical + fingerprints (one parse, no shims)
//   BM_CopyBody              the body copy BM_Prepare pays
#include <benchmark/benchmark.h>

#include <simdjson.h>
#include <array>
#include <boost/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "request/prepare/canonical.h"
#include "request/prepare/prepare.h"
#include "oracle/prepare_reference.h"  // test/oracle: the frozen Boost-only prepare()

namespace {

namespace json = boost::json;
using ramjet::request::Endpoint;

constexpr const char* kFiller =
    "The service proxies streaming completions to several engines and keeps per-engine load. "
    "Latency at the 99th percentile matters more than the mean, so \"measure\" before tuning.\n";

// A chat body of about `target` bytes: system prompt, tools, alternating user/assistant turns.
std::string chat_body(size_t target) {
  std::string b = R"({"model":"bench-model","messages":[)";
  b += R"({"role":"system","content":"You are a careful senior software engineer."})";
  size_t turn = 0;
  while (b.size() + 512 < target) {
    std::string text;
    const size_t want = std::min<size_t>(target - b.size() - 400, 1500);
    while (text.size() < want) text += kFiller;
    text.resize(want);
    std::string escaped;
    for (char c : text) {
      if (c == '"')
        escaped += "\\\"";
      else if (c == '\n')
        escaped += "\\n";
      else
        escaped += c;
    }
    b += turn % 2 == 0 ? R"(,{"role":"user","content":")" : R"(,{"role":"assistant","content":")";
    b += escaped + "\"}";
    ++turn;
  }
  b +=
      R"(],"tools":[{"type":"function","function":{"name":"lookup","description":"Find a record",)"
      R"("parameters":{"type":"object","properties":{"id":{"type":"string"},"limit":{"type":"integer"}}}}}],)"
      R"("temperature":0.7,"top_p":0.95,"stream":true,"max_tokens":256})";
  return b;
}

json::value boost_parse(const std::string& body, json::monotonic_resource& mr) {
  return json::parse(body, json::storage_ptr(&mr));
}

void bytes_processed(benchmark::State& state, const std::string& body) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(body.size()));
  state.counters["body_bytes"] = static_cast<double>(body.size());
}

void BM_SimdjsonParse(benchmark::State& state) {
  const std::string body = chat_body(static_cast<size_t>(state.range(0)));
  simdjson::padded_string padded(body);
  simdjson::dom::parser parser;
  for (auto _ : state) {
    simdjson::dom::element doc;
    auto error = parser.parse(padded).get(doc);
    if (error) {
      state.SkipWithError("simdjson parse failed");
      return;
    }
    benchmark::DoNotOptimize(doc);
  }
  bytes_processed(state, body);
}

void BM_BoostParse(benchmark::State& state) {
  const std::string body = chat_body(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    std::array<unsigned char, 4096> arena;
    json::monotonic_resource mr(arena.data(), arena.size());
    json::value v = boost_parse(body, mr);
    benchmark::DoNotOptimize(v);
  }
  bytes_processed(state, body);
}

void BM_Prepare(benchmark::State& state) {
  const std::string body = chat_body(static_cast<size_t>(state.range(0)));
  const ramjet::request::PrepareConfig config;
  for (auto _ : state) {
    auto prepared = ramjet::request::prepare(Endpoint::kChat, body, config);
    benchmark::DoNotOptimize(prepared);
  }
  bytes_processed(state, body);
}

ramjet::request::PrepareConfig fingerprinted() {
  ramjet::request::PrepareConfig config;
  config.fingerprint = true;
  return config;
}

void BM_PrepareFingerprinted(benchmark::State& state) {
  const std::string body = chat_body(static_cast<size_t>(state.range(0)));
  const ramjet::request::PrepareConfig config = fingerprinted();
  const uint64_t fast_before = ramjet::request::detail::fast_path_count();
  const auto check = ramjet::request::prepare(Endpoint::kChat, body, config);
  if (check.fingerprints.raw_fallback || check.fingerprints.chain.empty() || check.rewritten) {
    state.SkipWithError("the generated body did not canonicalise");
    return;
  }
  if (ramjet::request::detail::fast_path_count() != fast_before + 1) {
    state.SkipWithError("prepare() did not take the fast path");
    return;
  }
  for (auto _ : state) {
    auto prepared = ramjet::request::prepare(Endpoint::kChat, body, config);
    benchmark::DoNotOptimize(prepared);
  }
  bytes_processed(state, body);
}

void BM_PrepareFingerprintedReference(benchmark::State& state) {
  const std::string body = chat_body(static_cast<size_t>(state.range(0)));
  const ramjet::request::PrepareConfig config = fingerprinted();
  for (auto _ : state) {
    auto prepared = ramjet::request::reference::prepare_reference(Endpoint::kChat, body, config);
    benchmark::DoNotOptimize(prepared);
  }
  bytes_processed(state, body);
}

void BM_Fingerprint(benchmark::State& state) {
  const std::string body = chat_body(static_cast<size_t>(state.range(0)));
  const json::value root = json::parse(body);
  const ramjet::request::FingerprintConfig config;
  const auto check = fingerprint_request(Endpoint::kChat, root, body, config);
  if (check.raw_fallback || check.chain.empty()) {
    state.SkipWithError("the generated body did not canonicalise");
    return;
  }
  for (auto _ : state) {
    auto fp = fingerprint_request(Endpoint::kChat, root, body, config);
    benchmark::DoNotOptimize(fp);
  }
  bytes_processed(state, body);
  state.counters["canonical_bytes"] = static_cast<double>(check.canonical_bytes);
  state.counters["blocks"] = static_cast<double>(check.chain.size());
}

void BM_ChainOnly(benchmark::State& state) {
  const std::string body = chat_body(static_cast<size_t>(state.range(0)));
  const std::string canonical = ramjet::request::canonical_prompt_bytes(
      json::parse(body), body, ramjet::request::FingerprintConfig{});
  for (auto _ : state) {
    auto chain = ramjet::request::chain_fingerprints(canonical, 2048);
    benchmark::DoNotOptimize(chain);
  }
  bytes_processed(state, body);
}

void BM_ReferenceFnvChain(benchmark::State& state) {
  const std::string body = chat_body(static_cast<size_t>(state.range(0)));
  const std::string canonical = ramjet::request::canonical_prompt_bytes(
      json::parse(body), body, ramjet::request::FingerprintConfig{});
  for (auto _ : state) {
    auto chain = ramjet::request::reference::reference_fnv_chain(canonical, 2048);
    benchmark::DoNotOptimize(chain);
  }
  bytes_processed(state, body);
}

void BM_ParseAndFingerprint(benchmark::State& state) {
  const std::string body = chat_body(static_cast<size_t>(state.range(0)));
  const ramjet::request::FingerprintConfig config;
  for (auto _ : state) {
    std::array<unsigned char, 4096> arena;
    json::monotonic_resource mr(arena.data(), arena.size());
    json::value root = boost_parse(body, mr);
    auto fp = fingerprint_request(Endpoint::kChat, root, body, config);
    benchmark::DoNotOptimize(fp);
  }
  bytes_processed(state, body);
}

void BM_CopyBody(benchmark::State& state) {
  const std::string body = chat_body(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    std::string copy = body;
    benchmark::DoNotOptimize(copy);
  }
  bytes_processed(state, body);
}

}  // namespace

#define RAMJET_SIZES Arg(16 << 10)->Arg(256 << 10)->Arg(2 << 20)->Unit(benchmark::kMicrosecond)
BENCHMARK(BM_SimdjsonParse)->RAMJET_SIZES;
BENCHMARK(BM_BoostParse)->RAMJET_SIZES;
BENCHMARK(BM_Prepare)->RAMJET_SIZES;
BENCHMARK(BM_PrepareFingerprinted)->RAMJET_SIZES;
BENCHMARK(BM_PrepareFingerprintedReference)->RAMJET_SIZES;
BENCHMARK(BM_Fingerprint)->RAMJET_SIZES;
BENCHMARK(BM_ChainOnly)->RAMJET_SIZES;
BENCHMARK(BM_ReferenceFnvChain)->RAMJET_SIZES;
BENCHMARK(BM_ParseAndFingerprint)->RAMJET_SIZES;
BENCHMARK(BM_CopyBody)->RAMJET_SIZES;
