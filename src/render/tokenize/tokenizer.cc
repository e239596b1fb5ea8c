// render::Tokenizer: see tokenizer.h for the pipeline. Semantics follow the Rust `tokenizers`
// crate (0.22, what vLLM uses); references to "HF" below mean that crate's behaviour.
#include "render/tokenize/tokenizer.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <unordered_set>
#include <utility>

#include <boost/unordered/unordered_flat_map.hpp>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <simdjson.h>
#include <utf8proc.h>

#include "common/utf8.h"

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

namespace ramjet::render {

std::string_view to_string(TokenizerErrc code) {
  switch (code) {
    case TokenizerErrc::kIo: return "io";
    case TokenizerErrc::kTooLarge: return "too_large";
    case TokenizerErrc::kBadJson: return "bad_json";
    case TokenizerErrc::kMissing: return "missing";
    case TokenizerErrc::kUnsupported: return "unsupported";
    case TokenizerErrc::kBadRegex: return "bad_regex";
    case TokenizerErrc::kBadVocab: return "bad_vocab";
    case TokenizerErrc::kBadInput: return "bad_input";
  }
  return "unknown";
}

namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

TokenizerError err(TokenizerErrc code, std::string message) {
  return TokenizerError{code, std::move(message)};
}

// ---------------------------------------------------------------------------------------------
// ByteLevel byte <-> unicode map.

struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 0x144> from_cp{};  // -1 when the code point is not in the alphabet
  ByteMap() {
    from_cp.fill(-1);
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = printable ? b : 256 + n++;
    }
    for (uint32_t b = 0; b < 256; ++b) from_cp[to_cp[b]] = static_cast<int16_t>(b);
  }
};
const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

// ---------------------------------------------------------------------------------------------
// UTF-8 helpers (input already validated).

// Decodes the code point at s[i] (valid UTF-8), returning it and advancing i.
uint32_t next_cp(std::string_view s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  uint32_t cp = c & (0x3F >> (len - 1));
  for (int k = 1; k < len && i + k < s.size(); ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  }
  i += static_cast<size_t>(len);
  return cp;
}

// The code point ending at s[i-1]; moves i back to its first byte.
uint32_t prev_cp(std::string_view s, size_t& i) {
  size_t j = i - 1;
  while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
  size_t k = j;
  const uint32_t cp = next_cp(s, k);
  i = j;
  return cp;
}


// Rust char::is_whitespace / regex \s: the Unicode White_Space property.
bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Rust regex \w: Alphabetic, M, Nd, Pc, Join_Control. Alphabetic is approximated by the letter
// categories, Nl and the Other_Alphabetic symbols (circled/squared letters).
bool is_word_char(uint32_t cp) {
  if (cp < 0x80) return std::isalnum(static_cast<int>(cp)) != 0 || cp == '_';
  if (cp == 0x200C || cp == 0x200D) return true;
  if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
      (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189)) {
    return true;
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// Like Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes U+FFFD.
std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    size_t k = 1;
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    if (const size_t len = utf8_sequence(p + i, p + s.size(), &k)) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      i += k;
    }
  }
  return out;
}

// Converts a byte-level token string (its JSON form) to raw bytes; nullopt when one of its
// characters is outside the ByteLevel alphabet.
std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  const auto& map = byte_map();
  while (i < token.size()) {
    const uint32_t cp = next_cp(token, i);
    if (cp >= map.from_cp.size() || map.from_cp[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(map.from_cp[cp]));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Hash maps keyed by string views into an arena.

struct SvHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
struct SvEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const noexcept { return a == b; }
};
using SvMap = boost::unordered_flat_map<std::string_view, uint32_t, SvHash, SvEq>;
using StrMap = boost::unordered_flat_map<std::string, uint32_t, SvHash, SvEq>;

// ---------------------------------------------------------------------------------------------
// Normalizers.

enum class NormForm { kNfc, kNfd, kNfkc, kNfkd };

std::string normalize_one(std::string_view s, NormForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case NormForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                   static_cast<utf8proc_ssize_t>(s.size()),
                   &out, static_cast<utf8proc_option_t>(options));
  if (n < 0) {  // cannot happen on valid UTF-8; keep the text as is
    return std::string(s);
  }
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

bool is_ascii(std::string_view s) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// normalize_one on the non-ASCII runs only. Exact: an ASCII character is a starter that never
// composes with what precedes it and blocks reordering, so the text splits before each one
// without changing any normal form; each non-ASCII run is normalized together with the ASCII
// character before it (a base that a combining mark may compose with, e + U+0301 -> é). Prompts
// are mostly ASCII with a few non-ASCII characters, which then cost their runs, not the text.
std::string normalize_runs(std::string_view s, NormForm form) {
  std::string out;
  out.reserve(s.size());
  const auto non_ascii = [&](size_t k) { return static_cast<unsigned char>(s[k]) >= 0x80; };
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    while (j < s.size() && !non_ascii(j)) ++j;
    if (j == s.size()) {
      out.append(s.substr(i));
      break;
    }
    const size_t seg = j > i ? j - 1 : j;
    out.append(s.substr(i, seg - i));
    size_t k = j;
    while (k < s.size() && non_ascii(k)) ++k;
    out += normalize_one(s.substr(seg, k - seg), form);
    i = k;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Regex (PCRE2 + JIT) with the find_iter semantics of the onig crate that HF uses.

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Code points that Oniguruma (Unicode 16, inside the tokenizers crate) puts in a general category
// where PCRE2 10.42's older tables have none: generated by test/oracle/unicode_delta.mjs.
struct UnicodeAdd {
  char cls;
  uint32_t first, last;
};
constexpr UnicodeAdd kUnicodeAdds[] = {
#define RJ_UNICODE_ADD(c, a, b) {c, a, b},
#define RJ_UNICODE_REMOVE(c, a, b)
#include "render/tokenize/unicode_delta.inc"
#undef RJ_UNICODE_ADD
#undef RJ_UNICODE_REMOVE
};

// The extra ranges of general category `cls` as class items ("\x{1C89}-\x{1C8A}...").
std::string unicode_adds(char cls) {
  std::string out;
  for (const UnicodeAdd& a : kUnicodeAdds) {
    if (a.cls != cls) continue;
    char buf[48];
    std::snprintf(buf, sizeof(buf), "\\x{%X}-\\x{%X}", a.first, a.last);
    out += buf;
  }
  return out;
}

// Makes a pattern written for Oniguruma behave the same under PCRE2:
// * Oniguruma's \s also matches U+0085 (NEL); PCRE2's (with UCP) does not: \s and \S get it.
// * \p{L|M|N|P|S} get the code points Oniguruma's newer Unicode tables assign to them.
// Everything else is passed through.
std::string onig_compat(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  int class_depth = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        out += class_depth > 0 ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (n == 'S' && class_depth == 0) {
        out += "[^\\s\\x{85}]";
      } else if ((n == 'p' || n == 'P') && i + 4 < p.size() && p[i + 2] == '{' &&
                 p[i + 4] == '}' && std::string_view("LMNPS").find(p[i + 3]) != std::string_view::npos &&
                 !(n == 'P' && class_depth > 0)) {
        const std::string adds = unicode_adds(p[i + 3]);
        const std::string item = std::string("\\p{") + p[i + 3] + "}" + adds;
        if (class_depth > 0) {
          out += item;
        } else {
          out += (n == 'P' ? "[^" : "[") + item + "]";
        }
        i += 4;
        continue;
      } else if ((n == 'p' || n == 'P' || n == 'x') && i + 2 < p.size() && p[i + 2] == '{') {
        const size_t close = p.find('}', i + 2);
        const size_t end = close == std::string_view::npos ? p.size() : close + 1;
        out.append(p.substr(i, end - i));
        i = end - 1;
        continue;
      } else {
        out.push_back(c);
        out.push_back(n);
      }
      ++i;
      continue;
    }
    if (c == '[') {
      ++class_depth;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') {
        out.push_back('^');
        ++i;
      }
      if (i + 1 < p.size() && p[i + 1] == ']') {
        out.push_back(']');
        ++i;
      }
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out.push_back(c);
  }
  return out;
}

struct Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  Regex() = default;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  Regex(Regex&& o) noexcept : code(std::exchange(o.code, nullptr)), jit(o.jit) {}
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

TokResult<Regex> compile_regex(std::string_view pattern, bool literal, const TokenizerLimits& lim) {
  if (pattern.size() > lim.max_pattern_bytes) {
    return err(TokenizerErrc::kTooLarge, "Split pattern longer than max_pattern_bytes");
  }
  const std::string translated = literal ? std::string(pattern) : onig_compat(pattern);
  int errcode = 0;
  PCRE2_SIZE erroffset = 0;
  uint32_t options = PCRE2_UTF | PCRE2_NO_UTF_CHECK;
  if (literal) {
    options |= PCRE2_LITERAL;
  } else {
    options |= PCRE2_UCP | PCRE2_MULTILINE;  // Ruby syntax: ^ and $ are line anchors
  }
  Regex re;
  re.code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                          options, &errcode, &erroffset, nullptr);
  if (!re.code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(errcode, buf, sizeof(buf));
    return err(TokenizerErrc::kBadRegex, std::string("Split pattern: ") +
                                             reinterpret_cast<const char*>(buf) + " at offset " +
                                             std::to_string(erroffset));
  }
  re.jit = pcre2_jit_compile(re.code, PCRE2_JIT_COMPLETE) == 0;
  return re;
}

// ---------------------------------------------------------------------------------------------
// Added tokens.

struct AddedDef {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
  uint32_t json_id = 0;
  bool operator==(const AddedDef& o) const {
    return content == o.content && single_word == o.single_word && lstrip == o.lstrip &&
           rstrip == o.rstrip && normalized == o.normalized && special == o.special;
  }
};

// Byte trie with leftmost-longest search (Aho-Corasick MatchKind::LeftmostLongest results).
class Trie {
 public:
  bool empty() const { return nodes_.size() <= 1; }
  void add(std::string_view pattern, uint32_t id) {
    if (pattern.empty()) return;
    if (nodes_.empty()) nodes_.emplace_back();
    uint32_t n = 0;
    for (const char ch : pattern) {
      const auto b = static_cast<uint8_t>(ch);
      uint32_t child = find_child(n, b);
      if (child == 0) {
        child = static_cast<uint32_t>(nodes_.size());
        nodes_.emplace_back();
        nodes_[n].next.emplace_back(b, child);
      }
      n = child;
    }
    if (nodes_[n].id < 0) nodes_[n].id = static_cast<int64_t>(id);  // first pattern wins
    max_len_ = std::max(max_len_, pattern.size());
    const auto b0 = static_cast<uint8_t>(pattern[0]);
    if (!first_[b0]) {
      first_[b0] = true;
      if (n_first_ < kScanBytes) scan_[n_first_] = b0;
      ++n_first_;
    }
  }
  size_t max_len() const { return max_len_; }  // bytes of the longest pattern
  // Leftmost-longest match starting at or after `from`: (start, end, id). Which match it is
  // depends only on s[from, start + max_len()).
  bool find(std::string_view s, size_t from, size_t& ms, size_t& me, uint32_t& id) const {
    if (empty()) return false;
    for (size_t i = from; i < s.size(); ++i) {
      i = next_first(s, i);
      if (i == s.size()) break;
      uint32_t n = 0;
      int64_t best_id = -1;
      size_t best_end = 0;
      for (size_t j = i; j < s.size(); ++j) {
        n = find_child(n, static_cast<uint8_t>(s[j]));
        if (n == 0) break;
        if (nodes_[n].id >= 0) {
          best_id = nodes_[n].id;
          best_end = j + 1;
        }
      }
      if (best_id >= 0) {
        ms = i;
        me = best_end;
        id = static_cast<uint32_t>(best_id);
        return true;
      }
    }
    return false;
  }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, uint32_t>> next;
    int64_t id = -1;
  };
  uint32_t find_child(uint32_t n, uint8_t b) const {
    for (const auto& [k, c] : nodes_[n].next) {
      if (k == b) return c;
    }
    return 0;
  }
  // The first position at or after `i` whose byte starts a pattern (s.size() if none). A text
  // has few of them (every added token of the usual tokenizers starts with one of a few bytes,
  // '<' for most), so with at most kScanBytes first bytes the scan compares 16 bytes at a time.
  size_t next_first(std::string_view s, size_t i) const {
#if defined(__SSE2__)
    if (n_first_ <= kScanBytes) {
      __m128i want[kScanBytes];
      for (size_t k = 0; k < kScanBytes; ++k)
        want[k] = _mm_set1_epi8(static_cast<char>(scan_[k < n_first_ ? k : 0]));
      for (; i + 16 <= s.size(); i += 16) {
        const __m128i chunk = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.data() + i));
        __m128i hit = _mm_cmpeq_epi8(chunk, want[0]);
        for (size_t k = 1; k < kScanBytes; ++k) hit = _mm_or_si128(hit, _mm_cmpeq_epi8(chunk, want[k]));
        if (const int mask = _mm_movemask_epi8(hit)) return i + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(mask)));
      }
    }
#endif
    for (; i < s.size(); ++i)
      if (first_[static_cast<uint8_t>(s[i])]) return i;
    return s.size();
  }
  static constexpr size_t kScanBytes = 4;
  std::vector<Node> nodes_;
  std::array<bool, 256> first_{};
  std::array<uint8_t, kScanBytes> scan_{};  // the distinct first bytes, while there are few
  size_t n_first_ = 0;
  size_t max_len_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Pre-tokenizer steps.

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Step {
  enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
  size_t regex = 0;  // index into Impl::regexes
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;
  bool use_regex = false;
};

constexpr uint32_t kNoId = UINT32_MAX;

}  // namespace

// ---------------------------------------------------------------------------------------------

struct Tokenizer::Impl {
  TokenizerLimits limits;
  uint64_t serial = 0;

  // Model vocabulary: id -> token bytes (decoded from byte-level form; raw when the token has
  // characters outside the ByteLevel alphabet, which BPE can never produce).
  std::string arena;
  std::vector<uint32_t> tok_off;  // per id: offset in arena, UINT32_MAX when the id is unused
  std::vector<uint16_t> tok_len;
  SvMap bytes_to_id;   // decoded bytes -> id (tokens in the alphabet)
  StrMap raw_to_id;    // JSON form -> id (tokens outside the alphabet)
  size_t vocab_entries = 0;
  std::array<uint32_t, 256> byte_id{};  // id of each single-byte token, kNoId when absent
  boost::unordered_flat_map<uint64_t, uint64_t> merges;  // (a<<32|b) -> (rank<<32|new_id)

  bool ignore_merges = false;
  bool fuse_unk = false;
  bool byte_fallback = false;
  std::optional<std::string> unk_token;
  std::array<uint32_t, 256> fallback_id{};  // "<0xXX>" tokens

  // Added tokens.
  StrMap added_map;                                      // content -> id
  boost::unordered_flat_map<uint32_t, AddedDef> added_r;  // id -> latest definition
  std::unordered_set<std::string> special_set;
  Trie raw_trie, norm_trie;
  size_t id_mismatches = 0;

  std::vector<NormForm> normalizers;
  std::vector<Step> steps;
  std::vector<Regex> regexes;

  std::vector<uint32_t> prefix_ids, suffix_ids;  // TemplateProcessing single
  bool post_unsupported = false;

  std::optional<uint32_t> model_token_to_id(std::string_view token) const {
    if (auto bytes = byte_level_to_bytes(token)) {
      auto it = bytes_to_id.find(std::string_view(*bytes));
      if (it != bytes_to_id.end()) return it->second;
      return std::nullopt;
    }
    auto it = raw_to_id.find(token);
    if (it != raw_to_id.end()) return it->second;
    return std::nullopt;
  }
  std::optional<uint32_t> token_to_id(std::string_view token) const {
    auto it = added_map.find(token);
    if (it != added_map.end()) return it->second;
    return model_token_to_id(token);
  }
  std::string_view model_bytes(uint32_t id) const {
    if (id >= tok_off.size() || tok_off[id] == UINT32_MAX) return {};
    return std::string_view(arena).substr(tok_off[id], tok_len[id]);
  }
  bool has_model_id(uint32_t id) const { return id < tok_off.size() && tok_off[id] != UINT32_MAX; }
};

namespace {

// ---------------------------------------------------------------------------------------------
// Per-thread scratch: PCRE2 match state, the BPE word cache and work buffers.

constexpr size_t kCacheMaxWordBytes = 256;
constexpr size_t kCacheCapacity = 16384;

// One tokenizer's word cache: word bytes -> (offset, count) into ids.
struct WordCache {
  uint64_t serial = 0;  // the tokenizer it belongs to (0: free)
  uint64_t used = 0;
  boost::unordered_flat_map<std::string, std::pair<uint32_t, uint32_t>, SvHash, SvEq> map;
  std::vector<uint32_t> ids;
};

struct Scratch {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  // A thread may serve several tokenizers (one per model): one cache each, least recently used
  // replaced.
  std::array<WordCache, 4> caches;
  WordCache* wc = nullptr;
  uint64_t tick = 0;
  struct Sym {
    uint32_t id;
    int32_t prev, next;
    uint32_t len;
  };
  struct Merge {
    uint32_t rank, pos, new_id;
  };
  std::vector<Sym> syms;
  std::vector<Merge> heap;
  Scratch() {
    md = pcre2_match_data_create(1, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
    if (mctx && jit_stack) pcre2_jit_stack_assign(mctx, nullptr, jit_stack);
  }
  ~Scratch() {
    if (md) pcre2_match_data_free(md);
    if (mctx) pcre2_match_context_free(mctx);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

Scratch& scratch_for(uint64_t serial) {
  thread_local Scratch s;
  WordCache* slot = nullptr;
  for (WordCache& c : s.caches) {
    if (c.serial == serial) slot = &c;
  }
  if (!slot) {
    slot = &s.caches[0];
    for (WordCache& c : s.caches) {
      if (c.used < slot->used) slot = &c;
    }
    slot->serial = serial;
    slot->map.clear();
    slot->ids.clear();
  }
  slot->used = ++s.tick;
  s.wc = slot;
  return s;
}

std::atomic<uint64_t> g_serial{1};

// ---------------------------------------------------------------------------------------------
// Encoding.

// Cuts (Tokenizer::Cut) recorded while the raw-text added tokens are split out.
struct CutLog {
  std::vector<Tokenizer::Cut>* cuts = nullptr;
  const std::vector<uint32_t>* out = nullptr;  // the ids so far; nullptr: scan only (ids 0)
  size_t out_base = 0;                         // out->size() when the text began
  size_t first = 0;                            // cuts->size() when the text began
};

// HF AddedVocabulary::find_matches; calls emit(piece, id or kNoId) for non-empty pieces. With a
// log, records each offset right after an emitted token without rstrip and single_word, unless
// a single_word token match starts there: the text before it and the text after it then split
// out their added tokens exactly as the whole text does (Tokenizer::Cut).
template <typename Emit>
void split_added(const Tokenizer::Impl& t, std::string_view s, const Trie& trie, Emit&& emit,
                 CutLog* log = nullptr) {
  if (s.empty()) return;
  if (trie.empty()) {
    emit(s, kNoId);
    return;
  }
  size_t start_offset = 0;
  size_t pos = 0;
  size_t ms = 0, me = 0;
  uint32_t id = 0;
  while (pos < s.size() && trie.find(s, pos, ms, me, id)) {
    pos = me;
    const auto it = t.added_r.find(id);
    if (it == t.added_r.end()) continue;
    const AddedDef& def = it->second;
    if (log && def.single_word && log->cuts->size() > log->first &&
        log->cuts->back().byte == ms) {
      log->cuts->pop_back();  // seen alone, the text after the cut would accept this match
    }
    if (def.single_word) {
      size_t a = ms, b = me;
      const bool start_space = ms == 0 || !is_word_char(prev_cp(s, a));
      const bool stop_space = me == s.size() || !is_word_char(next_cp(s, b));
      if (!start_space || !stop_space) continue;
    }
    size_t start = ms, stop = me;
    if (def.lstrip) {
      size_t k = ms;
      size_t newstart = ms;
      while (k > 0) {
        size_t j = k;
        if (!is_white_space(prev_cp(s, j))) break;
        k = j;
        newstart = j;
      }
      start = std::max(newstart, start_offset);
    }
    if (def.rstrip) {
      size_t k = stop;
      while (k < s.size()) {
        size_t j = k;
        if (!is_white_space(next_cp(s, j))) break;
        k = j;
      }
      stop = k;
    }
    if (start_offset < start) emit(s.substr(start_offset, start - start_offset), kNoId);
    emit(s.substr(start, stop - start), id);
    start_offset = stop;
    if (log && !def.rstrip && !def.single_word) {
      log->cuts->push_back({stop, log->out ? log->out->size() - log->out_base : 0});
    }
  }
  if (start_offset < s.size()) emit(s.substr(start_offset), kNoId);
}

class Encoder {
 public:
  Encoder(const Tokenizer::Impl& t, Scratch& s, std::vector<uint32_t>& out,
          CutLog* log = nullptr)
      : t_(t), s_(s), out_(out), log_(log) {}

  std::optional<TokenizerError> run(std::string_view text) {
    // 1. Non-normalized added tokens on the raw text.
    split_added(t_, text, t_.raw_trie, [&](std::string_view piece, uint32_t id) {
      if (id != kNoId) {
        out_.push_back(id);
        return;
      }
      // 2. Normalizer, then the normalized added tokens.
      std::string normalized;
      std::string_view view = piece;
      if (!t_.normalizers.empty() && !is_ascii(piece)) {
        normalized = std::string(piece);
        for (const NormForm f : t_.normalizers) normalized = normalize_runs(normalized, f);
        view = normalized;
      }
      if (t_.norm_trie.empty()) {
        if (!view.empty()) pre_tokenize(0, view);
        return;
      }
      split_added(t_, view, t_.norm_trie, [&](std::string_view p2, uint32_t id2) {
        if (id2 != kNoId) {
          out_.push_back(id2);
        } else {
          pre_tokenize(0, p2);
        }
      });
    }, log_);
    return error_;
  }

 private:
  // Runs pre-tokenizer step `i` on a non-empty piece.
  void pre_tokenize(size_t i, std::string_view piece) {
    if (error_) return;
    if (i == t_.steps.size()) {
      bpe(piece);
      return;
    }
    const Step& st = t_.steps[i];
    if (st.kind == Step::Kind::kByteLevel) {
      std::string prefixed;
      std::string_view p = piece;
      if (st.add_prefix_space && piece.front() != ' ') {
        prefixed.reserve(piece.size() + 1);
        prefixed.push_back(' ');
        prefixed.append(piece);
        p = prefixed;
      }
      if (st.use_regex) {
        split_isolated(st.regex, p, [&](std::string_view w) { pre_tokenize(i + 1, w); });
      } else {
        pre_tokenize(i + 1, p);
      }
      return;
    }
    switch (st.behavior) {
      case Behavior::kIsolated:
        split_isolated(st.regex, piece, [&](std::string_view w) { pre_tokenize(i + 1, w); });
        return;
      case Behavior::kRemoved:
        for_each_match(st.regex, piece, [&](size_t a, size_t b, bool is_match) {
          if (is_match != st.invert) return;  // removed
          pre_tokenize(i + 1, piece.substr(a, b - a));
        });
        return;
      default:
        break;
    }
    // Merged*/Contiguous: collect the match list first.
    std::vector<std::tuple<size_t, size_t, bool>> m;
    for_each_match(st.regex, piece, [&](size_t a, size_t b, bool is_match) {
      m.emplace_back(a, b, is_match != st.invert);
    });
    std::vector<std::pair<size_t, size_t>> out;
    bool prev = false;
    if (st.behavior == Behavior::kContiguous) {
      for (const auto& [a, b, mm] : m) {
        if (mm == prev && !out.empty()) {
          out.back().second = b;
        } else {
          out.emplace_back(a, b);
        }
        prev = mm;
      }
    } else if (st.behavior == Behavior::kMergedWithPrevious) {
      for (const auto& [a, b, mm] : m) {
        if (mm && !prev && !out.empty()) {
          out.back().second = b;
        } else {
          out.emplace_back(a, b);
        }
        prev = mm;
      }
    } else {  // kMergedWithNext
      for (auto it = m.rbegin(); it != m.rend(); ++it) {
        const auto& [a, b, mm] = *it;
        if (mm && !prev && !out.empty()) {
          out.back().first = a;
        } else {
          out.emplace_back(a, b);
        }
        prev = mm;
      }
      std::reverse(out.begin(), out.end());
    }
    for (const auto& [a, b] : out) {
      if (b > a) pre_tokenize(i + 1, piece.substr(a, b - a));
    }
  }

  // Every match and the text between matches, in order: f(start, end, is_match).
  template <typename F>
  void for_each_match(size_t regex, std::string_view s, F&& f) {
    size_t prev = 0;
    find_iter(regex, s, [&](size_t a, size_t b) {
      if (prev != a) f(prev, a, false);
      f(a, b, true);
      prev = b;
    });
    if (prev != s.size()) f(prev, s.size(), false);
  }

  template <typename F>
  void split_isolated(size_t regex, std::string_view s, F&& f) {
    size_t prev = 0;
    find_iter(regex, s, [&](size_t a, size_t b) {
      if (prev != a) f(s.substr(prev, a - prev));
      if (b > a) f(s.substr(a, b - a));
      prev = b;
    });
    if (prev < s.size()) f(s.substr(prev));
  }

  // onig's FindMatches: an empty match right after the previous match is skipped by advancing
  // one character.
  template <typename F>
  void find_iter(size_t regex, std::string_view s, F&& f) {
    const Regex& re = t_.regexes[regex];
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    size_t last_end = 0;
    bool have_last = false;
    size_t last_match_end = 0;
    while (last_end <= s.size() && !error_) {
      const int rc = re.jit ? pcre2_jit_match(re.code, subject, s.size(), last_end, 0, s_.md,
                                              s_.mctx)
                            : pcre2_match(re.code, subject, s.size(), last_end,
                                          PCRE2_NO_UTF_CHECK, s_.md, s_.mctx);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) {
        error_ = err(TokenizerErrc::kBadInput,
                     "pre-tokenizer regex failed with PCRE2 error " + std::to_string(rc));
        return;
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s_.md);
      const size_t a = ov[0], b = ov[1];
      if (a == b && have_last && last_match_end == b) {
        if (last_end >= s.size()) return;
        size_t k = last_end;
        next_cp(s, k);
        last_end = k;
        continue;
      }
      last_end = b;
      have_last = true;
      last_match_end = b;
      f(a, b);
    }
  }

  // BPE of one pre-token (raw bytes).
  void bpe(std::string_view word) {
    if (word.empty()) return;
    if (t_.ignore_merges) {
      auto it = t_.bytes_to_id.find(word);
      if (it != t_.bytes_to_id.end()) {
        out_.push_back(it->second);
        return;
      }
    }
    if (word.size() == 1 && t_.byte_id[static_cast<uint8_t>(word[0])] != kNoId) {
      out_.push_back(t_.byte_id[static_cast<uint8_t>(word[0])]);
      return;
    }
    const bool cacheable = word.size() <= kCacheMaxWordBytes;
    if (cacheable) {
      auto it = s_.wc->map.find(word);
      if (it != s_.wc->map.end()) {
        const auto [off, n] = it->second;
        out_.insert(out_.end(), s_.wc->ids.begin() + off, s_.wc->ids.begin() + off + n);
        return;
      }
    }
    const size_t before = out_.size();
    if (!merge_word(word)) return;
    if (cacheable) {
      if (s_.wc->map.size() >= kCacheCapacity) {
        s_.wc->map.clear();
        s_.wc->ids.clear();
      }
      const auto off = static_cast<uint32_t>(s_.wc->ids.size());
      s_.wc->ids.insert(s_.wc->ids.end(), out_.begin() + before, out_.end());
      s_.wc->map.emplace(std::string(word),
                       std::make_pair(off, static_cast<uint32_t>(out_.size() - before)));
    }
  }

  bool merge_word(std::string_view word) {
    auto& syms = s_.syms;
    syms.clear();
    auto add = [&](uint32_t id, uint32_t len) {
      const auto n = static_cast<int32_t>(syms.size());
      if (!syms.empty()) syms.back().next = n;
      syms.push_back({id, n - 1, -1, len});
    };
    // Characters (one byte each in byte-level form) to ids, with byte_fallback and unk.
    bool unk = false;  // a pending unk symbol (unk_id, unk_len)
    uint32_t unk_id = 0, unk_len = 0;
    for (const char ch : word) {
      const auto b = static_cast<uint8_t>(ch);
      const uint32_t id = t_.byte_id[b];
      if (id != kNoId) {
        if (unk) {
          add(unk_id, unk_len);
          unk = false;
        }
        add(id, 1);
        continue;
      }
      if (t_.byte_fallback) {
        // HF looks up "<0xXX>" for each UTF-8 byte of the (byte-level) character.
        std::string utf8;
        append_utf8(utf8, byte_map().to_cp[b]);
        bool all = true;
        for (const char u : utf8) all = all && t_.fallback_id[static_cast<uint8_t>(u)] != kNoId;
        if (all) {
          for (const char u : utf8) add(t_.fallback_id[static_cast<uint8_t>(u)], 1);
          continue;
        }
      }
      if (t_.unk_token) {
        const auto id_of_unk = t_.model_token_to_id(*t_.unk_token);
        if (!id_of_unk) {
          error_ = err(TokenizerErrc::kBadVocab, "unk_token is not in the vocabulary");
          return false;
        }
        if (unk && t_.fuse_unk) {
          unk_len += 1;
        } else {
          if (unk) add(unk_id, unk_len);
          unk = true;
          unk_id = *id_of_unk;
          unk_len = 1;
        }
      }
    }
    if (unk) add(unk_id, unk_len);

    // Merges: lowest rank first, leftmost among equal ranks (HF Word::merge_all).
    auto& heap = s_.heap;
    heap.clear();
    const auto cmp = [](const Scratch::Merge& x, const Scratch::Merge& y) {
      return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
    };
    auto lookup = [&](uint32_t a, uint32_t b) -> const uint64_t* {
      const auto it = t_.merges.find((static_cast<uint64_t>(a) << 32) | b);
      return it == t_.merges.end() ? nullptr : &it->second;
    };
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      if (const uint64_t* m = lookup(syms[i].id, syms[i + 1].id)) {
        heap.push_back({static_cast<uint32_t>(*m >> 32), static_cast<uint32_t>(i),
                        static_cast<uint32_t>(*m)});
      }
    }
    std::make_heap(heap.begin(), heap.end(), cmp);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), cmp);
      const Scratch::Merge top = heap.back();
      heap.pop_back();
      Scratch::Sym& cur = syms[top.pos];
      if (cur.len == 0 || cur.next < 0) continue;
      const auto next_pos = static_cast<size_t>(cur.next);
      const Scratch::Sym right = syms[next_pos];
      const uint64_t* m = lookup(cur.id, right.id);
      if (!m || static_cast<uint32_t>(*m) != top.new_id) continue;
      cur.id = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      syms[next_pos].len = 0;
      if (right.next >= 0) syms[static_cast<size_t>(right.next)].prev = static_cast<int32_t>(top.pos);
      if (cur.prev >= 0) {
        if (const uint64_t* pm = lookup(syms[static_cast<size_t>(cur.prev)].id, cur.id)) {
          heap.push_back({static_cast<uint32_t>(*pm >> 32), static_cast<uint32_t>(cur.prev),
                          static_cast<uint32_t>(*pm)});
          std::push_heap(heap.begin(), heap.end(), cmp);
        }
      }
      if (cur.next >= 0) {
        if (const uint64_t* nm = lookup(cur.id, syms[static_cast<size_t>(cur.next)].id)) {
          heap.push_back({static_cast<uint32_t>(*nm >> 32), top.pos, static_cast<uint32_t>(*nm)});
          std::push_heap(heap.begin(), heap.end(), cmp);
        }
      }
    }
    for (const auto& sym : syms) {
      if (sym.len != 0) out_.push_back(sym.id);
    }
    return true;
  }

  const Tokenizer::Impl& t_;
  Scratch& s_;
  std::vector<uint32_t>& out_;
  CutLog* log_ = nullptr;
  std::optional<TokenizerError> error_;
};

// ---------------------------------------------------------------------------------------------
// Loading.

std::optional<std::string_view> get_string(const object& o, std::string_view key) {
  std::string_view v;
  if (o.at_key(key).get_string().get(v) != simdjson::SUCCESS) return std::nullopt;
  return v;
}
bool has_non_null(const object& o, std::string_view key) {
  element e;
  return o.at_key(key).get(e) == simdjson::SUCCESS && !e.is_null();
}
// A boolean field; `fallback` when absent or null; error when another type.
std::optional<TokenizerError> get_bool(const object& o, std::string_view key, bool& out) {
  element e;
  if (o.at_key(key).get(e) != simdjson::SUCCESS || e.is_null()) return std::nullopt;
  bool v = false;
  if (e.get_bool().get(v) != simdjson::SUCCESS) {
    return err(TokenizerErrc::kBadJson, std::string(key) + " is not a boolean");
  }
  out = v;
  return std::nullopt;
}

std::optional<TokenizerError> parse_added(const element& e, AddedDef& def,
                                          const TokenizerLimits& lim) {
  object o;
  if (e.get_object().get(o) != simdjson::SUCCESS) {
    return err(TokenizerErrc::kBadJson, "added token is not an object");
  }
  const auto content = get_string(o, "content");
  if (!content) return err(TokenizerErrc::kMissing, "added token without content");
  if (content->size() > lim.max_token_bytes) {
    return err(TokenizerErrc::kTooLarge, "added token longer than max_token_bytes");
  }
  uint64_t id = 0;
  if (o.at_key("id").get_uint64().get(id) != simdjson::SUCCESS || id > UINT32_MAX) {
    return err(TokenizerErrc::kMissing, "added token without a valid id");
  }
  def.content = std::string(*content);
  def.json_id = static_cast<uint32_t>(id);
  def.special = false;
  if (auto e2 = get_bool(o, "special", def.special)) return e2;
  def.normalized = !def.special;
  for (auto [key, dst] : {std::pair<std::string_view, bool*>{"single_word", &def.single_word},
                          {"lstrip", &def.lstrip}, {"rstrip", &def.rstrip},
                          {"normalized", &def.normalized}}) {
    if (auto e2 = get_bool(o, key, *dst)) return e2;
  }
  return std::nullopt;
}

std::optional<TokenizerError> parse_normalizer(const element& e, std::vector<NormForm>& out,
                                               const TokenizerLimits& lim, int depth) {
  if (e.is_null()) return std::nullopt;
  object o;
  if (e.get_object().get(o) != simdjson::SUCCESS) {
    return err(TokenizerErrc::kBadJson, "normalizer is not an object");
  }
  const auto type = get_string(o, "type");
  if (!type) return err(TokenizerErrc::kMissing, "normalizer without type");
  if (*type == "Sequence") {
    array list;
    if (o.at_key("normalizers").get_array().get(list) != simdjson::SUCCESS) {
      return err(TokenizerErrc::kBadJson, "Sequence normalizer without normalizers");
    }
    if (depth > 4) return err(TokenizerErrc::kTooLarge, "normalizers nested too deeply");
    for (const element child : list) {
      if (auto e2 = parse_normalizer(child, out, lim, depth + 1)) return e2;
    }
  } else if (*type == "NFC") {
    out.push_back(NormForm::kNfc);
  } else if (*type == "NFD") {
    out.push_back(NormForm::kNfd);
  } else if (*type == "NFKC") {
    out.push_back(NormForm::kNfkc);
  } else if (*type == "NFKD") {
    out.push_back(NormForm::kNfkd);
  } else {
    return err(TokenizerErrc::kUnsupported, "normalizer type " + std::string(*type));
  }
  if (out.size() > lim.max_pre_tokenizers) {
    return err(TokenizerErrc::kTooLarge, "too many normalizers");
  }
  return std::nullopt;
}

std::optional<TokenizerError> parse_pre_tokenizer(const element& e, Tokenizer::Impl& t,
                                                  int depth) {
  if (e.is_null()) return std::nullopt;
  object o;
  if (e.get_object().get(o) != simdjson::SUCCESS) {
    return err(TokenizerErrc::kBadJson, "pre_tokenizer is not an object");
  }
  const auto type = get_string(o, "type");
  if (!type) return err(TokenizerErrc::kMissing, "pre_tokenizer without type");
  if (!t.steps.empty() && t.steps.back().kind == Step::Kind::kByteLevel) {
    return err(TokenizerErrc::kUnsupported, "pre-tokenizer steps after ByteLevel");
  }
  if (*type == "Sequence") {
    array list;
    if (o.at_key("pretokenizers").get_array().get(list) != simdjson::SUCCESS) {
      return err(TokenizerErrc::kBadJson, "Sequence pre_tokenizer without pretokenizers");
    }
    if (depth > 4) return err(TokenizerErrc::kTooLarge, "pre-tokenizers nested too deeply");
    for (const element child : list) {
      if (auto e2 = parse_pre_tokenizer(child, t, depth + 1)) return e2;
    }
    return std::nullopt;
  }
  if (t.steps.size() >= t.limits.max_pre_tokenizers) {
    return err(TokenizerErrc::kTooLarge, "too many pre-tokenizer steps");
  }
  Step st;
  if (*type == "ByteLevel") {
    st.kind = Step::Kind::kByteLevel;
    st.add_prefix_space = true;  // HF defaults
    st.use_regex = true;
    if (auto e2 = get_bool(o, "add_prefix_space", st.add_prefix_space)) return e2;
    if (auto e2 = get_bool(o, "use_regex", st.use_regex)) return e2;
    if (st.use_regex) {
      auto re = compile_regex(kGpt2Pattern, false, t.limits);
      if (!re) return re.error();
      st.regex = t.regexes.size();
      t.regexes.push_back(std::move(re).value());
    }
    t.steps.push_back(st);
    return std::nullopt;
  }
  if (*type != "Split") {
    return err(TokenizerErrc::kUnsupported, "pre_tokenizer type " + std::string(*type));
  }
  object pattern;
  if (o.at_key("pattern").get_object().get(pattern) != simdjson::SUCCESS) {
    return err(TokenizerErrc::kBadJson, "Split without a pattern object");
  }
  bool literal = false;
  auto text = get_string(pattern, "Regex");
  if (!text) {
    text = get_string(pattern, "String");
    literal = true;
  }
  if (!text) return err(TokenizerErrc::kBadJson, "Split pattern is neither Regex nor String");
  const auto behavior = get_string(o, "behavior");
  if (!behavior) return err(TokenizerErrc::kMissing, "Split without behavior");
  if (*behavior == "Isolated") {
    st.behavior = Behavior::kIsolated;
  } else if (*behavior == "Removed") {
    st.behavior = Behavior::kRemoved;
  } else if (*behavior == "MergedWithPrevious") {
    st.behavior = Behavior::kMergedWithPrevious;
  } else if (*behavior == "MergedWithNext") {
    st.behavior = Behavior::kMergedWithNext;
  } else if (*behavior == "Contiguous") {
    st.behavior = Behavior::kContiguous;
  } else {
    return err(TokenizerErrc::kBadJson, "unknown Split behavior");
  }
  if (auto e2 = get_bool(o, "invert", st.invert)) return e2;
  auto re = compile_regex(*text, literal, t.limits);
  if (!re) return re.error();
  st.regex = t.regexes.size();
  t.regexes.push_back(std::move(re).value());
  t.steps.push_back(st);
  return std::nullopt;
}

// TemplateProcessing (single sequence) and Sequence of processors; ByteLevel adds nothing.
void parse_post_processor(const element& e, Tokenizer::Impl& t, int depth) {
  if (e.is_null()) return;
  object o;
  if (e.get_object().get(o) != simdjson::SUCCESS || depth > 4) {
    t.post_unsupported = true;
    return;
  }
  const auto type = get_string(o, "type");
  if (!type) {
    t.post_unsupported = true;
  } else if (*type == "ByteLevel") {
  } else if (*type == "Sequence") {
    array list;
    if (o.at_key("processors").get_array().get(list) != simdjson::SUCCESS) {
      t.post_unsupported = true;
      return;
    }
    for (const element child : list) parse_post_processor(child, t, depth + 1);
  } else if (*type == "TemplateProcessing") {
    array single;
    object specials;
    if (o.at_key("single").get_array().get(single) != simdjson::SUCCESS ||
        o.at_key("special_tokens").get_object().get(specials) != simdjson::SUCCESS) {
      t.post_unsupported = true;
      return;
    }
    bool seen_sequence = false;
    for (const element piece : single) {
      object p;
      if (piece.get_object().get(p) != simdjson::SUCCESS) {
        t.post_unsupported = true;
        return;
      }
      object sp;
      if (p.at_key("Sequence").get_object().get(sp) == simdjson::SUCCESS) {
        seen_sequence = true;
        continue;
      }
      if (p.at_key("SpecialToken").get_object().get(sp) != simdjson::SUCCESS) {
        t.post_unsupported = true;
        return;
      }
      const auto name = get_string(sp, "id");
      object tok;
      array ids;
      if (!name || specials.at_key(*name).get_object().get(tok) != simdjson::SUCCESS ||
          tok.at_key("ids").get_array().get(ids) != simdjson::SUCCESS) {
        t.post_unsupported = true;
        return;
      }
      for (const element id : ids) {
        uint64_t v = 0;
        if (id.get_uint64().get(v) != simdjson::SUCCESS || v > UINT32_MAX) {
          t.post_unsupported = true;
          return;
        }
        (seen_sequence ? t.suffix_ids : t.prefix_ids).push_back(static_cast<uint32_t>(v));
      }
    }
  } else {
    t.post_unsupported = true;
  }
}

std::optional<TokenizerError> parse_model(const object& model, Tokenizer::Impl& t) {
  const TokenizerLimits& lim = t.limits;
  if (auto type = get_string(model, "type"); type && *type != "BPE") {
    return err(TokenizerErrc::kUnsupported, "model type " + std::string(*type));
  }
  if (has_non_null(model, "dropout")) {
    return err(TokenizerErrc::kUnsupported, "BPE dropout (non-deterministic)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (auto v = get_string(model, key); v && !v->empty()) {
      return err(TokenizerErrc::kUnsupported, std::string(key) + " in a byte-level BPE");
    }
  }
  if (auto e = get_bool(model, "ignore_merges", t.ignore_merges)) return e;
  if (auto e = get_bool(model, "fuse_unk", t.fuse_unk)) return e;
  if (auto e = get_bool(model, "byte_fallback", t.byte_fallback)) return e;
  if (auto unk = get_string(model, "unk_token")) t.unk_token = std::string(*unk);

  object vocab;
  if (model.at_key("vocab").get_object().get(vocab) != simdjson::SUCCESS) {
    return err(TokenizerErrc::kMissing, "model.vocab object");
  }
  // Pass 1: token bytes into the arena, id -> offset.
  struct Entry {
    uint32_t id;
    uint32_t off;
    uint16_t len;
    bool raw;
  };
  std::vector<Entry> entries;
  entries.reserve(vocab.size());
  for (const auto field : vocab) {
    if (entries.size() >= lim.max_vocab) {
      return err(TokenizerErrc::kTooLarge, "vocabulary larger than max_vocab");
    }
    uint64_t id = 0;
    if (field.value.get_uint64().get(id) != simdjson::SUCCESS) {
      return err(TokenizerErrc::kBadVocab, "vocabulary id is not a non-negative integer");
    }
    if (id >= lim.max_vocab) return err(TokenizerErrc::kTooLarge, "vocabulary id >= max_vocab");
    if (field.key.size() > lim.max_token_bytes) {
      return err(TokenizerErrc::kTooLarge, "vocabulary token longer than max_token_bytes");
    }
    if (field.key.empty()) continue;  // can never be produced nor merged
    const auto off = static_cast<uint32_t>(t.arena.size());
    bool raw = false;
    if (auto bytes = byte_level_to_bytes(field.key)) {
      t.arena += *bytes;
    } else {
      t.arena += field.key;
      raw = true;
    }
    entries.push_back({static_cast<uint32_t>(id), off,
                       static_cast<uint16_t>(t.arena.size() - off), raw});
  }
  t.arena.shrink_to_fit();
  uint32_t max_id = 0;
  for (const Entry& en : entries) max_id = std::max(max_id, en.id);
  t.tok_off.assign(entries.empty() ? 0 : max_id + 1, UINT32_MAX);
  t.tok_len.assign(t.tok_off.size(), 0);
  t.bytes_to_id.reserve(entries.size());
  for (const Entry& en : entries) {  // duplicate keys or ids: the later entry wins
    const std::string_view s = std::string_view(t.arena).substr(en.off, en.len);
    if (en.raw) {
      t.raw_to_id.insert_or_assign(std::string(s), en.id);
    } else {
      t.bytes_to_id.insert_or_assign(s, en.id);
    }
    t.tok_off[en.id] = en.off;
    t.tok_len[en.id] = en.len;
  }
  t.vocab_entries = t.bytes_to_id.size() + t.raw_to_id.size();
  t.byte_id.fill(kNoId);
  t.fallback_id.fill(kNoId);
  for (uint32_t b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (auto it = t.bytes_to_id.find(std::string_view(&c, 1)); it != t.bytes_to_id.end()) {
      t.byte_id[b] = it->second;
    }
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    if (auto id = t.model_token_to_id(name)) t.fallback_id[b] = *id;
  }

  // Merges: ["a", "b"] pairs or legacy "a b" strings; rank = position (lines starting with
  // "#version" are skipped in the legacy form).
  array merges;
  if (model.at_key("merges").get_array().get(merges) != simdjson::SUCCESS) {
    return err(TokenizerErrc::kMissing, "model.merges array");
  }
  if (merges.size() > lim.max_merges) {
    return err(TokenizerErrc::kTooLarge, "more merges than max_merges");
  }
  t.merges.reserve(merges.size());
  uint32_t rank = 0;
  std::string joined;
  for (const element m : merges) {
    std::string_view a, b, line;
    array pair;
    if (m.get_string().get(line) == simdjson::SUCCESS) {
      if (line.substr(0, 8) == "#version") continue;
      const size_t sp = line.find(' ');
      if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos) {
        return err(TokenizerErrc::kBadVocab, "merge " + std::to_string(rank + 1) +
                                                 " is not two tokens separated by one space");
      }
      a = line.substr(0, sp);
      b = line.substr(sp + 1);
    } else if (m.get_array().get(pair) == simdjson::SUCCESS && pair.size() == 2) {
      if (pair.at(0).get_string().get(a) != simdjson::SUCCESS ||
          pair.at(1).get_string().get(b) != simdjson::SUCCESS) {
        return err(TokenizerErrc::kBadJson, "merge pair of non-strings");
      }
    } else {
      return err(TokenizerErrc::kBadJson, "merge is neither a string nor a pair");
    }
    joined.assign(a);
    joined.append(b);
    const auto ida = t.model_token_to_id(a);
    const auto idb = t.model_token_to_id(b);
    const auto idn = t.model_token_to_id(joined);
    if (!ida || !idb || !idn) {
      return err(TokenizerErrc::kBadVocab,
                 "merge " + std::to_string(rank + 1) + " names a token not in the vocabulary");
    }
    t.merges.insert_or_assign((static_cast<uint64_t>(*ida) << 32) | *idb,
                              (static_cast<uint64_t>(rank) << 32) | *idn);
    ++rank;
  }
  return std::nullopt;
}

// HF AddedVocabulary::add_tokens, one token at a time (as the tokenizer.json loader calls it).
void add_tokens(Tokenizer::Impl& t, const std::vector<AddedDef>& defs) {
  std::vector<const AddedDef*> special_list, classic_list;
  std::optional<uint32_t> max_added;
  for (const AddedDef& def : defs) {
    if (def.special && !def.content.empty() && !t.special_set.count(def.content)) {
      special_list.push_back(&def);
      t.special_set.insert(def.content);
    }
    if (def.content.empty()) continue;
    if (auto it = t.added_map.find(def.content); it != t.added_map.end()) {
      if (auto r = t.added_r.find(it->second); r != t.added_r.end() && r->second == def) continue;
    }
    uint32_t new_id = 0;
    if (auto id = t.token_to_id(def.content)) {
      new_id = *id;
    } else {
      const auto vs = static_cast<uint32_t>(t.vocab_entries);
      new_id = !max_added ? vs : (*max_added >= vs || vs == 0) ? *max_added + 1 : vs;
    }
    t.added_map.insert_or_assign(def.content, new_id);
    max_added = max_added ? std::max(*max_added, new_id) : new_id;
    t.added_r.insert_or_assign(new_id, def);
    if (!t.special_set.count(def.content)) classic_list.push_back(&def);
    if (new_id != def.json_id) ++t.id_mismatches;
  }
  auto add_pattern = [&](const AddedDef* def) {
    const uint32_t id = *t.token_to_id(def->content);
    if (!def->normalized) {
      t.raw_trie.add(def->content, id);
      return;
    }
    std::string content = def->content;
    for (const NormForm f : t.normalizers) content = normalize_one(content, f);
    t.norm_trie.add(content, id);
  };
  for (const AddedDef* def : special_list) add_pattern(def);
  for (const AddedDef* def : classic_list) add_pattern(def);
}

std::optional<TokenizerError> load(std::string_view json, Tokenizer::Impl& t,
                                   std::optional<std::string_view> override_json) {
  const TokenizerLimits& lim = t.limits;
  if (json.size() > lim.max_file_bytes) {
    return err(TokenizerErrc::kTooLarge, "tokenizer.json larger than max_file_bytes");
  }
  simdjson::dom::parser parser;
  element doc;
  if (auto e = parser.parse(simdjson::padded_string(json)).get(doc); e != simdjson::SUCCESS) {
    return err(TokenizerErrc::kBadJson, std::string("tokenizer.json: ") + simdjson::error_message(e));
  }
  object root;
  if (doc.get_object().get(root) != simdjson::SUCCESS) {
    return err(TokenizerErrc::kBadJson, "tokenizer.json is not an object");
  }
  if (auto v = get_string(root, "version"); v && *v != "1.0") {
    return err(TokenizerErrc::kUnsupported, "tokenizer.json version " + std::string(*v));
  }
  element e;
  if (root.at_key("normalizer").get(e) == simdjson::SUCCESS) {
    if (auto er = parse_normalizer(e, t.normalizers, lim, 0)) return er;
  }
  if (root.at_key("pre_tokenizer").get(e) == simdjson::SUCCESS) {
    if (auto er = parse_pre_tokenizer(e, t, 0)) return er;
  }
  if (t.steps.empty() || t.steps.back().kind != Step::Kind::kByteLevel) {
    return err(TokenizerErrc::kUnsupported, "only byte-level BPE (a ByteLevel pre-tokenizer)");
  }
  if (root.at_key("post_processor").get(e) == simdjson::SUCCESS) parse_post_processor(e, t, 0);
  object model;
  if (root.at_key("model").get_object().get(model) != simdjson::SUCCESS) {
    return err(TokenizerErrc::kMissing, "model object");
  }
  if (auto er = parse_model(model, t)) return er;

  std::vector<AddedDef> defs;
  array added;
  if (root.at_key("added_tokens").get_array().get(added) == simdjson::SUCCESS) {
    if (added.size() > lim.max_added_tokens) {
      return err(TokenizerErrc::kTooLarge, "more added tokens than max_added_tokens");
    }
    for (const element a : added) {
      AddedDef def;
      if (auto er = parse_added(a, def, lim)) return er;
      defs.push_back(std::move(def));
    }
  }
  if (override_json) {
    if (override_json->size() > lim.max_file_bytes) {
      return err(TokenizerErrc::kTooLarge, "added tokens override larger than max_file_bytes");
    }
    simdjson::dom::parser p2;
    element odoc;
    array list;
    if (p2.parse(simdjson::padded_string(*override_json)).get(odoc) != simdjson::SUCCESS ||
        odoc.at_key("added_tokens").get_array().get(list) != simdjson::SUCCESS) {
      return err(TokenizerErrc::kBadJson, "added tokens override: no added_tokens array");
    }
    for (const element a : list) {
      AddedDef def;
      if (auto er = parse_added(a, def, lim)) return er;
      auto it = std::find_if(defs.begin(), defs.end(),
                             [&](const AddedDef& d) { return d.json_id == def.json_id; });
      if (it != defs.end()) {
        *it = std::move(def);
      } else {
        if (defs.size() >= lim.max_added_tokens) {
          return err(TokenizerErrc::kTooLarge, "more added tokens than max_added_tokens");
        }
        defs.push_back(std::move(def));
      }
    }
  }
  add_tokens(t, defs);
  return std::nullopt;
}

TokResult<std::string> read_file(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return err(TokenizerErrc::kIo, "cannot open " + path);
  in.seekg(0, std::ios::end);
  const auto size = in.tellg();
  if (size < 0) return err(TokenizerErrc::kIo, "cannot read " + path);
  if (static_cast<size_t>(size) > max_bytes) {
    return err(TokenizerErrc::kTooLarge, path + " larger than max_file_bytes");
  }
  in.seekg(0);
  std::string data(static_cast<size_t>(size), '\0');
  if (!in.read(data.data(), size)) return err(TokenizerErrc::kIo, "cannot read " + path);
  return data;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

uint32_t byte_to_unicode(uint8_t b) { return byte_map().to_cp[b]; }

std::optional<uint8_t> unicode_to_byte(uint32_t cp) {
  const auto& map = byte_map();
  if (cp >= map.from_cp.size() || map.from_cp[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(map.from_cp[cp]);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

TokResult<std::shared_ptr<const Tokenizer>> Tokenizer::from_json(
    std::string_view json, const TokenizerLimits& limits,
    std::optional<std::string_view> added_tokens_override) {
  auto impl = std::make_unique<Impl>();
  impl->limits = limits;
  impl->serial = g_serial.fetch_add(1);
  if (auto e = load(json, *impl, added_tokens_override)) return *e;
  return std::shared_ptr<const Tokenizer>(new Tokenizer(std::move(impl)));
}

TokResult<std::shared_ptr<const Tokenizer>> Tokenizer::from_file(
    const std::string& path, const TokenizerLimits& limits,
    const std::string& added_tokens_override_path) {
  auto json = read_file(path, limits.max_file_bytes);
  if (!json) return json.error();
  if (added_tokens_override_path.empty()) return from_json(*json, limits);
  auto over = read_file(added_tokens_override_path, limits.max_file_bytes);
  if (!over) return over.error();
  return from_json(*json, limits, std::string_view(*over));
}

namespace {

// What every encode entry point checks first: the size limit, then valid UTF-8.
std::optional<TokenizerError> check_input(const Tokenizer::Impl& t, std::string_view text) {
  if (text.size() > t.limits.max_input_bytes) {
    return err(TokenizerErrc::kTooLarge, "input larger than max_input_bytes");
  }
  if (!simdjson::validate_utf8(text.data(), text.size())) {
    return err(TokenizerErrc::kBadInput, "input is not valid UTF-8");
  }
  return std::nullopt;
}

}  // namespace

std::optional<TokenizerError> Tokenizer::encode_into(std::string_view text,
                                                     std::vector<uint32_t>& out,
                                                     bool add_special_tokens) const {
  const Impl& t = *impl_;
  if (auto e = check_input(t, text)) return e;
  if (add_special_tokens && t.post_unsupported) {
    return err(TokenizerErrc::kUnsupported, "post_processor for add_special_tokens");
  }
  const size_t before = out.size();
  if (add_special_tokens) out.insert(out.end(), t.prefix_ids.begin(), t.prefix_ids.end());
  Encoder enc(t, scratch_for(t.serial), out);
  if (auto e = enc.run(text)) {
    out.resize(before);
    return e;
  }
  if (add_special_tokens) out.insert(out.end(), t.suffix_ids.begin(), t.suffix_ids.end());
  return std::nullopt;
}

TokResult<std::vector<uint32_t>> Tokenizer::encode(std::string_view text,
                                                   bool add_special_tokens) const {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 8);
  if (auto e = encode_into(text, out, add_special_tokens)) return *e;
  return out;
}

std::string Tokenizer::decode(const std::vector<uint32_t>& ids, bool skip_special_tokens) const {
  const Impl& t = *impl_;
  std::string bytes;
  for (const uint32_t id : ids) {
    if (auto it = t.added_r.find(id); it != t.added_r.end()) {
      if (skip_special_tokens && t.special_set.count(it->second.content)) continue;
      const std::string& c = it->second.content;
      if (auto b = byte_level_to_bytes(c)) {
        bytes += *b;
      } else {
        bytes += c;
      }
      continue;
    }
    bytes += t.model_bytes(id);
  }
  return utf8_lossy(bytes);
}

std::optional<uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  return impl_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(uint32_t id) const {
  const Impl& t = *impl_;
  if (auto it = t.added_r.find(id); it != t.added_r.end()) return it->second.content;
  if (!t.has_model_id(id)) return std::nullopt;
  const std::string_view b = t.model_bytes(id);
  if (t.raw_to_id.count(b)) {
    if (t.raw_to_id.find(b)->second == id) return std::string(b);
  }
  std::string out;
  for (const char c : b) append_utf8(out, byte_to_unicode(static_cast<uint8_t>(c)));
  return out;
}

size_t Tokenizer::vocab_size() const { return impl_->vocab_entries; }
size_t Tokenizer::added_tokens() const { return impl_->added_r.size(); }
size_t Tokenizer::added_id_mismatches() const { return impl_->id_mismatches; }
bool Tokenizer::is_added_token_id(uint32_t id) const { return impl_->added_r.count(id) != 0; }

std::optional<TokenizerError> Tokenizer::find_cuts(std::string_view text,
                                                   std::vector<Cut>& cuts) const {
  const Impl& t = *impl_;
  if (auto e = check_input(t, text)) return e;
  CutLog log{&cuts, nullptr, 0, cuts.size()};
  split_added(t, text, t.raw_trie, [](std::string_view, uint32_t) {}, &log);
  return std::nullopt;
}

std::optional<TokenizerError> Tokenizer::encode_with_cuts(std::string_view text,
                                                          std::vector<uint32_t>& out,
                                                          std::vector<Cut>& cuts) const {
  const Impl& t = *impl_;
  if (auto e = check_input(t, text)) return e;
  const size_t before = out.size(), cuts_before = cuts.size();
  CutLog log{&cuts, &out, before, cuts_before};
  Encoder enc(t, scratch_for(t.serial), out, &log);
  if (auto e = enc.run(text)) {
    out.resize(before);
    cuts.resize(cuts_before);
    return e;
  }
  return std::nullopt;
}

uint64_t Tokenizer::serial() const { return impl_->serial; }

// What decides a cut at c (split_added over the raw text): every Trie::find before it, which
// reads s[pos, start + max_len) for a match starting before c; the single_word checks of those
// matches, which read one code point (at most 4 bytes) after a match that ends at or before c;
// and whether a single_word match starts at c, which reads s[c, c + max_len). All of it lies in
// s[0, c + max_len + 4).
size_t Tokenizer::cut_reach() const { return impl_->raw_trie.max_len() + 4; }
size_t Tokenizer::max_input_bytes() const { return impl_->limits.max_input_bytes; }

std::optional<TokenizerError> Tokenizer::special_ids_around(std::vector<uint32_t>& before,
                                                            std::vector<uint32_t>& after) const {
  if (impl_->post_unsupported) {
    return err(TokenizerErrc::kUnsupported, "post_processor for add_special_tokens");
  }
  before = impl_->prefix_ids;
  after = impl_->suffix_ids;
  return std::nullopt;
}

}  // namespace ramjet::render
