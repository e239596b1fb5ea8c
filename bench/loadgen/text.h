// loadgen/text: deterministic randomness and pseudo-text for ramjet-bench workloads, plus the JSON
// string escaping the request builders need. Pure: no clocks, no I/O, no global state.
// Prompts are built in workload.*; this file only knows words and bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ramjet::bench {

// splitmix64 finaliser: a good 64-bit mixer, used to derive independent streams from a seed.
uint64_t mix64(uint64_t x);
inline uint64_t derive(uint64_t seed, uint64_t a, uint64_t b = 0) {
  return mix64(mix64(seed ^ 0x9e3779b97f4a7c15ull) + mix64(a + 0x632be59bd9b4e019ull) + b);
}

// A small deterministic generator (splitmix64). Never seeded from the clock.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next();
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  double uniform();                   // [0, 1)
  double exponential(double rate);    // inter-arrival time of a Poisson process, rate > 0

 private:
  uint64_t s_;
};

// Pseudo-text: words of at most three letters, each written with one leading space (" the"),
// so every word is exactly one token for ramjet-sim's tokenizer (a word with its leading space,
// cut into 4-byte pieces) and almost always one token for BPE tokenizers.
inline constexpr size_t kVocabSize = 128;
std::string_view vocab_word(size_t i);

// Appends `words` words drawn from `seed`. The same seed always yields the same words, and
// the first k words of a longer draw equal a draw of k words (prefix stability).
void append_words(std::string& out, uint64_t seed, size_t words);
// Appends whole words until at least `bytes` bytes were appended.
void append_text_bytes(std::string& out, uint64_t seed, size_t bytes);

// JSON string literal (with quotes) of `s`; control characters become \uXXXX.
void append_json_string(std::string& out, std::string_view s);
// Decodes the body of a JSON string literal (between the quotes) and appends it to `out`.
// Returns false on a malformed escape (out then holds what was decoded so far).
bool append_json_unescaped(std::string& out, std::string_view escaped);

}  // namespace ramjet::bench
