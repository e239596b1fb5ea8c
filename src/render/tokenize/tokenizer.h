// render::Tokenizer: a HuggingFace tokenizer.json (byte-level BPE) loaded once and used to
// encode text exactly as the Rust `tokenizers` crate (what vLLM runs) does:
//   1. added tokens are cut out first (non-normalized ones on the raw text, then the normalized
//      ones on each normalized piece), leftmost-longest, with their single_word/lstrip/rstrip
//      rules;
//   2. the normalizer (NFC/NFKC/NFD/NFKD via utf8proc, or none) runs on the remaining pieces;
//   3. the pre-tokenizer (a Sequence of Split (PCRE2 with JIT) and ByteLevel) cuts them into
//      words;
//   4. each word goes through BPE: bytes -> ids, then merges by rank (lowest first, leftmost
//      among equal ranks) with a binary heap, and a per-thread word cache.
// Only the configurations these models use are accepted; anything else is a typed
// TokenizerError at load time, never a crash. encode() is thread-safe (per-thread scratch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ramjet::render {

enum class TokenizerErrc {
  kIo,           // the file could not be read
  kTooLarge,     // a TokenizerLimits bound was exceeded
  kBadJson,      // not JSON, or a field of the wrong type
  kMissing,      // a required field is absent
  kUnsupported,  // a model/normalizer/pre-tokenizer type or option this tokenizer does not run
  kBadRegex,     // a Split pattern PCRE2 rejects
  kBadVocab,     // duplicate/out-of-range ids, merges naming tokens not in the vocabulary
  kBadInput,     // encode(): text that is not valid UTF-8
};

std::string_view to_string(TokenizerErrc code);

struct TokenizerError {
  TokenizerErrc code;
  std::string message;  // never contains input text
};

template <typename T>
using TokResult = ramjet::Result<T, TokenizerError>;

struct TokenizerLimits {
  size_t max_file_bytes = 64u << 20;    // tokenizer.json / override file size
  size_t max_vocab = 1u << 20;          // model vocabulary entries (and largest id + 1)
  size_t max_merges = 1u << 20;         // merge rules
  size_t max_added_tokens = 1u << 16;   // added_tokens entries
  size_t max_token_bytes = 1024;        // bytes in one vocabulary/added token
  size_t max_pre_tokenizers = 16;       // steps of a pre-tokenizer Sequence (and normalizers)
  size_t max_pattern_bytes = 4096;      // a Split regex
  size_t max_input_bytes = 16u << 20;   // encode() input
};

class Tokenizer {
 public:
  // Loads a tokenizer.json document. `added_tokens_override`, when given, is a JSON document
  // {"added_tokens": [{"id", "content", "single_word", "lstrip", "rstrip", "normalized",
  // "special"}, ...]} whose entries replace the tokenizer's added_tokens entries of the same id
  // (the DeepSeek-V3.1 file in testdata is one).
  static TokResult<std::shared_ptr<const Tokenizer>> from_json(
      std::string_view json, const TokenizerLimits& limits = {},
      std::optional<std::string_view> added_tokens_override = std::nullopt);
  static TokResult<std::shared_ptr<const Tokenizer>> from_file(
      const std::string& path, const TokenizerLimits& limits = {},
      const std::string& added_tokens_override_path = {});

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text` (UTF-8). add_special_tokens adds what a TemplateProcessing
  // post-processor would add around a single sequence (nothing for ByteLevel ones).
  TokResult<std::vector<uint32_t>> encode(std::string_view text,
                                          bool add_special_tokens = false) const;
  // Appends to `out` (no allocation of a result vector); same semantics as encode().
  std::optional<TokenizerError> encode_into(std::string_view text, std::vector<uint32_t>& out,
                                            bool add_special_tokens = false) const;

  // Bytes of the ids (ByteLevel decoder); invalid UTF-8 is replaced with U+FFFD like HF.
  std::string decode(const std::vector<uint32_t>& ids, bool skip_special_tokens = false) const;

  std::optional<uint32_t> token_to_id(std::string_view token) const;  // added, then model
  std::optional<std::string> id_to_token(uint32_t id) const;          // as in the JSON
  size_t vocab_size() const;            // model vocabulary entries
  size_t added_tokens() const;          // distinct added tokens
  // Added tokens whose id, assigned as HF assigns it (model id, else the next free id in list
  // order), differs from the id written in the JSON. HF only warns about these; so do we.
  size_t added_id_mismatches() const;
  // Whether a special or added token can begin at a byte of a text; used to find places where
  // tokenization cannot merge across (the text before an added token encodes independently).
  bool is_added_token_id(uint32_t id) const;

  // Where a text can be encoded in two parts (render::SessionCache). A cut of `text` is the
  // byte offset right after an added token that step 1 cuts out of the raw text, whose rstrip
  // and single_word are false, and at which no single_word added token match begins. At a cut
  // c, encode(text) == encode(text[0, c)) ++ encode(text[c, end)): the added-token pass over
  // each part finds exactly the matches it finds there in the whole text, and every later step
  // works on the pieces between added tokens. Cuts depend on the whole text: a cut of a text
  // need not be one of a longer text that starts with it (an added token may reach across).
  struct Cut {
    size_t byte = 0;  // offset in the text
    size_t ids = 0;   // the number of ids of encode(text[0, byte))
  };
  // Appends the cuts of `text` in order (ids left 0) without encoding; the same input checks
  // as encode().
  std::optional<TokenizerError> find_cuts(std::string_view text, std::vector<Cut>& cuts) const;
  // encode_into(text, out) that also appends the cuts of `text`, with their ids counted from the
  // first id this call appends.
  std::optional<TokenizerError> encode_with_cuts(std::string_view text, std::vector<uint32_t>& out,
                                                 std::vector<Cut>& cuts) const;
  // How far past a cut the bytes that make it one reach: a cut c of a text is a cut of every
  // text that has the same first c + cut_reach() bytes, with the same ids before it. So a text
  // that shares a prefix of p bytes with an encoded one reuses its cuts up to p - cut_reach()
  // (render::TurnCache) without scanning the prefix again.
  size_t cut_reach() const;
  // TokenizerLimits::max_input_bytes: the longest text encode() takes.
  size_t max_input_bytes() const;
  // What add_special_tokens puts before and after the ids of a sequence; kUnsupported when
  // encode() cannot apply the post-processor.
  std::optional<TokenizerError> special_ids_around(std::vector<uint32_t>& before,
                                                   std::vector<uint32_t>& after) const;
  // A number no other tokenizer loaded by this process has (caches of ids key on it).
  uint64_t serial() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The ByteLevel byte<->unicode map (GPT-2): printable Latin-1 bytes map to themselves, the
// others to U+0100 onwards.
uint32_t byte_to_unicode(uint8_t b);
std::optional<uint8_t> unicode_to_byte(uint32_t cp);

}  // namespace ramjet::render
