// request/usage: SSE line splitting and the per-event extraction of reference 6.1. An SSE event
// that can still change the Usage (every event until the first generated token, then those a
// byte scan finds an accounting key in) or the whole non-streaming body is read once with
// common/json_tape's reader, which validates the full document as simdjson's DOM parser does
// (an event that repeats the last read one's opening, vLLM's id, object, created and model, is
// read on from the member after it); malformed input is counted, never fatal.
#include "request/usage/usage.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <optional>

#include "common/bytes.h"
#include "common/json_tape.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace ramjet::request {
namespace {

using json_tape::Kind;
using json_tape::Tape;
using Index = Tape::Index;
// An absent value (a key not found): no entry of a tape has this index.
constexpr Index kNone = std::numeric_limits<Index>::max();

constexpr size_t kMaxFinishReasonBytes = 64;
// The per-thread tape keeps its storage for documents up to this many entries (an SSE event has
// a few dozen); a larger body's storage is freed after it is read.
constexpr size_t kRetainedTapeEntries = 4096;
// An SSE event read on from its opening is copied (after a `{`) when the rest is shorter.
constexpr size_t kMaxReadOnBytes = 1024;
// An SSE line that carries an event's data starts with this field name.
constexpr std::string_view kData = "data:";
// pending_ keeps its allocation between lines up to this size.
constexpr size_t kRetainedPendingBytes = 64 * 1024;

Tape& thread_tape() {
  thread_local Tape tape;
  return tape;
}

// An engine's document may take up to 8 bytes of tape per byte (or 256 KiB, whichever is more;
// a response with logprobs takes ~3, a long array of one-digit numbers 12): a denser one is not
// read (a parse failure), and the tape it grew stays within twice that (its capacity doubles).
class ResponseAllowance final : public json_tape::Allowance {
 public:
  explicit ResponseAllowance(size_t json_bytes) : cap_(std::max<size_t>(256 << 10, 8 * json_bytes)) {}
  bool allow(size_t needed, size_t /*bytes*/) override { return needed <= cap_; }
  bool fits(const Tape& t) const { return size_t{t.entries()} * Tape::kEntryBytes <= cap_; }

 private:
  size_t cap_;
};

// The value of `key` in object `o` (its first occurrence, as simdjson's at_key was), or kNone.
Index field(const Tape& t, Index o, std::string_view key) {
  for (Index k = Tape::first_member(o); k != t.end(o); k = t.next_member(k)) {
    if (same(t.string(k), key)) return k + 1;
  }
  return kNone;
}

Index object_field(const Tape& t, Index o, std::string_view key) {
  const Index v = field(t, o, key);
  return v != kNone && t.kind(v) == Kind::kObject ? v : kNone;
}

// A token count: a non-negative integer (an integral double such as 12.0 is accepted too).
std::optional<uint64_t> count_field(const Tape& t, Index o, std::string_view key) {
  const Index v = field(t, o, key);
  if (v == kNone) return std::nullopt;
  switch (t.kind(v)) {
    case Kind::kUint:
      return t.uint_value(v);
    case Kind::kDouble: {
      const double d = t.double_value(v);
      // 2^64 as a double; the comparison also rejects NaN (the reader never produces one).
      if (!(d >= 0.0 && d < 18446744073709551616.0) || static_cast<double>(static_cast<uint64_t>(d)) != d) {
        return std::nullopt;
      }
      return static_cast<uint64_t>(d);
    }
    default:
      return std::nullopt;
  }
}

std::optional<uint64_t> first_count(const Tape& t, Index o, std::initializer_list<std::string_view> keys) {
  for (std::string_view key : keys) {
    if (auto v = count_field(t, o, key)) return v;
  }
  return std::nullopt;
}

// Python-like truthiness, as the reference applies to tool_calls.
bool truthy(const Tape& t, Index v) {
  switch (t.kind(v)) {
    case Kind::kNull:
    case Kind::kFalse:
      return false;
    case Kind::kString:
      return !t.string_empty(v);
    case Kind::kArray:
    case Kind::kObject:
      return !t.container_empty(v);
    default:
      return true;  // true, numbers
  }
}

// Capped at 64 bytes on a UTF-8 boundary (the reader has validated the string), so metric
// labels and journal records stay valid UTF-8 and bounded.
void set_finish_reason(std::string& out, std::string_view v) {
  if (v.size() > kMaxFinishReasonBytes) {
    size_t n = kMaxFinishReasonBytes;
    while (n > 0 && (static_cast<unsigned char>(v[n]) & 0xC0) == 0x80) --n;
    v = v.substr(0, n);
  }
  out.assign(v);
}

void apply_usage(const Tape& t, Index usage, Endpoint endpoint, Usage& u) {
  if (auto v = first_count(t, usage, {"prompt_tokens", "input_tokens"})) u.prompt_tokens = v;
  if (endpoint == Endpoint::kMessages && u.prompt_tokens && field(t, usage, "prompt_tokens") == kNone) {
    // Anthropic's meaning, which vLLM (>= 0.32, with --enable-prompt-tokens-details) follows:
    // input_tokens is the part of the prompt neither read from nor written to the cache, and
    // the prompt is input + cache_read_input_tokens + cache_creation_input_tokens. Without the
    // cache fields (message_start, an older vLLM) input_tokens is the whole prompt.
    for (std::string_view key : {"cache_read_input_tokens", "cache_creation_input_tokens"}) {
      if (auto v = count_field(t, usage, key)) {
        *u.prompt_tokens = *v > std::numeric_limits<uint64_t>::max() - *u.prompt_tokens
                               ? std::numeric_limits<uint64_t>::max()
                               : *u.prompt_tokens + *v;
      }
    }
  }
  if (auto v = first_count(t, usage, {"completion_tokens", "output_tokens"})) u.completion_tokens = v;
  std::optional<uint64_t> cached;
  if (const Index details = object_field(t, usage, "prompt_tokens_details"); details != kNone) {
    cached = count_field(t, details, "cached_tokens");
  }
  if (!cached) cached = first_count(t, usage, {"cached_tokens", "cache_read_input_tokens"});
  if (!cached) {
    if (const Index details = object_field(t, usage, "input_tokens_details"); details != kNone) {
      cached = count_field(t, details, "cached_tokens");
    }
  }
  if (cached) u.cached_tokens = cached;
}

// Member names to pick(), with the set of their lengths (bit n: a name of n < 64 bytes).
template <size_t N>
struct Names {
  std::array<std::string_view, N> names;
  uint64_t lengths = 0;
  constexpr explicit Names(const std::array<std::string_view, N>& n) : names(n) {
    for (std::string_view name : names) lengths |= uint64_t{1} << name.size();
  }
};

// One pass over an object's members keeping, for each wanted key, the value field() would
// return (its first occurrence): an event is read with a few passes instead of one linear scan
// per lookup.
template <size_t N>
std::array<Index, N> pick(const Tape& t, Index o, const Names<N>& keys) {
  std::array<Index, N> out;
  out.fill(kNone);
  size_t found = 0;
  for (Index k = Tape::first_member(o); k != t.end(o); k = t.next_member(k)) {
    const std::string_view key = t.string(k);
    // The length first: most members match no wanted key.
    if (key.empty() || key.size() >= 64 || ((keys.lengths >> key.size()) & 1) == 0) continue;
    for (size_t i = 0; i < N; ++i) {
      if (out[i] == kNone && key.size() == keys.names[i].size() && key[0] == keys.names[i][0] &&
          same_bytes(key.data(), keys.names[i].data(), key.size(), 0)) {
        out[i] = k + 1;
        if (++found == N) return out;
        break;
      }
    }
  }
  return out;
}

// The names extract_event() reads at an event's root, each with its slot in pick_root()'s
// result (choices, stop_reason, delta, response, status, message, usage), dispatched on the
// name's length; -1: a member extraction never reads (an opening may hold it).
[[gnu::always_inline]] inline int root_slot(std::string_view key) {
  switch (key.size()) {
    case 5:
      return same(key, "delta") ? 2 : same(key, "usage") ? 6 : -1;
    case 6:
      return same(key, "status") ? 4 : -1;
    case 7:
      return same(key, "choices") ? 0 : same(key, "message") ? 5 : -1;
    case 8:
      return same(key, "response") ? 3 : -1;
    case 11:
      return same(key, "stop_reason") ? 1 : -1;
    default:
      return -1;
  }
}

// pick() for the event root's members (root_slot()'s names): it runs for every SSE event.
std::array<Index, 7> pick_root(const Tape& t, Index o) {
  std::array<Index, 7> out;
  out.fill(kNone);
  for (Index k = Tape::first_member(o); k != t.end(o); k = t.next_member(k)) {
    const int slot = root_slot(t.string(k));
    if (slot >= 0 && out[static_cast<size_t>(slot)] == kNone) out[static_cast<size_t>(slot)] = k + 1;
  }
  return out;
}

// The opening of a parsed event (the tape's root object, read from `json`'s first byte): the
// bytes of its first members up to the first one extract_event() reads, each key plain (an
// escaped key could spell a read one) and followed by another member; at most `cap` bytes.
// 0: none.
size_t opening_bytes(const Tape& t, size_t cap) {
  const Index root = Tape::root();
  size_t bytes = 0;
  for (Index k = Tape::first_member(root); k != t.end(root); k = t.next_member(k)) {
    if (t.escaped(k) || root_slot(t.raw_string(k)) >= 0) break;
    const Index next = t.next_member(k);
    if (next == t.end(root)) break;
    const size_t at = t.string_offset(next) - 1;  // the next key's opening quote
    if (at > cap) break;
    bytes = at;
  }
  return bytes;
}

Index as_object(const Tape& t, Index v) { return v != kNone && t.kind(v) == Kind::kObject ? v : kNone; }

std::optional<std::string_view> as_string(const Tape& t, Index v) {
  if (v == kNone || t.kind(v) != Kind::kString) return std::nullopt;
  return t.string(v);
}

bool non_empty_string(const Tape& t, Index v) { return v != kNone && t.kind(v) == Kind::kString && !t.string_empty(v); }

void set_status(std::string& out, const std::optional<std::string_view>& status) {
  if (status && (same(*status, "completed") || same(*status, "incomplete") || same(*status, "cancelled"))) {
    set_finish_reason(out, *status);
  }
}

// OpenAI chat/completions chunk or body (`choices` is the event's choices member). Returns
// whether a choice carried generated output.
bool extract_choices(const Tape& t, Index choices, Endpoint endpoint, Usage& u, bool detect) {
  if (choices == kNone || t.kind(choices) != Kind::kArray) return false;
  static constexpr Names<4> kChoiceKeys{std::array<std::string_view, 4>{"finish_reason", "delta", "message", "text"}};
  static constexpr Names<1> kFinishKey{std::array<std::string_view, 1>{"finish_reason"}};
  static constexpr Names<4> kNodeKeys{std::array<std::string_view, 4>{"content", "reasoning_content", "reasoning",
                                                                "tool_calls"}};
  bool generated = false;
  bool first = true;
  for (Index choice = Tape::first_element(choices); choice != t.end(choices); choice = t.next(choice)) {
    const bool is_first = first;
    first = false;
    if (!detect && !is_first) break;  // only the first choice's finish_reason can still matter
    if (t.kind(choice) != Kind::kObject) continue;
    if (!detect) {
      if (auto reason = as_string(t, pick(t, choice, kFinishKey)[0])) set_finish_reason(u.finish_reason, *reason);
      break;
    }
    const auto f = pick(t, choice, kChoiceKeys);
    if (is_first) {
      if (auto reason = as_string(t, f[0])) set_finish_reason(u.finish_reason, *reason);
    }
    // The non-empty delta (streaming) or else the message (non-streaming).
    Index node = as_object(t, f[1]);
    if (node == kNone || t.container_empty(node)) node = as_object(t, f[2]);
    if (node != kNone) {
      const auto n = pick(t, node, kNodeKeys);
      if (non_empty_string(t, n[0]) || non_empty_string(t, n[1]) || non_empty_string(t, n[2])) generated = true;
      if (n[3] != kNone && truthy(t, n[3])) generated = true;
    }
    // /v1/completions carries its text on the choice itself (not in reference 6.1, which
    // would otherwise never see a first token on this endpoint).
    if (endpoint == Endpoint::kCompletions && non_empty_string(t, f[3])) generated = true;
  }
  return generated;
}

// One event (or body), the tape's root object: every shape is tried, as the reference does;
// they do not overlap. Generated output is only looked for until it has been seen
// (`u.generated`): after that an event can only change the finish reason and the usage.
bool extract_event(const Tape& t, Endpoint endpoint, Usage& u) {
  const Index root = Tape::root();
  const bool detect = !u.generated;
  const auto r = pick_root(t, root);
  bool generated = extract_choices(t, r[0], endpoint, u, detect);

  // Anthropic: stop_reason at the top (body) or in message_delta's delta; text-ish deltas.
  // Responses: the delta is a string.
  if (auto reason = as_string(t, r[1])) set_finish_reason(u.finish_reason, *reason);
  if (const Index delta = r[2]; delta != kNone) {
    if (t.kind(delta) == Kind::kObject) {
      static constexpr Names<5> kDeltaKeys{std::array<std::string_view, 5>{"stop_reason", "text", "thinking",
                                                                     "reasoning", "partial_json"}};
      const auto df = pick(t, delta, kDeltaKeys);
      if (auto reason = as_string(t, df[0])) set_finish_reason(u.finish_reason, *reason);
      for (size_t i = 1; detect && i < df.size(); ++i) {
        if (non_empty_string(t, df[i])) generated = true;
      }
    } else if (detect && non_empty_string(t, delta)) {
      generated = true;
    }
  }

  // Responses: status at the top (body) or in the event's response object.
  const Index response = as_object(t, r[3]);
  Index response_usage = kNone;
  set_status(u.finish_reason, as_string(t, r[4]));
  if (response != kNone) {
    static constexpr Names<2> kResponseKeys{std::array<std::string_view, 2>{"status", "usage"}};
    const auto rf = pick(t, response, kResponseKeys);
    set_status(u.finish_reason, as_string(t, rf[0]));
    response_usage = as_object(t, rf[1]);
  }

  // Usage: message.usage (Anthropic message_start) if non-empty, else response.usage
  // (Responses events) if non-empty, else the top-level usage.
  Index usage = kNone;
  if (const Index message = as_object(t, r[5]); message != kNone) {
    if (const Index mu = object_field(t, message, "usage"); mu != kNone && !t.container_empty(mu)) usage = mu;
  }
  if (usage == kNone && response_usage != kNone && !t.container_empty(response_usage)) usage = response_usage;
  if (usage == kNone) usage = as_object(t, r[6]);
  if (usage != kNone) apply_usage(t, usage, endpoint, u);

  if (generated) u.generated = true;
  return generated;
}

std::string_view trim_ascii(std::string_view s) {
  auto space = [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
  };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// Whether the candidate byte at `c` (a quote before u, s or f, or a backslash before u) makes
// the event one to parse: the quote opens one of the keys with a non-null value, or the
// backslash escapes an ASCII letter or underscore.
bool must_parse_at(const char* c, const char* end) {
  if (*c == '\\') return end - c >= 5 && c[1] == 'u' && c[2] == '0' && c[3] == '0' && c[4] >= '5' && c[4] <= '7';
  auto key_at = [c, end](std::string_view key) {
    return static_cast<size_t>(end - c) >= key.size() + 2 && std::memcmp(c + 1, key.data(), key.size()) == 0 &&
           c[key.size() + 1] == '"';
  };
  std::string_view key;
  if (end - c < 2) return false;
  switch (c[1]) {
    case 'u':
      if (key_at("usage")) key = "usage";
      break;
    case 's':
      if (key_at("status")) {
        key = "status";
      } else if (key_at("stop_reason")) {
        key = "stop_reason";
      }
      break;
    case 'f':
      if (key_at("finish_reason")) key = "finish_reason";
      break;
    default:
      break;
  }
  if (key.empty()) return false;
  // The key's value: anything but `: null` (a string value, or not JSON) means parse. A newline
  // ends the line the candidate is in (quiet_lines() scans several), and so means parse too.
  auto skip = [end](const char* p) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) ++p;
    return p;
  };
  const char* v = skip(c + key.size() + 2);
  if (v == end || *v != ':') return true;
  v = skip(v + 1);
  return !(end - v >= 4 && std::memcmp(v, "null", 4) == 0);
}

// After the first generated token extract_event() reads only finish_reason (choice 0),
// stop_reason (root, delta), status (root, response) and usage (root, message, response), and
// only non-null values change anything. In valid JSON a key's bytes appear literally as `"key"`
// (a quote inside a string is escaped) unless they are spelt with \u escapes, so an event with
// none of these keys followed by a non-null value, and no \u-escaped ASCII letter or
// underscore (\u005f, \u006X, \u007X), cannot change the Usage: it need not be parsed.
bool may_change_usage_sse2(std::string_view p) {
  const char* const s = p.data();
  const char* const end = s + p.size();
  size_t i = 0;
#if defined(__SSE2__)
  // 16 bytes at a time: the candidates are a quote followed by u, s or f, and a backslash
  // followed by u; most events have a handful.
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  const __m128i u = _mm_set1_epi8('u');
  const __m128i st = _mm_set1_epi8('s');
  const __m128i f = _mm_set1_epi8('f');
  auto block = [&](size_t at) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + at));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + at + 1));
    const __m128i next_u = _mm_cmpeq_epi8(b, u);
    const __m128i key = _mm_and_si128(_mm_cmpeq_epi8(a, quote),
                                      _mm_or_si128(next_u, _mm_or_si128(_mm_cmpeq_epi8(b, st), _mm_cmpeq_epi8(b, f))));
    const __m128i escape = _mm_and_si128(_mm_cmpeq_epi8(a, backslash), next_u);
    for (unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(_mm_or_si128(key, escape))); mask != 0;
         mask &= mask - 1) {
      if (must_parse_at(s + at + static_cast<size_t>(__builtin_ctz(mask)), end)) return true;
    }
    return false;
  };
  for (; i + 17 <= p.size(); i += 16) {
    if (block(i)) return true;
  }
  // The rest with one block ending at the last byte, overlapping the one before it (a candidate
  // seen twice gives the same answer); the very last byte cannot open a key or an escape.
  if (i < p.size() && p.size() >= 17) return block(p.size() - 17);
#endif
  for (; i < p.size(); ++i) {
    if ((s[i] == '"' || s[i] == '\\') && must_parse_at(s + i, end)) return true;
  }
  return false;
}

#if defined(__x86_64__) && defined(__GNUC__)
// The candidates among the 32 bytes at `a`'s address (`b` is the 32 bytes after the first):
// a quote before u, s or f, or a backslash before u, one bit a byte.
[[gnu::target("avx2"), gnu::always_inline]] inline uint32_t candidates_avx2(__m256i a, __m256i b) {
  const __m256i next_u = _mm256_cmpeq_epi8(b, _mm256_set1_epi8('u'));
  const __m256i key = _mm256_and_si256(
      _mm256_cmpeq_epi8(a, _mm256_set1_epi8('"')),
      _mm256_or_si256(next_u, _mm256_or_si256(_mm256_cmpeq_epi8(b, _mm256_set1_epi8('s')),
                                              _mm256_cmpeq_epi8(b, _mm256_set1_epi8('f')))));
  const __m256i escape = _mm256_and_si256(_mm256_cmpeq_epi8(a, _mm256_set1_epi8('\\')), next_u);
  return static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_or_si256(key, escape)));
}

// may_change_usage_sse2() 32 bytes at a time, on CPUs with AVX2 (most of an event's cost after the
// first token is this scan): the same candidates, the same answers.
[[gnu::target("avx2")]] bool may_change_usage_avx2(std::string_view p) {
  if (p.size() < 33) return may_change_usage_sse2(p);
  const char* const s = p.data();
  const char* const end = s + p.size();
  size_t i = 0;
  for (;;) {
    const size_t at = i + 33 <= p.size() ? i : p.size() - 33;  // the last block overlaps the one before
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + at));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + at + 1));
    for (uint32_t mask = candidates_avx2(a, b); mask != 0; mask &= mask - 1) {
      if (must_parse_at(s + at + static_cast<size_t>(__builtin_ctz(mask)), end)) return true;
    }
    if (at != i) return false;  // that was the last block
    i += 32;
    if (i + 1 >= p.size()) return false;  // the very last byte cannot open a key or an escape
  }
}

// The whole lines at the start of `p` that on_line() reads nothing from once a token was
// generated: lines in which no candidate may_change_usage() would find makes a parse (each
// judged up to its own end: must_parse_at() stops at a newline). A data line's candidates are
// those of its payload (`data:` and blanks have none), so for data lines this is
// may_change_usage() on each; a candidate in another line (a comment, `event:`) only stops the
// pass early, and on_line() then reads nothing from that line. Returns the length of those
// lines with their newlines: an event that cannot change the Usage (most of a stream) costs one
// pass over its bytes finding candidates and line ends together, not a line split, a trim and a
// scan. The first line is scanned from `from` (UsageAccumulator::scan_start(), as on_line()
// scans it).
size_t quiet_lines_bytewise(std::string_view p, size_t from) {
  const char* const s = p.data();
  const char* const end = s + p.size();
  size_t line = 0;  // where the line being scanned starts
  for (size_t i = from; i < p.size(); ++i) {
    if (s[i] == '\n') {
      line = i + 1;
    } else if ((s[i] == '"' || s[i] == '\\') && must_parse_at(s + i, end)) {
      return line;
    }
  }
  return line;
}

[[gnu::target("avx2")]] size_t quiet_lines_avx2(std::string_view p, size_t from) {
  if (p.size() - from < 33) return quiet_lines_bytewise(p, from);
  const char* const s = p.data();
  const char* const end = s + p.size();
  size_t line = 0;
  size_t i = from;
  for (;;) {
    const size_t at = i + 33 <= p.size() ? i : p.size() - 33;  // the last block overlaps the one before
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + at));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + at + 1));
    auto ends = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(a, _mm256_set1_epi8('\n'))));
    uint32_t candidates = candidates_avx2(a, b);
    if (at != i) {  // bytes the block before read already (1 to 31 of them)
      ends &= ~uint32_t{0} << (i - at);
      candidates &= ~uint32_t{0} << (i - at);
    }
    for (; candidates != 0; candidates &= candidates - 1) {
      const int bit = __builtin_ctz(candidates);
      if (must_parse_at(s + at + static_cast<size_t>(bit), end)) {
        const uint32_t before = ends & ((uint32_t{1} << bit) - 1);
        return before != 0 ? at + static_cast<size_t>(32 - __builtin_clz(before)) : line;
      }
    }
    if (ends != 0) line = at + static_cast<size_t>(32 - __builtin_clz(ends));
    if (at != i) break;  // that was the last block
    i += 32;
    if (i + 1 >= p.size()) break;
  }
  // The last byte is never a block's first operand (it cannot open a key or an escape).
  return p.back() == '\n' ? p.size() : line;
}

bool cpu_has_avx2() {
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return avx2;
}

bool may_change_usage(std::string_view p) {
  return cpu_has_avx2() ? may_change_usage_avx2(p) : may_change_usage_sse2(p);
}

// npos without AVX2: no line is passed over here, each is split off and scanned as before.
size_t quiet_lines(std::string_view p, size_t from) {
  return cpu_has_avx2() ? quiet_lines_avx2(p, from) : std::string_view::npos;
}
#else
bool may_change_usage(std::string_view p) { return may_change_usage_sse2(p); }
size_t quiet_lines(std::string_view, size_t) { return std::string_view::npos; }
#endif

void bump(uint32_t& counter) {
  if (counter != std::numeric_limits<uint32_t>::max()) ++counter;
}

void release(std::string& s) {
  s.clear();
  if (s.capacity() > kRetainedPendingBytes) std::string().swap(s);
}

}  // namespace

std::string_view finish_bucket(std::string_view r) {
  if (r.empty()) return "none";
  if (same(r, "stop") || same(r, "end_turn") || same(r, "completed")) return "stop";
  if (same(r, "length") || same(r, "max_tokens") || same(r, "incomplete")) return "length";
  if (same(r, "tool_calls") || same(r, "tool_use")) return "tool_calls";
  if (same(r, "cancelled") || same(r, "canceled")) return "cancelled";
  return "other";
}

std::string_view cache_outcome(const Usage& u) {
  if (!u.cached_tokens) return "unknown";
  const uint64_t cached = *u.cached_tokens;
  if (u.prompt_tokens && *u.prompt_tokens > 0 && cached >= *u.prompt_tokens) return "full";
  if (cached > 0) return "partial";
  return "cold";
}

UsageAccumulator::UsageAccumulator(Endpoint endpoint, bool sse, UsageLimits limits)
    : endpoint_(endpoint), sse_(sse), limits_(limits) {}

bool UsageAccumulator::feed(std::string_view bytes, bool last) {
  if (finished_) return false;
  if (!sse_) {
    if (body_too_large_) return false;
    if (last && pending_.empty() && bytes.size() <= limits_.max_json_body_bytes) {
      finished_ = true;  // what finish() would read, read from `bytes`
      on_json(bytes);
      return false;
    }
    if (bytes.size() > limits_.max_json_body_bytes - pending_.size()) {
      body_too_large_ = true;
      bump(parse_failures_);
      std::string().swap(pending_);
      return false;
    }
    pending_.append(bytes);
    if (last) finish();
    return false;
  }

  const bool reported_before = first_token_reported_;
  const size_t max_line = limits_.max_line_bytes;
  while (!bytes.empty()) {
    // Once a token was generated, the whole lines that cannot change the Usage are passed over
    // in one scan (none of them is too long when all the bytes are not). The first line is
    // scanned as on_line() would scan it (after a repeated opening), the others whole: a line
    // found to hold a key to read is scanned again as the first, and then read.
    bool must_read = false;
    if (usage_.generated && !limits_.parse_every_event && pending_.empty() && !skipping_long_line_ &&
        bytes.size() <= max_line) {
      if (const size_t quiet = quiet_lines(bytes, scan_start(bytes)); quiet != std::string_view::npos) {
        bytes.remove_prefix(quiet);
        if (bytes.empty()) break;
        if (quiet != 0) continue;
        must_read = true;  // (or the line is not whole yet)
      }
    }
    const size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      // Partial line: carried to the next call unless it is already too long.
      if (skipping_long_line_) break;
      if (bytes.size() > max_line - pending_.size()) {
        bump(parse_failures_);
        skipping_long_line_ = true;
        release(pending_);
      } else {
        pending_.append(bytes);
      }
      break;
    }
    const std::string_view piece = bytes.substr(0, nl);
    bytes.remove_prefix(nl + 1);
    if (skipping_long_line_) {  // the end of a line already counted and dropped
      skipping_long_line_ = false;
      continue;
    }
    if (pending_.empty()) {
      if (piece.empty()) continue;  // the blank line that ends an event: nothing to read
      if (piece.size() > max_line) {
        bump(parse_failures_);
        continue;
      }
      on_line(piece, must_read);
    } else {
      if (piece.size() > max_line - pending_.size()) {
        bump(parse_failures_);
      } else {
        pending_.append(piece);
        on_line(pending_);
      }
      release(pending_);
    }
  }
  return !reported_before && first_token_reported_;
}

void UsageAccumulator::finish() {
  if (finished_) return;
  finished_ = true;
  if (sse_) {
    if (!skipping_long_line_ && !pending_.empty()) on_line(pending_);
  } else if (!body_too_large_) {
    on_json(pending_);
  }
  std::string().swap(pending_);
}

void UsageAccumulator::on_line(std::string_view line, bool must_read) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.size() < kData.size() || !same_bytes(line.data(), kData.data(), kData.size(), 0)) {
    return;  // event:, id:, retry:, comments
  }
  const std::string_view payload = trim_ascii(line.substr(kData.size()));
  if (payload.empty() || same(payload, "[DONE]")) return;
  if (usage_.generated && !limits_.parse_every_event && !must_read) {
    const size_t from = scan_start(line);  // 0, or within the payload
    const char* const payload_end = payload.data() + payload.size();
    if (!may_change_usage(from == 0 ? payload
                                    : std::string_view(line.data() + from,
                                                       static_cast<size_t>(payload_end - line.data()) - from))) {
      return;
    }
  }
  if (on_json(payload)) first_token_reported_ = true;
}

size_t UsageAccumulator::scan_start(std::string_view line) const {
  if (opening_size_ == 0 || line.size() <= kData.size() + opening_size_ ||
      !same_bytes(line.data(), kData.data(), kData.size(), 0)) {
    return 0;
  }
  size_t at = kData.size();  // the blanks trim_ascii() takes (a newline would end the line)
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; };
  while (at < line.size() && blank(line[at])) ++at;
  return repeats_opening(line.substr(at)) ? at + opening_size_ : 0;
}

bool UsageAccumulator::repeats_opening(std::string_view json) const {
  return opening_size_ != 0 && json.size() > opening_size_ && json[opening_size_] == '"' &&
         std::memcmp(json.data(), opening_.data(), opening_size_) == 0;
}

bool UsageAccumulator::on_json(std::string_view json) {
  Tape& tape = thread_tape();
  const size_t depth = std::max<size_t>(1, limits_.max_json_depth);
  // An event that repeats the last one's opening and goes on with a key is read as `{` and
  // what follows the opening: in that place the reader is in the same state (in the root object,
  // at a key) and the opening's bytes were accepted once, so the event is accepted exactly when
  // it would be whole, and reads as the same Usage (the opening holds nothing extraction reads).
  // Only a short rest is copied: beyond it the opening is a small part of the event.
  thread_local std::array<char, kMaxReadOnBytes> read_on;
  std::string_view doc = json;
  if (repeats_opening(json) && json.size() - opening_size_ < kMaxReadOnBytes) {
    const std::string_view rest = json.substr(opening_size_);
    read_on[0] = '{';
    std::memcpy(read_on.data() + 1, rest.data(), rest.size());
    doc = std::string_view(read_on.data(), rest.size() + 1);
  }
  const bool read_on_opening = doc.data() != json.data();
  ResponseAllowance allowance(doc.size());
  const bool parsed = tape.parse(doc, depth, &allowance) && allowance.fits(tape);
  bool generated = false;
  if (!parsed) {
    bump(parse_failures_);
  } else if (tape.kind(Tape::root()) == Kind::kObject) {  // else: valid JSON, no event
    generated = extract_event(tape, endpoint_, usage_);
    if (sse_ && !read_on_opening && !limits_.parse_every_event) {
      opening_size_ = static_cast<uint32_t>(opening_bytes(tape, kMaxOpeningBytes));
      std::memcpy(opening_.data(), json.data(), opening_size_);
    }
  }
  tape.trim(kRetainedTapeEntries);
  return generated;
}

}  // namespace ramjet::request
