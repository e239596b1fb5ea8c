#include "http1.h"

#include <algorithm>
#include <charconv>

namespace ramjet::bench {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// True when the comma-separated list `value` holds `token` (case-insensitive).
bool has_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    size_t comma = value.find(',');
    std::string_view item = value.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (iequals(item, token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string Url::host_header() const {
  return port == 80 ? host : host + ":" + std::to_string(port);
}

std::string Url::display() const { return "http://" + host + ":" + std::to_string(port) + base_path; }

Result<Url> parse_url(std::string_view text) {
  auto bad = [&](std::string msg) { return Error{"bad_url", std::move(msg)}; };
  constexpr std::string_view kScheme = "http://";
  if (text.substr(0, kScheme.size()) != kScheme) {
    if (text.substr(0, 8) == "https://") return bad("https is not supported; use http://");
    return bad("URL must start with http://");
  }
  text.remove_prefix(kScheme.size());
  size_t slash = text.find('/');
  std::string_view authority = text.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view{} : text.substr(slash);
  if (authority.empty()) return bad("URL has no host");
  Url u;
  if (authority.front() == '[') {  // [v6]:port
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unterminated IPv6 literal");
    u.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    if (!authority.empty() && authority.front() != ':') return bad("junk after IPv6 literal");
  } else {
    size_t colon = authority.find(':');
    u.host = std::string(authority.substr(0, colon));
    authority = colon == std::string_view::npos ? std::string_view{} : authority.substr(colon);
  }
  if (u.host.empty()) return bad("URL has no host");
  if (!authority.empty()) {  // ":port"
    std::string_view p = authority.substr(1);
    unsigned v = 0;
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
    if (p.empty() || ec != std::errc{} || end != p.data() + p.size() || v == 0 || v > 65535)
      return bad("bad port");
    u.port = static_cast<uint16_t>(v);
  }
  if (path.find_first_of("?#") != std::string_view::npos) return bad("URL must not carry a query");
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (path.size() >= 3 && path.substr(path.size() - 3) == "/v1") path.remove_suffix(3);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  u.base_path = std::string(path);
  return u;
}

std::string post_head(const Url& url, std::string_view path, size_t content_length,
                      bool accept_sse) {
  std::string h;
  h.reserve(192 + url.base_path.size() + path.size() + url.host.size());
  h.append("POST ").append(url.base_path).append(path).append(" HTTP/1.1\r\nHost: ");
  h.append(url.host_header());
  h.append("\r\nContent-Type: application/json\r\n");
  if (accept_sse) h.append("Accept: text/event-stream\r\n");
  h.append("Content-Length: ").append(std::to_string(content_length)).append("\r\n\r\n");
  return h;
}

std::string get_head(const Url& url, std::string_view path) {
  std::string h = "GET ";
  h.append(url.base_path).append(path).append(" HTTP/1.1\r\nHost: ").append(url.host_header());
  h.append("\r\nAccept: application/json\r\n\r\n");
  return h;
}

std::string_view ResponseParser::reason(Error e) {
  switch (e) {
    case Error::kNone: return "none";
    case Error::kHeadTooLarge: return "head_too_large";
    case Error::kBadStatusLine: return "bad_status_line";
    case Error::kBadHeader: return "bad_header";
    case Error::kBadLength: return "bad_length";
    case Error::kBadChunk: return "bad_chunk";
  }
  return "unknown";
}

size_t ResponseParser::feed_head(std::string_view data) {
  // The end marker may straddle reads: search from 3 bytes before the old end.
  const size_t old = head_.size();
  head_.append(data);
  size_t from = old >= 3 ? old - 3 : 0;
  size_t end = head_.find("\r\n\r\n", from);
  if (end == std::string::npos) {
    if (head_.size() > limits_.max_head_bytes) return fail(Error::kHeadTooLarge);
    return data.size();
  }
  if (end + 4 > limits_.max_head_bytes) return fail(Error::kHeadTooLarge);
  const size_t used = end + 4 - old;
  head_.resize(end);
  if (!parse_head()) return 0;
  head_.clear();
  return used;
}

bool ResponseParser::parse_head() {
  std::string_view h = head_;
  size_t eol = h.find("\r\n");
  std::string_view line = h.substr(0, eol);
  // "HTTP/1.1 200 OK"
  if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || line[8] != ' ') {
    fail(Error::kBadStatusLine);
    return false;
  }
  const bool http10 = line[7] == '0';
  unsigned code = 0;
  auto [p, ec] = std::from_chars(line.data() + 9, line.data() + 12, code);
  if (ec != std::errc{} || p != line.data() + 12 || code < 100 || code > 999) {
    fail(Error::kBadStatusLine);
    return false;
  }
  status_ = code;
  keep_alive_ = !http10;
  event_stream_ = false;
  chunked_ = false;
  has_length_ = false;
  remaining_ = 0;
  upstream_.clear();
  std::string_view rest = eol == std::string_view::npos ? std::string_view{} : h.substr(eol + 2);
  while (!rest.empty()) {
    size_t e = rest.find("\r\n");
    std::string_view f = rest.substr(0, e);
    rest = e == std::string_view::npos ? std::string_view{} : rest.substr(e + 2);
    size_t colon = f.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      fail(Error::kBadHeader);
      return false;
    }
    std::string_view name = f.substr(0, colon);
    std::string_view value = trim(f.substr(colon + 1));
    if (iequals(name, "content-length")) {
      uint64_t n = 0;
      auto [q, ec2] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (value.empty() || ec2 != std::errc{} || q != value.data() + value.size() ||
          (has_length_ && n != remaining_)) {
        fail(Error::kBadLength);
        return false;
      }
      has_length_ = true;
      remaining_ = n;
    } else if (iequals(name, "transfer-encoding")) {
      chunked_ = has_token(value, "chunked");
    } else if (iequals(name, "connection")) {
      if (has_token(value, "close")) keep_alive_ = false;
      else if (has_token(value, "keep-alive")) keep_alive_ = true;
    } else if (iequals(name, "content-type")) {
      event_stream_ = value.size() >= 17 && iequals(value.substr(0, 17), "text/event-stream");
    } else if (iequals(name, "x-ramjet-upstream")) {
      upstream_ = std::string(value.substr(0, 64));
    }
  }
  if (status_ < 200) {  // 1xx interim response: the real one follows
    state_ = State::kHead;
    return true;
  }
  if (status_ == 204 || status_ == 304) {
    state_ = State::kDone;
  } else if (chunked_) {
    state_ = State::kChunkSize;
  } else if (has_length_) {
    state_ = remaining_ == 0 ? State::kDone : State::kLengthBody;
  } else {
    keep_alive_ = false;
    state_ = State::kCloseBody;
  }
  return true;
}

size_t ResponseParser::take_line(std::string_view data, bool& complete) {
  size_t nl = data.find('\n');
  if (nl == std::string_view::npos) {
    line_.append(data);
    if (line_.size() > limits_.max_chunk_line_bytes) fail(Error::kBadChunk);
    complete = false;
    return data.size();
  }
  line_.append(data.substr(0, nl));
  if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  if (line_.size() > limits_.max_chunk_line_bytes) fail(Error::kBadChunk);
  complete = true;
  return nl + 1;
}

bool ResponseParser::on_eof() {
  if (state_ == State::kCloseBody) state_ = State::kDone;
  return state_ == State::kDone;
}

}  // namespace ramjet::bench
