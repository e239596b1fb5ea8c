#include "common/json_tape.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <system_error>

#include "common/hex.h"
#include "common/utf8.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ramjet::json_tape {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Most JSON from engines is compact: one compare decides that there is nothing to skip.
[[gnu::always_inline]] inline const char* skip_ws(const char* p, const char* end) {
  if (p < end && static_cast<unsigned char>(*p) > ' ') return p;
  while (p < end && is_ws(*p)) ++p;
  return p;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Four hex digits at p (p + 4 <= end checked by the caller), or -1.
int32_t hex4(const char* p) {
  int32_t v = 0;
  for (int k = 0; k < 4; ++k) {
    const int d = hex_value(p[k]);
    if (d < 0) return -1;
    v = v << 4 | d;
  }
  return v;
}


// A double's decimal exponent sign (past DBL_MAX or below the smallest subnormal): whether a
// number from_chars found out of range is too large (simdjson rejects it) rather than too small
// (simdjson reads 0). `s` is a valid JSON number with a fraction or exponent.
bool overflows(std::string_view s) {
  size_t i = s[0] == '-' ? 1 : 0;
  int64_t e10 = 0;
  // Digits before the point, leading zeros skipped.
  while (i < s.size() && s[i] == '0') ++i;
  size_t int_digits = 0;
  while (i < s.size() && is_digit(s[i])) ++i, ++int_digits;
  if (int_digits > 0) {
    e10 = static_cast<int64_t>(int_digits) - 1;
    while (i < s.size() && s[i] != 'e' && s[i] != 'E') ++i;
  } else {
    if (i < s.size() && s[i] == '.') ++i;
    int64_t zeros = 0;
    while (i < s.size() && s[i] == '0') ++i, ++zeros;
    if (i >= s.size() || !is_digit(s[i])) return false;  // zero: never out of range
    e10 = -zeros - 1;
    while (i < s.size() && s[i] != 'e' && s[i] != 'E') ++i;
  }
  if (i < s.size()) {  // exponent, saturated
    ++i;
    bool neg = false;
    if (s[i] == '+' || s[i] == '-') neg = s[i++] == '-';
    int64_t x = 0;
    for (; i < s.size(); ++i) x = x > (int64_t{1} << 40) ? x : x * 10 + (s[i] - '0');
    e10 += neg ? -x : x;
  }
  return e10 > 0;
}

}  // namespace

size_t escape_at(const char* p, const char* end, uint32_t* cp) {
  if (end - p < 2) return 0;
  switch (p[1]) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
      if (cp != nullptr) {
        static constexpr std::string_view kFrom = "\"\\/bfnrt";
        static constexpr std::string_view kTo = "\"\\/\b\f\n\r\t";
        *cp = static_cast<unsigned char>(kTo[kFrom.find(p[1])]);
      }
      return 2;
    case 'u':
      break;
    default:
      return 0;
  }
  if (end - p < 6) return 0;
  const int32_t hi = hex4(p + 2);
  if (hi < 0) return 0;
  if (hi >= 0xDC00 && hi <= 0xDFFF) return 0;  // a lone low surrogate
  if (hi < 0xD800 || hi > 0xDBFF) {
    if (cp != nullptr) *cp = static_cast<uint32_t>(hi);
    return 6;
  }
  // A high surrogate needs its low half right after it.
  if (end - p < 12 || p[6] != '\\' || p[7] != 'u') return 0;
  const int32_t lo = hex4(p + 8);
  if (lo < 0xDC00 || lo > 0xDFFF) return 0;
  if (cp != nullptr) *cp = 0x10000 + ((static_cast<uint32_t>(hi) - 0xD800) << 10) + (static_cast<uint32_t>(lo) - 0xDC00);
  return 12;
}

[[gnu::noinline]] void Tape::grow() {
  // Entries never outnumber the input's bytes (< 2^32, checked by parse()).
  const auto cap = static_cast<Index>(std::min<size_t>(std::max<size_t>(64, size_t{cap_} * 2),
                                                        std::numeric_limits<Index>::max() - 1));
  if (cap_ > 0 && (refused_ || (allowance_ != nullptr &&
                                !allowance_->allow((size_t{used_} + 1) * sizeof(Node), (size_t{cap} + 1) * sizeof(Node))))) {
    // Refused: the rest of the document is read into the entries held, from the first again
    // (parse() then returns false). Indexes already taken stay below cap_ + 1: in bounds.
    refused_ = true;
    used_ = 0;
    return;
  }
  auto bigger = std::make_unique_for_overwrite<Node[]>(size_t{cap} + 1);
  bigger[cap].kind = Kind::kNull;  // the spare is read only as a container opened at a refusal
  if (used_ > 0) std::memcpy(bigger.get(), nodes_, used_ * sizeof(Node));
  storage_ = std::move(bigger);
  nodes_ = storage_.get();
  cap_ = cap;
}

namespace {

// A string's bytes from `p` (just past its opening quote): its closing quote, or nullptr when the
// string is not one simdjson accepts (unterminated, a bad escape, a control character, bad
// UTF-8). `escaped`: it holds a backslash escape.
[[gnu::always_inline]] inline const char* scan_string(const char* p, const char* end, bool& escaped) {
  for (;;) {
    bool found = false;
#if defined(__SSE2__)
    // 16 bytes at a time to the next byte that is not plain printable ASCII: a quote, a
    // backslash, a control character or (signed, below 0x20 too) a byte >= 0x80.
    while (end - p >= 16) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(a, _mm_set1_epi8('"')),
                                                     _mm_cmpeq_epi8(a, _mm_set1_epi8('\\'))),
                                        _mm_cmplt_epi8(a, _mm_set1_epi8(0x20)));
      const unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(stop));
      if (mask != 0) {
        p += __builtin_ctz(mask);
        found = true;
        break;
      }
      p += 16;
    }
#endif
    if (!found) {
      while (p < end && static_cast<unsigned char>(*p) >= 0x20 && static_cast<unsigned char>(*p) < 0x80 &&
             *p != '"' && *p != '\\') {
        ++p;
      }
      if (p == end) return nullptr;  // unterminated
    }
    const unsigned char c = static_cast<unsigned char>(*p);
    if (c == '"') return p;
    if (c == '\\') {
      const size_t n = escape_at(p, end, nullptr);
      if (n == 0) return nullptr;
      escaped = true;
      p += n;
    } else if (c < 0x20) {
      return nullptr;  // simdjson: unescaped control character
    } else {
      const size_t n = ramjet::utf8_sequence(reinterpret_cast<const unsigned char*>(p),
                                             reinterpret_cast<const unsigned char*>(end));
      if (n == 0) return nullptr;
      p += n;
    }
  }
}

}  // namespace

bool Tape::parse(std::string_view json, size_t max_depth, Allowance* allowance) {
  used_ = 0;
  allowance_ = allowance;
  refused_ = false;
  unescaped_.clear();
  input_ = json;
  if (json.size() >= std::numeric_limits<uint32_t>::max()) return false;
  const char* const base = json.data();
  const char* p = base;
  const char* const end = p + json.size();
  // The tape's storage and end live in locals while it is read (written back at the end): a
  // store into an entry cannot alias them, and they stay in registers.
  Node* nodes = nodes_;
  Index used = 0;
  Index cap = cap_;
  auto add = [&](Kind kind) __attribute__((always_inline)) -> Node& {
    if (used == cap) [[unlikely]] {
      used_ = used;
      grow();
      nodes = nodes_;
      cap = cap_;
      used = used_;  // 0 when refused
    }
    Node& n = nodes[used];
    n.kind = kind;
    n.escaped = false;
    n.next = ++used;
    return n;
  };
  // The string whose opening quote is at q: its entry; past its closing quote, or nullptr.
  auto string_at = [&](const char* q) __attribute__((always_inline)) -> const char* {
    bool escaped = false;
    const char* const close = scan_string(q + 1, end, escaped);
    if (close == nullptr) return nullptr;
    Node& n = add(Kind::kString);
    n.escaped = escaped;
    n.copy.at = 0;
    n.off = static_cast<uint32_t>(q + 1 - base);
    n.len = static_cast<uint32_t>(close - (q + 1));
    return close + 1;
  };
  size_t depth = 0;  // the containers open around p: open[0..depth) holds their entries
  Index* open = open_.data();
  size_t open_cap = open_.size();
  bool in_object = false;
  bool ok = false;

  p = skip_ws(p, end);
value:
  if (p == end) goto done;
  if (*p == '"') {
    p = string_at(p);
    if (p == nullptr) goto done;
    goto after_value;
  }
  switch (*p) {
    case '{':
    case '[': {
      const bool object = *p == '{';
      const Index self = used;
      add(object ? Kind::kObject : Kind::kArray);
      p = skip_ws(p + 1, end);
      if (p == end) goto done;
      if (*p == (object ? '}' : ']')) {  // empty: not a level of nesting
        ++p;
        goto after_value;
      }
      if (++depth >= max_depth) goto done;
      if (depth > open_cap) [[unlikely]] {
        open_.resize(std::max<size_t>(16, 2 * open_cap));
        open = open_.data();
        open_cap = open_.size();
      }
      open[depth - 1] = self;
      in_object = object;
      if (object) goto key;
      goto value;
    }
    case 't':
      if (end - p < 4 || std::memcmp(p, "true", 4) != 0) goto done;
      add(Kind::kTrue);
      p += 4;
      goto after_value;
    case 'f':
      if (end - p < 5 || std::memcmp(p, "false", 5) != 0) goto done;
      add(Kind::kFalse);
      p += 5;
      goto after_value;
    case 'n':
      if (end - p < 4 || std::memcmp(p, "null", 4) != 0) goto done;
      add(Kind::kNull);
      p += 4;
      goto after_value;
    default: {
      // A non-negative integer of at most 19 digits (what engines write: counts, indexes,
      // timestamps) is read here; anything else by parse_number().
      const char* q = p;
      uint64_t v = 0;
      if (*q == '0') {
        ++q;
      } else {
        const char* const last = end - p > 19 ? p + 19 : end;  // 19 digits cannot pass 2^64
        for (; q != last; ++q) {
          const auto d = static_cast<unsigned>(static_cast<unsigned char>(*q)) - '0';
          if (d > 9) break;
          v = v * 10 + d;
        }
      }
      if (q != p && (q == end || (!is_digit(*q) && *q != '.' && *q != 'e' && *q != 'E'))) {
        add(Kind::kUint).u = v;
        p = q;
        goto after_value;
      }
      if (!parse_number(p, end, add(Kind::kUint))) goto done;
      goto after_value;
    }
  }

key:  // at an object member, p on its first byte
  if (*p != '"') goto done;
  p = string_at(p);
  if (p == nullptr) goto done;
  if (p < end && *p == ':') {  // compact JSON
    ++p;
  } else {
    p = skip_ws(p, end);
    if (p == end || *p != ':') goto done;
    ++p;
  }
  p = skip_ws(p, end);
  goto value;

after_value:
  p = skip_ws(p, end);
  if (depth == 0) {
    ok = p == end;
    goto done;
  }
  if (p == end) goto done;
  if (*p == ',') {
    p = skip_ws(p + 1, end);
    if (p == end) goto done;
    if (in_object) goto key;
    goto value;
  }
  if (*p != (in_object ? '}' : ']')) goto done;
  ++p;
  nodes[open[depth - 1]].next = used;
  --depth;
  in_object = depth != 0 && nodes[open[depth - 1]].kind == Kind::kObject;
  goto after_value;

done:
  used_ = used;
  allowance_ = nullptr;
  return ok && !refused_;
}

bool Tape::parse_number(const char*& p, const char* end, Node& node) {
  const char* const begin = p;
  const bool negative = *p == '-';
  if (negative) ++p;
  if (p == end) return false;
  if (*p == '0') {
    ++p;
  } else if (*p >= '1' && *p <= '9') {
    while (p < end && is_digit(*p)) ++p;
  } else {
    return false;
  }
  const char* const int_end = p;
  bool is_double = false;
  bool exponent = false;
  if (p < end && *p == '.') {
    ++p;
    if (p == end || !is_digit(*p)) return false;
    while (p < end && is_digit(*p)) ++p;
    is_double = true;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    ++p;
    if (p < end && (*p == '+' || *p == '-')) ++p;
    if (p == end || !is_digit(*p)) return false;
    while (p < end && is_digit(*p)) ++p;
    is_double = exponent = true;
  }
  if (is_double) {
    // Its value is read when asked for (double_value()): most doubles in a body (temperature,
    // top_p) never are. Only whether it is out of range is decided here, and without an
    // exponent and with at most 308 characters before the point (a sign among them) it cannot
    // pass DBL_MAX.
    node.kind = Kind::kDouble;
    node.off = static_cast<uint32_t>(begin - input_.data());
    node.len = static_cast<uint32_t>(p - begin);
    if (!exponent && int_end - begin <= 308) return true;
    double v = 0;
    const auto r = std::from_chars(begin, p, v);
    if (r.ec == std::errc::result_out_of_range) {
      if (overflows(std::string_view(begin, static_cast<size_t>(p - begin)))) return false;
    } else if (r.ec != std::errc() || r.ptr != p) {
      return false;
    }
    return true;
  }
  // An integer: it must fit 64 bits (simdjson: uint64 when positive, int64 when negative).
  uint64_t v = 0;
  const char* const digits = negative ? begin + 1 : begin;
  if (int_end - digits <= 19) {  // cannot pass 2^64
    for (const char* q = digits; q < int_end; ++q) v = v * 10 + static_cast<uint64_t>(*q - '0');
  } else {
    for (const char* q = digits; q < int_end; ++q) {
      const uint64_t d = static_cast<uint64_t>(*q - '0');
      if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return false;
      v = v * 10 + d;
    }
  }
  if (!negative) {
    node.kind = Kind::kUint;
    node.u = v;
  } else if (v == 0) {
    node.kind = Kind::kUint;  // -0: simdjson's int64 0
    node.u = 0;
  } else {
    if (v > (uint64_t{1} << 63)) return false;
    node.kind = Kind::kNegInt;
    node.u = v;
  }
  return true;
}

double Tape::double_value(Index i) const {
  const Node& n = nodes_[i];
  const char* const begin = input_.data() + n.off;
  double v = 0;
  // parse() read it as a JSON number and refused one past DBL_MAX: out of range is below the
  // smallest subnormal, read as 0 (as simdjson reads it).
  if (std::from_chars(begin, begin + n.len, v).ec == std::errc::result_out_of_range) return *begin == '-' ? -0.0 : 0.0;
  return v;
}

std::string_view Tape::unescaped(Index i) const {
  Node& n = nodes_[i];
  if (n.copy.at == 0) {
    if (unescaped_.capacity() < input_.size()) unescaped_.reserve(input_.size());
    const size_t at = unescaped_.size();
    const std::string_view raw = input_.substr(n.off, n.len);
    const char* p = raw.data();
    const char* const end = p + raw.size();
    while (p < end) {
      const char* bs = static_cast<const char*>(std::memchr(p, '\\', static_cast<size_t>(end - p)));
      if (bs == nullptr) bs = end;
      unescaped_.append(p, bs);
      if (bs == end) break;
      uint32_t cp = 0;
      p = bs + escape_at(bs, end, &cp);  // validated by parse()
      append_utf8(unescaped_, cp);
    }
    n.copy.at = static_cast<uint32_t>(at + 1);
    n.copy.size = static_cast<uint32_t>(unescaped_.size() - at);
  }
  return {unescaped_.data() + n.copy.at - 1, n.copy.size};
}

void Tape::trim(size_t retained_nodes) {
  if (cap_ > retained_nodes) {
    storage_.reset();
    nodes_ = nullptr;
    cap_ = 0;
    used_ = 0;
  }
  if (open_.capacity() > retained_nodes) std::vector<Index>().swap(open_);
  if (unescaped_.capacity() > retained_nodes) std::string().swap(unescaped_);
  unescaped_.clear();
  input_ = {};
}

}  // namespace ramjet::json_tape
