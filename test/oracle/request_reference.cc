#include "oracle/request_reference.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>

#include "net/http.h"
#include "oracle/cut_feed.h"

namespace ramjet::oracle {

namespace {

namespace http = boost::beast::http;
using beast_sv = boost::beast::string_view;

// Beast reading the whole request, as RequestParser did (head fields kept, body appended).
class BeastRequest final : public http::basic_parser<true> {
 public:
  RequestRead r;

 private:
  void on_request_impl(http::verb, beast_sv method, beast_sv target, int version, boost::system::error_code&) override {
    r.method.assign(method.data(), method.size());
    r.target.assign(target.data(), target.size());
    r.version = static_cast<unsigned>(version);
  }
  void on_response_impl(int, beast_sv, int, boost::system::error_code&) override {}
  void on_field_impl(http::field, beast_sv name, beast_sv value, boost::system::error_code&) override {
    if (header_done_) {
      r.trailers = true;
    } else {
      r.fields.emplace_back(std::string(name.data(), name.size()), std::string(value.data(), value.size()));
    }
  }
  void on_header_impl(boost::system::error_code&) override { header_done_ = true; }
  bool header_done_ = false;
  void on_body_init_impl(const boost::optional<std::uint64_t>&, boost::system::error_code&) override {}
  size_t on_body_impl(beast_sv s, boost::system::error_code&) override {
    r.body.append(s.data(), s.size());
    return s.size();
  }
  void on_chunk_header_impl(std::uint64_t, beast_sv, boost::system::error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, beast_sv s, boost::system::error_code&) override {
    r.body.append(s.data(), s.size());
    return s.size();
  }
  void on_finish_impl(boost::system::error_code&) override {}
};

// The proxy's loop: the head first (not eager), then the body.
template <typename Parser>
void drive(Parser& p, RequestRead& r, std::string_view bytes, const std::vector<size_t>& cuts) {
  std::string buffer;
  CutFeed feed(bytes, cuts);
  boost::system::error_code ec;
  for (;;) {
    if (!buffer.empty()) {
      if (p.is_header_done()) p.eager(true);
      const size_t used = p.put(boost::asio::const_buffer(buffer.data(), buffer.size()), ec);
      buffer.erase(0, used);
      r.used += used;
      if (ec == http::error::need_more) ec = {};
      if (ec || p.is_done()) break;
      if (used > 0 && !buffer.empty()) continue;  // the head is done: go on into the body
    }
    if (feed.exhausted()) {  // the connection ends
      end_of_connection(p, ec);
      break;
    }
    feed.append_next(buffer);
  }
  r.ok = !ec && p.is_done();
  r.header_done = p.is_header_done();
  r.keep_alive = r.ok && p.keep_alive();
  r.chunked = r.header_done && p.chunked();
  r.header_limit = ec == http::error::header_limit;
  r.body_limit = ec == http::error::body_limit;
  if (ec) r.error = ec.message();
}

}  // namespace

RequestRead read_request(bool ours, std::string_view bytes, const std::vector<size_t>& cuts, int64_t body_limit,
                         uint32_t header_limit) {
  const boost::optional<std::uint64_t> limit =
      body_limit < 0 ? boost::none : boost::optional<std::uint64_t>(static_cast<std::uint64_t>(body_limit));
  if (ours) {
    net::RequestHead head;
    std::string body;
    net::RequestParser p(head, body);
    p.body_limit(limit);
    p.header_limit(header_limit);
    RequestRead r;
    drive(p, r, bytes, cuts);
    if (r.header_done) {
      r.method = head.method_string;
      r.target = head.target;
      r.version = head.version;
      r.fields = field_list(head.fields);
    }
    r.body = std::move(body);
    r.trailers = p.had_trailers();
    return r;
  }
  BeastRequest p;
  p.body_limit(limit);
  p.header_limit(header_limit);
  // Beast reads the bytes as they are, all at once: fed in small pieces, its final-chunk step
  // asserts (basic_parser.ipp: BOOST_ASSERT(n >= 5) with fewer bytes buffered).
  (void)cuts;
  drive(p, p.r, bytes, {});
  if (!p.r.header_done) {
    p.r.method.clear();
    p.r.target.clear();
    p.r.version = 0;
    p.r.fields.clear();
  }
  return std::move(p.r);
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool stricter(std::string_view bytes, bool request) {
  const size_t end = bytes.find("\r\n\r\n");
  const std::string_view head = bytes.substr(0, end == std::string_view::npos ? bytes.size() : end + 2);
  std::vector<std::string> te;  // Transfer-Encoding values
  bool length = false;
  size_t at = head.find("\r\n");  // past the start line
  while (at != std::string_view::npos && at + 2 < head.size()) {
    const size_t next = head.find("\r\n", at + 2);
    const std::string_view line = head.substr(at + 2, next == std::string_view::npos ? std::string_view::npos : next - at - 2);
    at = next;
    if (!line.empty() && (line[0] == ' ' || line[0] == '\t')) return true;  // obs-fold
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string name = lower(line.substr(0, colon));
    if (name == "transfer-encoding") te.push_back(lower(trim(line.substr(colon + 1))));
    if (name == "content-length") length = true;
  }
  if (te.empty()) return false;
  if (te.size() > 1 || length) return true;
  // One Transfer-Encoding: a request's must be `chunked` alone; a response's `chunked` only last
  // and once, every coding a token.
  std::vector<std::string> codings;
  for (std::string_view v = te[0];;) {
    const size_t comma = v.find(',');
    const std::string_view e = trim(v.substr(0, comma));
    if (!e.empty()) codings.emplace_back(e);
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  if (request) return !(codings.size() == 1 && codings[0] == "chunked");
  for (size_t i = 0; i < codings.size(); ++i) {
    if (codings[i] == "chunked" && i + 1 != codings.size()) return true;
    for (char c : codings[i]) {
      const bool tchar = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
      if (!tchar) return true;
    }
  }
  return false;
}

}  // namespace ramjet::oracle
