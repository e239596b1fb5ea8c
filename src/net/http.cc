#include "net/http.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include <boost/asio/error.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>

#include <cassert>
#include <charconv>
#include <string>
#include <vector>

#include "common/bytes.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ramjet::net {

namespace {

// s = [first, last). A head's strings are reused request after request, so this is a copy within
// their capacity: clear and append, not assign's general replace (three a request).
void assign_bytes(std::string& s, const char* first, const char* last) {
  s.clear();
  s.append(first, static_cast<size_t>(last - first));
}

// Calls f(element) for each element of a comma-separated list, OWS trimmed (empty ones too).
template <class F>
bool for_each_element(std::string_view v, F&& f) {
  for (;;) {
    const size_t comma = v.find(',');
    std::string_view e = v.substr(0, comma);
    while (!e.empty() && (e.front() == ' ' || e.front() == '\t')) e.remove_prefix(1);
    while (!e.empty() && (e.back() == ' ' || e.back() == '\t')) e.remove_suffix(1);
    if (!f(e)) return false;
    if (comma == std::string_view::npos) return true;
    v.remove_prefix(comma + 1);
  }
}

// Calls f(token) for every non-empty comma-separated token of a Connection value.
template <class F>
void for_each_token(std::string_view v, F&& f) {
  for_each_element(v, [&f](std::string_view token) {
    if (!token.empty()) f(token);
    return true;
  });
}

bool fixed_hop_by_hop(http::field f) {
  switch (f) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::proxy_authenticate:
    case http::field::proxy_authorization:
    case http::field::te:
    case http::field::trailer:
    case http::field::transfer_encoding:
    case http::field::upgrade:
    case http::field::content_length:
    case http::field::host:
    case http::field::proxy_connection:
      return true;
    default:
      return false;
  }
}

}  // namespace

void strip_hop_by_hop(http::fields& fields) {
  std::vector<std::string> named;
  for (auto it = fields.find(http::field::connection); it != fields.end() && it->name() == http::field::connection; ++it) {
    for_each_token(it->value(), [&](std::string_view token) { named.emplace_back(token); });
  }
  for (const auto& n : named) fields.erase(n);
  for (auto f : {http::field::connection, http::field::keep_alive, http::field::proxy_authenticate,
                 http::field::proxy_authorization, http::field::te, http::field::trailer,
                 http::field::transfer_encoding, http::field::upgrade, http::field::content_length,
                 http::field::host}) {
    fields.erase(f);
  }
  fields.erase("Trailers");
  fields.erase("Proxy-Connection");
}

void HeadBuffer::grow(size_t n) {
  size_t cap = cap_ < 256 ? 256 : cap_ * 2;
  while (cap - size_ < n) cap *= 2;
  std::unique_ptr<char[]> bigger(new char[cap]);
  if (size_ > 0) std::memcpy(bigger.get(), data_.get(), size_);
  data_ = std::move(bigger);
  cap_ = cap;
}

void HeadFields::add(http::field id, std::string_view name, std::string_view value) {
  Entry e{id, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(name.size()), 0,
          static_cast<uint32_t>(value.size())};
  arena_.append(name);
  e.value_off = static_cast<uint32_t>(arena_.size());
  arena_.append(value);
  fields_.push_back(e);
}

std::string_view HeadFields::get(http::field id) const {
  assert(is_known_field(id));  // a parsed head names only known_field()'s
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (fields_[i].id == id) return value(i);
  }
  return {};
}

std::optional<std::string_view> HeadFields::find(std::string_view name) const {
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (boost::beast::iequals(this->name(i), name)) return value(i);
  }
  return std::nullopt;
}

HopByHop::HopByHop(const HeadFields& fields, std::string_view also) : also_(also) {
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields.id(i) != http::field::connection) continue;
    for_each_token(fields.value(i), [&](std::string_view token) {
      if (count_ < named_.size()) {
        named_[count_++] = token;
      } else {
        more_.push_back(token);
      }
    });
  }
}

bool HopByHop::drop(const HeadFields& fields, size_t i) const {
  const http::field id = fields.id(i);
  if (fixed_hop_by_hop(id)) return true;
  const std::string_view name = fields.name(i);
  if (id == http::field::unknown) {
    if (boost::beast::iequals(name, "Trailers")) return true;
    if (!also_.empty() && boost::beast::iequals(name, also_)) return true;
  }
  for (size_t k = 0; k < count_; ++k) {
    if (boost::beast::iequals(name, named_[k])) return true;
  }
  for (std::string_view n : more_) {
    if (boost::beast::iequals(name, n)) return true;
  }
  return false;
}

namespace {

// RFC 9110 tchar.
constexpr std::array<bool, 256> kTokenChar = [] {
  std::array<bool, 256> t{};
  for (int c = '0'; c <= '9'; ++c) t[static_cast<size_t>(c)] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[static_cast<size_t>(c)] = true;
  for (int c = 'A'; c <= 'Z'; ++c) t[static_cast<size_t>(c)] = true;
  for (char c : std::string_view("!#$%&'*+-.^_`|~")) t[static_cast<unsigned char>(c)] = true;
  return t;
}();

bool token_char(char c) { return kTokenChar[static_cast<unsigned char>(c)]; }
bool bws(char c) { return c == ' ' || c == '\t'; }

// A hex digit's value, -1 for any other byte: one load for each digit of every chunk size.
constexpr std::array<std::int8_t, 256> kHexDigit = [] {
  std::array<std::int8_t, 256> t{};
  t.fill(-1);
  for (int c = '0'; c <= '9'; ++c) t[static_cast<size_t>(c)] = static_cast<std::int8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) t[static_cast<size_t>(c)] = static_cast<std::int8_t>(c - 'a' + 10);
  for (int c = 'A'; c <= 'F'; ++c) t[static_cast<size_t>(c)] = static_cast<std::int8_t>(c - 'A' + 10);
  return t;
}();

int hex_digit(char c) { return kHexDigit[static_cast<unsigned char>(c)]; }

// chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] ), chunk-ext-val =
// token / quoted-string, over the rest of the line [p, end) exactly as Beast's
// parse_chunk_extensions reads it (end stands for the line's CR: BWS before it is refused, a
// quoted string's backslash escapes any byte).
bool chunk_extensions(const char* p, const char* end) {
  for (;;) {
    if (p == end) return true;
    if (bws(*p)) {
      while (p != end && bws(*p)) ++p;
      if (p == end) return false;
    }
    if (*p != ';') return false;
    for (;;) {  // after each ';'
      do ++p;
      while (p != end && bws(*p));
      if (p == end || !token_char(*p)) return false;
      while (p != end && token_char(*p)) ++p;
      bool blank = false;
      while (p != end && bws(*p)) {
        ++p;
        blank = true;
      }
      if (p != end && *p == ';') continue;
      if (p == end || *p != '=') return p == end && !blank;
      break;
    }
    do ++p;  // past '='
    while (p != end && bws(*p));
    if (p == end) return false;
    if (*p != '"') {
      if (!token_char(*p)) return false;
      while (p != end && token_char(*p)) ++p;
      continue;
    }
    for (++p;; ++p) {
      if (p == end) return false;
      if (*p == '"') break;
      if (*p == '\\' && ++p == end) return false;
    }
    ++p;
  }
}

// A field value's bytes: no control characters other than HTAB.
bool field_value(std::string_view v) {
  for (char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7F) return false;
  }
  return true;
}

// A trailer field line (without its CRLF): field-name ":" field-value.
bool trailer_field(std::string_view line) {
  const size_t colon = line.find(':');
  if (colon == 0 || colon == std::string_view::npos) return false;
  for (size_t i = 0; i < colon; ++i) {
    if (!token_char(line[i])) return false;
  }
  return field_value(line.substr(colon + 1));
}

}  // namespace

// --- the message reader ----------------------------------------------------------------------

namespace {

// Bit k set for each control character (< 0x20) or DEL among the first min(16, n) bytes at p.
unsigned control_mask(const char* p, size_t n) {
#if defined(__SSE2__)
  if (n >= 16) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i ctl = _mm_or_si128(_mm_cmpeq_epi8(_mm_min_epu8(a, _mm_set1_epi8(0x1F)), a),
                                     _mm_cmpeq_epi8(a, _mm_set1_epi8(0x7F)));
    return static_cast<unsigned>(_mm_movemask_epi8(ctl));
  }
#endif
  unsigned mask = 0;
  for (size_t k = 0; k < std::min<size_t>(n, 16); ++k) {
    const auto c = static_cast<unsigned char>(p[k]);
    if (c < 0x20 || c == 0x7F) mask |= 1u << k;
  }
  return mask;
}

// The end of a run of token characters at p, which stops at `stop` at the latest (a byte that is
// not one). Header names are letters, digits and '-' nearly always: 16 bytes are checked for
// those at once, and a byte past the run or outside that set is looked at one at a time.
const char* token_end(const char* p, const char* stop) {
#if defined(__SSE2__)
  while (stop - p >= 16) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    auto in = [](__m128i x, char lo, char hi) {
      return _mm_cmpeq_epi8(_mm_min_epu8(_mm_max_epu8(x, _mm_set1_epi8(lo)), _mm_set1_epi8(hi)), x);
    };
    const __m128i ok = _mm_or_si128(_mm_or_si128(in(_mm_or_si128(a, _mm_set1_epi8(0x20)), 'a', 'z'), in(a, '0', '9')),
                                    _mm_cmpeq_epi8(a, _mm_set1_epi8('-')));
    const unsigned other = ~static_cast<unsigned>(_mm_movemask_epi8(ok)) & 0xFFFF;
    if (other != 0) {
      p += __builtin_ctz(other);
      break;
    }
    p += 16;
  }
#endif
  while (token_char(*p)) ++p;
  return p;
}

// The first byte at or after p that is SP, HTAB or a control character: a request target's end
// (the line's CR, `cr`, at the latest).
const char* target_end(const char* p, const char* cr) {
#if defined(__SSE2__)
  while (cr - p >= 16) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const unsigned mask =
        static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(a, _mm_set1_epi8(0x20)), a)));
    if (mask != 0) return p + __builtin_ctz(mask);
    p += 16;
  }
#endif
  while (static_cast<unsigned char>(*p) > ' ') ++p;
  return p;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!token_char(c)) return false;
  }
  return true;
}


// "HTTP/1.0" or "HTTP/1.1" at p (the line goes on to its CR, so the comparison stops there at
// the latest): 10 or 11, else 0.
unsigned http_version(const char* p) {
  if (!(p[0] == 'H' && p[1] == 'T' && p[2] == 'T' && p[3] == 'P' && p[4] == '/' && is_digit(p[5]) && p[6] == '.' &&
        is_digit(p[7]))) {
    return 0;
  }
  const unsigned v = static_cast<unsigned>(p[5] - '0') * 10 + static_cast<unsigned>(p[7] - '0');
  return v == 10 || v == 11 ? v : 0;
}

}  // namespace

http::field known_field(std::string_view n) {
  using f = http::field;
  if (n.empty()) return f::unknown;
  auto is = [n](std::string_view key) { return iequal_token(n, key); };
  // By length, then by first letter: one comparison.
  const char first = static_cast<char>(n[0] | 0x20);
  switch (n.size()) {
    case 2:
      return is("te") ? f::te : f::unknown;
    case 4:
      if (first == 'h') return is("host") ? f::host : f::unknown;
      return is("etag") ? f::etag : f::unknown;
    case 6:
      return is("expect") ? f::expect : f::unknown;
    case 7:
      if (first == 't') return is("trailer") ? f::trailer : f::unknown;
      return is("upgrade") ? f::upgrade : f::unknown;
    case 8:
      return is("location") ? f::location : f::unknown;
    case 10:
      if (first == 'c') return is("connection") ? f::connection : f::unknown;
      if (first == 'k') return is("keep-alive") ? f::keep_alive : f::unknown;
      return is("user-agent") ? f::user_agent : f::unknown;
    case 11:
      return is("retry-after") ? f::retry_after : f::unknown;
    case 12:
      return is("content-type") ? f::content_type : f::unknown;
    case 13:
      if (first == 'a') return is("authorization") ? f::authorization : f::unknown;
      if (first == 'c') return is("cache-control") ? f::cache_control : f::unknown;
      return is("if-none-match") ? f::if_none_match : f::unknown;
    case 14:
      return is("content-length") ? f::content_length : f::unknown;
    case 16:
      return is("proxy-connection") ? f::proxy_connection : f::unknown;
    case 17:
      return is("transfer-encoding") ? f::transfer_encoding : f::unknown;
    case 18:
      return is("proxy-authenticate") ? f::proxy_authenticate : f::unknown;
    case 19:
      return is("proxy-authorization") ? f::proxy_authorization : f::unknown;
    case 29:
      return is("access-control-request-method") ? f::access_control_request_method : f::unknown;
    default:
      return f::unknown;
  }
}

bool is_known_field(http::field id) {
  return id == http::field::unknown || known_field(http::to_string(id)) == id;
}

MessageParser::MessageParser(RequestHead& head) : request_(&head), fields_(head.fields) {
  fields_.clear();
  body_limit_ = 1024 * 1024;  // Beast's request_parser default
}

MessageParser::MessageParser(ResponseHead& head) : response_(&head), fields_(head.fields) {
  fields_.clear();
  body_limit_ = 8 * 1024 * 1024;  // Beast's response_parser default
}

bool MessageParser::keep_alive() const {
  const bool alive = (flags_ & kHttp11) != 0 ? (flags_ & kClose) == 0 : (flags_ & kKeepAlive) != 0;
  return alive && (flags_ & kNeedEof) == 0;
}

size_t MessageParser::put(boost::asio::const_buffer b, boost::system::error_code& ec) {
  ec = {};
  const auto* const p = static_cast<const char*>(b.data());
  const size_t n = b.size();
  size_t used = 0;
  if (state_ == State::kHead) {
    if (n == 0) {
      ec = http::error::need_more;
      return 0;
    }
    got_some_ = true;
    used = head(p, n, ec);
    if (ec || !eager_) return used;
  }
  if (state_ == State::kDone) return used;
  return used + body(p + used, n - used, ec);
}

size_t MessageParser::head(const char* p, size_t n, boost::system::error_code& ec) {
  // One pass to the blank line that ends the head: every line ends in CRLF (a bare CR or LF is
  // refused), and no control character but HTAB is in it (Beast refuses them in every part of a
  // head). The control characters are found 16 bytes at a time; searching resumes where the last
  // put() stopped (each byte is looked at once however the head arrives). Each line's CR is kept
  // for parse_head (the first kLineEnds).
  const size_t limit = std::min<size_t>(n, header_limit_);
  size_t line = head_line_;
  for (size_t base = scanned_; base < limit; base += 16) {
    for (unsigned mask = control_mask(p + base, limit - base); mask != 0; mask &= mask - 1) {
      const size_t i = base + static_cast<size_t>(__builtin_ctz(mask));
      const char c = p[i];
      if (c == '\n') {
        if (i == line || p[i - 1] != '\r') {
          ec = http::error::bad_line_ending;
          return 0;
        }
        if (i == line + 1) {  // a blank line
          if (lines_ == 0) {  // where the start line should be (Beast refuses it too)
            ec = request_ != nullptr ? http::error::bad_method : http::error::bad_version;
            return 0;
          }
          if (!parse_head(p, p + i + 1, ec)) return 0;
          return i + 1;
        }
        if (lines_ < kLineEnds) line_ends_[lines_] = static_cast<uint32_t>(i - 1);
        ++lines_;
        line = i + 1;
      } else if (c == '\r') {
        if (i + 1 < limit && p[i + 1] != '\n') {
          ec = http::error::bad_line_ending;
          return 0;
        }
      } else if (c != '\t') {
        ec = http::error::bad_value;
        return 0;
      }
    }
  }
  head_line_ = line;
  scanned_ = limit > line && p[limit - 1] == '\r' ? limit - 1 : limit;  // a last CR waits for its LF
  ec = n >= header_limit_ ? http::error::header_limit : http::error::need_more;
  return 0;
}

bool MessageParser::request_line(const char*& p, const char* line_cr, boost::system::error_code& ec) {
  // method SP request-target SP HTTP-version CRLF
  const char* const method = p;
  p = token_end(p, line_cr);
  if (p == method || *p != ' ') {
    ec = http::error::bad_method;
    return false;
  }
  assign_bytes(request_->method_string, method, p);
  request_->method = http::string_to_verb(request_->method_string);
  const char* const target = ++p;
  p = target_end(p, line_cr);
  if (p == target || *p != ' ') {
    ec = http::error::bad_target;
    return false;
  }
  assign_bytes(request_->target, target, p);
  ++p;
  const unsigned version = http_version(p);
  if (version == 0 || p[8] != '\r') {
    ec = http::error::bad_version;
    return false;
  }
  request_->version = version;
  if (version == 11) flags_ |= kHttp11;
  p += 10;
  return true;
}

bool MessageParser::status_line(const char*& p, const char* line_cr, boost::system::error_code& ec) {
  // HTTP-version SP 3DIGIT SP reason-phrase CRLF
  const unsigned version = http_version(p);
  if (version == 0 || p[8] != ' ') {
    ec = http::error::bad_version;
    return false;
  }
  p += 9;
  if (!(is_digit(p[0]) && is_digit(p[1]) && is_digit(p[2]) && p[3] == ' ')) {
    ec = http::error::bad_status;
    return false;
  }
  response_->status = static_cast<unsigned>((p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0'));
  p += 4;
  assign_bytes(response_->reason, p, line_cr);
  response_->version = version;
  if (version == 11) flags_ |= kHttp11;
  p = line_cr + 2;
  return true;
}

bool MessageParser::parse_head(const char* p, const char* const end, boost::system::error_code& ec) {
  // [p, end) is a whole head: its lines end in CRLF, the last one blank, and HTAB is its only
  // control character but those (head() checked), so a scan for a delimiter stops at a line's CR
  // at the latest.
  const char* const begin = p;
  // The CR ending line k (head() kept the first kLineEnds).
  auto line_end = [&](size_t k, const char* from) {
    return k < kLineEnds ? begin + line_ends_[k]
                         : static_cast<const char*>(std::memchr(from, '\r', static_cast<size_t>(end - from)));
  };
  if (!(request_ != nullptr ? request_line(p, line_end(0, p), ec) : status_line(p, line_end(0, p), ec))) return false;
  for (size_t k = 1; *p != '\r'; ++k) {
    // field-name ":" OWS field-value OWS CRLF. A line led by SP or HTAB would continue the one
    // before it (obs-fold): refused.
    const char* const name = p;
    const char* cr = line_end(k, p);
    p = token_end(p, cr);
    if (p == name || *p != ':') {
      ec = http::error::bad_field;
      return false;
    }
    const std::string_view n(name, static_cast<size_t>(p - name));
    ++p;
    while (bws(*p)) ++p;
    const char* const value = p;
    p = cr + 2;
    while (cr != value && bws(cr[-1])) --cr;
    const std::string_view v(value, static_cast<size_t>(cr - value));
    const http::field id = known_field(n);
    if ((id == http::field::content_length || id == http::field::transfer_encoding || id == http::field::connection ||
         id == http::field::proxy_connection) &&
        !framing_field(id, v, ec)) {  // the fields framing_field() reads; every other id passes
      return false;
    }
    fields_.add(id, n, v);
  }
  start_body(ec);
  return !ec;
}

bool MessageParser::framing_field(http::field id, std::string_view value, boost::system::error_code& ec) {
  switch (id) {
    case http::field::connection:
    case http::field::proxy_connection:
      // A list of tokens (empty elements allowed); close and keep-alive are what count.
      if (!for_each_element(value, [this](std::string_view e) {
            if (e.empty()) return true;
            if (!is_token(e)) return false;
            if (iequal_token(e, "close")) flags_ |= kClose;
            if (iequal_token(e, "keep-alive")) flags_ |= kKeepAlive;
            return true;
          })) {
        ec = http::error::bad_value;
        return false;
      }
      return true;
    case http::field::content_length: {
      // 1*DIGIT, or a list of the same number (RFC 9110 8.6), in one field or several; never with
      // Transfer-Encoding.
      if ((flags_ & kTransferEncoding) != 0) {
        ec = http::error::bad_content_length;
        return false;
      }
      if (!value.empty() && value.size() <= 19 && (flags_ & kLength) == 0) {  // one number: the usual
        std::uint64_t v = 0;
        size_t i = 0;
        for (; i < value.size() && is_digit(value[i]); ++i) v = v * 10 + static_cast<std::uint64_t>(value[i] - '0');
        if (i == value.size()) {
          length_ = v;
          flags_ |= kLength;
          return true;
        }
      }
      bool multiple = false;
      if (!for_each_element(value, [this, &multiple](std::string_view e) {
            if (e.empty()) return false;
            std::uint64_t v = 0;
            for (char c : e) {
              constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
              const auto d = static_cast<std::uint64_t>(c - '0');
              if (!is_digit(c) || v > (kMax - d) / 10) return false;
              v = v * 10 + d;
            }
            if ((flags_ & kLength) != 0 && v != length_) {
              multiple = true;
              return false;
            }
            length_ = v;
            flags_ |= kLength;
            return true;
          })) {
        ec = multiple ? http::error::multiple_content_length : http::error::bad_content_length;
        return false;
      }
      return true;
    }
    case http::field::transfer_encoding: {
      // Once, never with Content-Length. A request's must be `chunked` alone (its body is read
      // here and forwarded with a length); a response's is chunked when `chunked` is its last
      // coding, else its body runs to the end of the connection.
      if ((flags_ & (kTransferEncoding | kLength)) != 0) {
        ec = http::error::bad_transfer_encoding;
        return false;
      }
      flags_ |= kTransferEncoding;
      size_t codings = 0;
      bool chunked_last = false;
      bool chunked_before = false;
      if (!for_each_element(value, [&](std::string_view e) {
            if (e.empty()) return true;
            if (!is_token(e)) return false;
            chunked_before = chunked_before || chunked_last;
            chunked_last = iequal_token(e, "chunked");
            ++codings;
            return true;
          }) ||
          chunked_before || (request_ != nullptr && (codings != 1 || !chunked_last))) {
        ec = http::error::bad_transfer_encoding;
        return false;
      }
      if (chunked_last) flags_ |= kChunked;
      return true;
    }
    default:
      return true;
  }
}

void MessageParser::start_body(boost::system::error_code& ec) {
  scanned_ = 0;
  State next = State::kDone;
  if (response_ != nullptr &&
      (skip_body_ || response_->status / 100 == 1 || response_->status == 204 || response_->status == 304)) {
    next = State::kDone;  // no body whatever the fields say
  } else if ((flags_ & kLength) != 0) {
    if (length_ > 0 && body_limit_ && length_ > *body_limit_) {
      if (response_ != nullptr) state_ = State::kLength;  // as Beast: a response's head is read
      ec = http::error::body_limit;
      return;
    }
    left_ = length_;
    next = length_ > 0 ? State::kLength : State::kDone;
  } else if ((flags_ & kChunked) != 0) {
    next = State::kChunkLine;
  } else if (response_ != nullptr) {
    flags_ |= kNeedEof;
    next = State::kToEof;
  }
  state_ = next;
}

void MessageParser::read_error(boost::system::error_code& ec) {
  if (ec != boost::asio::error::eof) return;
  ec = {};
  if (got_some_) {
    put_eof(ec);
  } else {
    ec = http::error::end_of_stream;
  }
}

void MessageParser::put_eof(boost::system::error_code& ec) {
  ec = {};
  if (state_ == State::kToEof) {
    state_ = State::kDone;
  } else if (state_ != State::kDone) {
    ec = http::error::partial_message;
  }
}

RequestParser::RequestParser(RequestHead& head, std::string& body) : MessageParser(head), body_(body) {
  body_.clear();
}

size_t RequestParser::put(boost::asio::const_buffer b, boost::system::error_code& ec) {
  // A declared length is reserved when the body is first put, not with the head: the caller
  // checks it against its memory budget in between.
  if (!reserved_ && is_header_done()) {
    reserved_ = true;
    if (const auto length = content_length()) body_.reserve(static_cast<size_t>(*length));
  }
  return put_into(b, body_, ec);
}

size_t MessageParser::put_into(boost::asio::const_buffer b, std::string& body, boost::system::error_code& ec) {
  const auto* const p = static_cast<const char*>(b.data());
  size_t used = 0;
  for (;;) {
    used += put(boost::asio::const_buffer(p + used, b.size() - used), ec);
    for (size_t i = 0; i < count_; ++i) body.append(pieces_[i].data, pieces_[i].size);
    clear_pieces();
    if (ec != http::error::need_buffer) return used;
    ec = {};
  }
}
const char* MessageParser::line_end(const char* p, const char* end, size_t limit, http::error too_long,
                                     boost::system::error_code& ec) {
  const size_t avail = static_cast<size_t>(end - p);
  const size_t from = std::min(scanned_, avail);
  const auto* cr = static_cast<const char*>(std::memchr(p + from, '\r', avail - from));
  if (cr == nullptr || cr + 1 == end) {
    scanned_ = cr == nullptr ? avail : static_cast<size_t>(cr - p);
    ec = scanned_ > limit ? too_long : http::error::need_more;
    return nullptr;
  }
  if (cr[1] != '\n') {
    ec = http::error::bad_line_ending;
    return nullptr;
  }
  scanned_ = 0;
  return cr;
}

size_t MessageParser::body(const char* const begin, size_t n, boost::system::error_code& ec) {
  const char* p = begin;
  const char* const end = begin + n;
  for (;;) {
    const size_t avail = static_cast<size_t>(end - p);
    switch (state_) {
      case State::kHead:
      case State::kDone:
        return static_cast<size_t>(p - begin);
      case State::kLength:
      case State::kChunkData: {
        if (avail == 0) {
          ec = http::error::need_more;
          return static_cast<size_t>(p - begin);
        }
        const size_t take = static_cast<size_t>(std::min<std::uint64_t>(left_, avail));
        if (!record(p, take)) {
          ec = http::error::need_buffer;
          return static_cast<size_t>(p - begin);
        }
        p += take;
        left_ -= take;
        if (left_ == 0) state_ = state_ == State::kLength ? State::kDone : State::kChunkEnd;
        break;
      }
      case State::kToEof: {
        if (avail == 0) return 0;
        if (body_limit_) {
          if (avail > *body_limit_) {
            ec = http::error::body_limit;
            return 0;
          }
        }
        if (!record(p, avail)) {
          ec = http::error::need_buffer;
          return 0;
        }
        if (body_limit_) *body_limit_ -= avail;
        return avail;
      }
      case State::kChunkEnd:
        if (avail < 2) {
          ec = http::error::need_more;
          return static_cast<size_t>(p - begin);
        }
        if (p[0] != '\r' || p[1] != '\n') {
          ec = http::error::bad_chunk;
          return static_cast<size_t>(p - begin);
        }
        p += 2;
        state_ = State::kChunkLine;
        break;
      case State::kChunkLine: {
        // chunk-size [ chunk-ext ] CRLF, the whole line at once.
        if (avail == 0) {
          scanned_ = 0;
          ec = http::error::need_more;
          return static_cast<size_t>(p - begin);
        }
        // What an engine sends: up to 15 hex digits (no overflow) and CRLF, here whole. Read as
        // the general path below would, without its search for the CR and extension check.
        const char* q = p;
        std::uint64_t size = 0;
        for (int d; q != end && q - p < 16 && (d = hex_digit(*q)) >= 0; ++q) size = (size << 4) | static_cast<std::uint64_t>(d);
        const char* cr = q;
        if (q == p || q - p == 16 || end - q < 2 || q[0] != '\r' || q[1] != '\n') {
          cr = line_end(p, end, kMaxChunkLine, http::error::bad_chunk, ec);
          if (cr == nullptr) return static_cast<size_t>(p - begin);
          if (static_cast<size_t>(cr - p) > kMaxChunkLine) {
            ec = http::error::bad_chunk;
            return static_cast<size_t>(p - begin);
          }
          q = p;
          size = 0;
          int d = q == cr ? -1 : hex_digit(*q);
          if (d < 0) {
            ec = http::error::bad_chunk;
            return static_cast<size_t>(p - begin);
          }
          for (; q != cr && (d = hex_digit(*q)) >= 0; ++q) {
            if (size > (std::numeric_limits<std::uint64_t>::max() >> 4)) {
              ec = http::error::bad_chunk;
              return static_cast<size_t>(p - begin);
            }
            size = (size << 4) | static_cast<std::uint64_t>(d);
          }
        } else {
          scanned_ = 0;  // as line_end() leaves it after a whole line
        }
        if (size != 0 && body_limit_) {
          if (size > *body_limit_) {
            ec = http::error::body_limit;
            return static_cast<size_t>(p - begin);
          }
          *body_limit_ -= size;
        }
        if (!chunk_extensions(q, cr)) {
          ec = http::error::bad_chunk_extension;
          return static_cast<size_t>(p - begin);
        }
        p = cr + 2;
        if (size != 0) {
          left_ = size;
          state_ = State::kChunkData;
        } else {
          left_ = 0;  // trailer bytes read so far
          state_ = State::kTrailer;
        }
        break;
      }
      case State::kTrailer: {
        // *( field-line CRLF ) CRLF: a line at a time (fields are checked, then ignored).
        const char* cr = line_end(p, end, kMaxTrailerBytes - left_, http::error::header_limit, ec);
        if (cr == nullptr) return static_cast<size_t>(p - begin);
        const std::string_view line(p, static_cast<size_t>(cr - p));
        left_ += line.size() + 2;
        if (left_ > kMaxTrailerBytes) {
          ec = http::error::header_limit;
          return static_cast<size_t>(p - begin);
        }
        // A line led by SP or HTAB continues the field before it (obs-fold, which Beast accepts).
        const bool fold = !line.empty() && bws(line[0]);
        const bool field = !line.empty() && (fold ? trailers_ && field_value(line) : trailer_field(line));
        if (!line.empty() && !field) {
          ec = http::error::bad_field;
          return static_cast<size_t>(p - begin);
        }
        if (field) trailers_ = true;
        p = cr + 2;
        if (line.empty()) state_ = State::kDone;
        break;
      }
    }
  }
}

void append_decimal(HeadBuffer& out, uint64_t v) {
  char* p = out.prepare(20);
  out.advance(static_cast<size_t>(std::to_chars(p, p + 20, v).ptr - p));
}

void append_status_line(HeadBuffer& out, unsigned version, unsigned code, std::string_view fallback) {
  if (code == 200) {  // nearly every response: no lookup
    out.append(version == 10 ? "HTTP/1.0 200 OK\r\n" : "HTTP/1.1 200 OK\r\n");
    return;
  }
  out.append(version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ");
  append_decimal(out, code);
  out.push_back(' ');
  const http::status s = http::int_to_status(code);
  if (s != http::status::unknown) {
    out.append(http::obsolete_reason(s));
  } else {
    out.append(fallback);
  }
  out.append("\r\n");
}

void append_connection(HeadBuffer& out, unsigned version, bool keep_alive) {
  if (version >= 11) {
    if (!keep_alive) out.append("Connection: close\r\n");
  } else if (keep_alive) {
    out.append("Connection: keep-alive\r\n");
  }
}

}  // namespace ramjet::net
