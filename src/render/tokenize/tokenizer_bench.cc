// Google Benchmark of render::Tokenizer::encode (Qwen3 tokenizer) on ~4K, 20K and 80K-token
// texts. The texts come from $RAMJET_TOKENIZER_TEXTS/{4k,20k,80k}.txt when set (the files
// test/oracle/tokenizer_bench.mjs writes, so the npm oracle times the same bytes in the same
// run); otherwise they are built the same way: the goldens' chat renderings and tokenizer texts
// concatenated, in file order and repeated, until the token count is reached.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <simdjson.h>

#include "render/tokenize/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using ramjet::render::Tokenizer;

const fs::path kTestdata = RAMJET_TESTDATA_DIR;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

const Tokenizer& qwen() {
  static const auto tok = [] {
    auto t = Tokenizer::from_file(kTestdata / "models/qwen3/tokenizer.json");
    if (!t) {
      std::fprintf(stderr, "cannot load the Qwen3 tokenizer: %s\n", t.error().message.c_str());
      std::exit(1);
    }
    return *t;
  }();
  return *tok;
}

// Golden texts in a fixed order (the same order tokenizer_bench.mjs uses).
std::vector<std::string> golden_texts() {
  std::vector<std::string> out;
  simdjson::dom::parser parser;
  for (const auto& [file, key] : std::vector<std::pair<const char*, const char*>>{
           {"qwen3.jsonl", "rendered"}, {"deepseek-v3.1.jsonl", "rendered"},
           {"qwen3-tokenize.jsonl", "text"}, {"deepseek-v3-tokenize.jsonl", "text"}}) {
    std::ifstream in(kTestdata / "goldens" / file);
    std::string line;
    while (std::getline(in, line)) {
      std::string_view text;
      if (parser.parse(line)[key].get_string().get(text) == simdjson::SUCCESS) {
        out.emplace_back(text);
      }
    }
  }
  return out;
}

std::string text_of(size_t tokens, const char* name) {
  if (const char* dir = std::getenv("RAMJET_TOKENIZER_TEXTS")) {
    return read(fs::path(dir) / (std::string(name) + ".txt"));
  }
  static const std::vector<std::string> parts = golden_texts();
  std::string text;
  size_t count = 0;
  for (size_t i = 0; count < tokens; i = (i + 1) % parts.size()) {
    text += parts[i];
    text += "\n";
    count += qwen().encode(parts[i] + "\n")->size();
  }
  return text;
}

void encode(benchmark::State& state, size_t tokens, const char* name) {
  const std::string text = text_of(tokens, name);
  const Tokenizer& tok = qwen();
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    ids.clear();
    if (tok.encode_into(text, ids)) state.SkipWithError("encode failed");
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["tokens"] = static_cast<double>(ids.size());
  state.counters["bytes"] = static_cast<double>(text.size());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}

BENCHMARK_CAPTURE(encode, 4k, 4000, "4k")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode, 20k, 20000, "20k")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode, 80k, 80000, "80k")->Unit(benchmark::kMillisecond);

// Loading the Qwen3 tokenizer.json (11 MB) from memory.
void load(benchmark::State& state) {
  const std::string json = read(kTestdata / "models/qwen3/tokenizer.json");
  for (auto _ : state) {
    auto t = Tokenizer::from_json(json);
    benchmark::DoNotOptimize(t.ok());
  }
}
BENCHMARK(load)->Unit(benchmark::kMillisecond);

}  // namespace
