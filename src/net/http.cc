#include "net/http.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>

#include <charconv>
#include <string>
#include <vector>

namespace ramjet::net {

namespace {

// Calls f(token) for every comma-separated token of a Connection value, blanks trimmed.
template <class F>
void for_each_token(std::string_view v, F&& f) {
  size_t pos = 0;
  while (pos <= v.size()) {
    size_t comma = v.find(',', pos);
    if (comma == std::string_view::npos) comma = v.size();
    std::string_view token = v.substr(pos, comma - pos);
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) token.remove_prefix(1);
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    if (!token.empty()) f(token);
    pos = comma + 1;
  }
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

void RequestParser::on_request_impl(http::verb method, beast_sv method_str, beast_sv target,
                                    int version, boost::system::error_code&) {
  head_.method = method;
  head_.method_string.assign(method_str);
  head_.target.assign(target);
  head_.version = static_cast<unsigned>(version);
}

void ResponseParser::Head::on_response_impl(int code, beast_sv reason, int version, boost::system::error_code&) {
  head_.status = static_cast<unsigned>(code);
  head_.reason.assign(reason);
  head_.version = static_cast<unsigned>(version);
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

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

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

void ResponseParser::start_body() {
  scanned_ = 0;
  if (head_.is_done()) {  // no body: 1xx, 204, 304, a HEAD request's, Content-Length: 0
    state_ = State::kDone;
  } else if (head_.chunked()) {
    state_ = State::kChunkLine;
  } else if (const auto length = head_.content_length()) {
    left_ = *length;  // Beast has checked it against the body limit
    state_ = State::kLength;
  } else {
    state_ = State::kToEof;
  }
}

size_t ResponseParser::put(boost::asio::const_buffer b, boost::system::error_code& ec) {
  ec = {};
  size_t used = 0;
  if (state_ == State::kHead) {
    used = head_.put(b, ec);  // not eager: Beast stops at the end of the head
    if (ec || !head_.is_header_done()) return used;
    start_body();
    if (!eager_) return used;
  }
  if (state_ == State::kDone) return used;
  return used + body(static_cast<const char*>(b.data()) + used, b.size() - used, ec);
}

const char* ResponseParser::line_end(const char* p, const char* end, size_t limit, http::error too_long,
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

size_t ResponseParser::body(const char* const begin, size_t n, boost::system::error_code& ec) {
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
        if (!piece({p, take})) {
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
        if (!piece({p, avail})) {
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
        const char* cr = line_end(p, end, kMaxChunkLine, http::error::bad_chunk, ec);
        if (cr == nullptr) return static_cast<size_t>(p - begin);
        if (static_cast<size_t>(cr - p) > kMaxChunkLine) {
          ec = http::error::bad_chunk;
          return static_cast<size_t>(p - begin);
        }
        const char* q = p;
        std::uint64_t size = 0;
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

void ResponseParser::put_eof(boost::system::error_code& ec) {
  ec = {};
  if (state_ == State::kHead) {
    head_.put_eof(ec);
  } else if (state_ == State::kToEof) {
    state_ = State::kDone;
  } else if (state_ != State::kDone) {
    ec = http::error::partial_message;
  }
}

void append_decimal(HeadBuffer& out, uint64_t v) {
  char* p = out.prepare(20);
  out.advance(static_cast<size_t>(std::to_chars(p, p + 20, v).ptr - p));
}

void append_status_line(HeadBuffer& out, unsigned version, unsigned code, std::string_view fallback) {
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
