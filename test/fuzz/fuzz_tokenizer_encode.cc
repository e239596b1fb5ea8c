// Fuzz target for render::Tokenizer::encode on the real Qwen3 and DeepSeek-V3 tokenizers
// (test/data/testdata; a small built-in byte-level tokenizer when that is absent). Input bytes
// are untrusted request text. Checked: invalid UTF-8 is a typed error; valid UTF-8 always
// encodes; every id is a known token; without a normalizer (DeepSeek) decode(encode(x)) == x;
// encoding is deterministic (a second call, which hits the word cache, gives the same ids).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

#include "render/tokenize/tokenizer.h"

#ifndef RAMJET_TESTDATA_DIR
#define RAMJET_TESTDATA_DIR "test/data/testdata"
#endif

namespace {

using ramjet::render::Tokenizer;

void check(bool ok) {
  if (!ok) std::abort();
}

std::shared_ptr<const Tokenizer> load(const char* rel) {
  const std::filesystem::path p = std::filesystem::path(RAMJET_TESTDATA_DIR) / rel;
  if (std::filesystem::exists(p)) {
    auto t = Tokenizer::from_file(p.string());
    check(t.ok());
    return *t;
  }
  // Fallback: bytes only, GPT-2 regex, one special token.
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string tok;
    const uint32_t cp = ramjet::render::byte_to_unicode(static_cast<uint8_t>(b));
    if (cp == '"' || cp == '\\') tok = std::string("\\") + static_cast<char>(cp);
    else if (cp < 0x80) tok = std::string(1, static_cast<char>(cp));
    else tok = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    vocab += (b ? ",\"" : "\"") + tok + "\":" + std::to_string(b);
  }
  const std::string json =
      R"({"added_tokens":[{"id":256,"content":"<|im_end|>","special":true,"normalized":false}],)"
      R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},"model":{"vocab":{)" +
      vocab + R"(},"merges":[]}})";
  auto t = Tokenizer::from_json(json);
  check(t.ok());
  return *t;
}

struct Models {
  std::shared_ptr<const Tokenizer> qwen = load("models/qwen3/tokenizer.json");
  std::shared_ptr<const Tokenizer> deepseek = load("models/deepseek-v3/tokenizer.json");
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Models models;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = simdjson::validate_utf8(text.data(), text.size());
  for (const auto& tok : {models.qwen, models.deepseek}) {
    auto ids = tok->encode(text);
    check(ids.ok() == valid);
    if (!valid) {
      check(ids.error().code == ramjet::render::TokenizerErrc::kBadInput);
      continue;
    }
    for (const uint32_t id : *ids) check(tok->id_to_token(id).has_value());
    auto again = tok->encode(text);
    check(again.ok() && *again == *ids);
    if (tok == models.deepseek) check(tok->decode(*ids) == text);
  }
  return 0;
}
