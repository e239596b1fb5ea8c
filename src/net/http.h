// net/http: small HTTP/1.1 helpers for the proxy and the probes: hop-by-hop header filtering,
// message heads kept in one reusable arena (Beast's parser underneath, no allocation per
// field), and the bits of HTTP/1.1 serialisation the data plane writes itself.
#pragma once

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/verb.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ramjet::net {

namespace http = boost::beast::http;
using beast_sv = boost::beast::string_view;

// Removes hop-by-hop headers (RFC 9110 §7.6.1: Connection and every header it names,
// Keep-Alive, Proxy-Authenticate, Proxy-Authorization, TE, Trailer(s), Transfer-Encoding,
// Upgrade), plus Content-Length and Host, which the proxy sets itself.
void strip_hop_by_hop(http::fields& fields);

// A growable byte buffer for serialised heads and header arenas. Its capacity is kept across
// clear(), and appending is a bounds check and a memcpy (no per-append bookkeeping of
// std::string, no zero-filling).
class HeadBuffer {
 public:
  void clear() { size_ = 0; }
  size_t size() const { return size_; }
  const char* data() const { return data_.get(); }
  std::string_view view() const { return {data_.get(), size_}; }
  operator std::string_view() const { return view(); }
  void append(std::string_view s) {
    if (s.empty()) return;
    std::memcpy(prepare(s.size()), s.data(), s.size());
    size_ += s.size();
  }
  void push_back(char c) {
    *prepare(1) = c;
    ++size_;
  }
  // Room for n more bytes at the returned pointer; commit what was written with advance().
  char* prepare(size_t n) {
    if (cap_ - size_ < n) grow(n);
    return data_.get() + size_;
  }
  void advance(size_t n) { size_ += n; }

 private:
  void grow(size_t n);
  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
  size_t cap_ = 0;
};

// The header fields of one message head, in arrival order with their original case, stored in
// one arena that keeps its capacity across messages (clear() between them).
class HeadFields {
 public:
  void clear() {
    arena_.clear();
    fields_.clear();
  }
  void add(http::field id, std::string_view name, std::string_view value);
  size_t size() const { return fields_.size(); }
  http::field id(size_t i) const { return fields_[i].id; }
  std::string_view name(size_t i) const { return {arena_.data() + fields_[i].name_off, fields_[i].name_len}; }
  std::string_view value(size_t i) const { return {arena_.data() + fields_[i].value_off, fields_[i].value_len}; }
  // The first value of a known field, or "" when absent.
  std::string_view get(http::field id) const;
  // The first value of the field named `name` (any case), or nullopt when absent.
  std::optional<std::string_view> find(std::string_view name) const;

 private:
  struct Entry {
    http::field id;
    uint32_t name_off, name_len, value_off, value_len;
  };
  HeadBuffer arena_;
  std::vector<Entry> fields_;
};

// Decides which fields of a head are hop-by-hop, with the same rules as strip_hop_by_hop
// (including every header named in Connection), plus `also` (compared case-insensitively).
class HopByHop {
 public:
  explicit HopByHop(const HeadFields& fields, std::string_view also = {});
  bool drop(const HeadFields& fields, size_t i) const;

 private:
  std::string_view also_;
  std::array<std::string_view, 8> named_{};
  size_t count_ = 0;
  std::vector<std::string_view> more_;  // Connection naming more than 8 headers (rare)
};

// A request head: the request line and its fields.
struct RequestHead {
  http::verb method = http::verb::unknown;
  std::string method_string;
  std::string target;
  unsigned version = 11;
  HeadFields fields;
};

// A response head: the status line and its fields.
struct ResponseHead {
  unsigned status = 0;
  std::string reason;
  unsigned version = 11;
  HeadFields fields;
};

// Beast's request parser writing the head into a RequestHead and the body into a string (both
// reused across requests). Trailer fields of a chunked body are ignored. A declared-length body
// is given `body_slack` spare bytes of capacity past its end (a parser that reads past the data,
// such as request/prepare's, can then read it in place).
class RequestParser final : public http::basic_parser<true> {
 public:
  RequestParser(RequestHead& head, std::string& body, size_t body_slack = 0)
      : head_(head), body_(body), body_slack_(body_slack) {
    head_.fields.clear();
    body_.clear();
  }

 private:
  void on_request_impl(http::verb method, beast_sv method_str, beast_sv target,
                       int version, boost::system::error_code&) override;
  void on_response_impl(int, beast_sv, int, boost::system::error_code&) override {}
  void on_field_impl(http::field id, beast_sv name, beast_sv value,
                     boost::system::error_code&) override {
    if (!header_done_) head_.fields.add(id, name, value);
  }
  void on_header_impl(boost::system::error_code&) override { header_done_ = true; }
  void on_body_init_impl(const boost::optional<std::uint64_t>& length, boost::system::error_code&) override {
    if (length) body_.reserve(static_cast<size_t>(*length) + body_slack_);
  }
  size_t on_body_impl(beast_sv s, boost::system::error_code&) override {
    body_.append(s);
    return s.size();
  }
  void on_chunk_header_impl(std::uint64_t, beast_sv, boost::system::error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, beast_sv s, boost::system::error_code&) override {
    body_.append(s);
    return s.size();
  }
  void on_finish_impl(boost::system::error_code&) override {}

  RequestHead& head_;
  std::string& body_;
  size_t body_slack_;
  bool header_done_ = false;
};

// An engine's response: Beast's parser reads the head into a ResponseHead, then the body's
// framing is read here (Content-Length, chunked, or to the end of the connection) in one pass
// per put(), without Beast's per-step callbacks (about 2,000 instructions less for an 8-event
// stream). Body bytes are not copied: each piece is recorded as a view into the caller's input
// buffer (valid until that buffer is modified), up to kMaxPieces per put(); then put() stops with
// error::need_buffer. Accepts and refuses what Beast does, with these differences: a chunk-size
// line (size and extensions) longer than kMaxChunkLine, or trailers past kMaxTrailerBytes, are
// refused (Beast keeps asking for more); trailer fields are checked for the field grammar only
// (obs-fold continuations accepted) and otherwise ignored, where Beast also applies framing fields
// found there (a Content-Length it refuses, a "Connection: close" that ends keep-alive; the
// connection is then reused, and a stale close is retried as any). http_test and
// fuzz_response_parser hold it to Beast's own parser.
class ResponseParser {
 public:
  static constexpr size_t kMaxPieces = 32;
  static constexpr size_t kMaxChunkLine = 4096;
  static constexpr size_t kMaxTrailerBytes = 64 * 1024;

  explicit ResponseParser(ResponseHead& head) : head_(head) {}

  void header_limit(std::uint32_t n) { head_.header_limit(n); }
  void body_limit(boost::optional<std::uint64_t> n) {
    head_.body_limit(n);
    body_limit_ = n;
  }
  // Whether put() goes on into the body once the head is complete (Beast's eager()).
  void eager(bool v) { eager_ = v; }
  void skip(bool v) { head_.skip(v); }

  // Beast's put(): how many bytes of `b` were used. need_more: a head or chunk line is
  // incomplete; need_buffer: kMaxPieces pieces recorded.
  size_t put(boost::asio::const_buffer b, boost::system::error_code& ec);
  // The connection ended: complete when the body runs to the end of it, else partial_message.
  void put_eof(boost::system::error_code& ec);

  bool got_some() const { return head_.got_some(); }
  bool is_header_done() const { return head_.is_header_done(); }
  bool is_done() const { return state_ == State::kDone; }
  bool keep_alive() const { return head_.keep_alive(); }
  // Whether a chunked body's trailer section held a field (read, never relayed).
  bool had_trailers() const { return trailers_; }
  // The head's Content-Length (not what is left of it).
  boost::optional<std::uint64_t> content_length() const { return head_.content_length(); }

  const std::string_view* pieces() const { return pieces_.data(); }
  size_t piece_count() const { return count_; }
  size_t piece_bytes() const { return bytes_; }
  void clear_pieces() {
    count_ = 0;
    bytes_ = 0;
  }

 private:
  class Head final : public http::basic_parser<false> {
   public:
    explicit Head(ResponseHead& head) : head_(head) { head_.fields.clear(); }

   private:
    void on_request_impl(http::verb, beast_sv, beast_sv, int, boost::system::error_code&) override {}
    void on_response_impl(int code, beast_sv reason, int version, boost::system::error_code&) override;
    void on_field_impl(http::field id, beast_sv name, beast_sv value, boost::system::error_code&) override {
      head_.fields.add(id, name, value);
    }
    void on_header_impl(boost::system::error_code&) override {}
    void on_body_init_impl(const boost::optional<std::uint64_t>&, boost::system::error_code&) override {}
    size_t on_body_impl(beast_sv, boost::system::error_code&) override { return 0; }  // never: not eager
    void on_chunk_header_impl(std::uint64_t, beast_sv, boost::system::error_code&) override {}
    size_t on_chunk_body_impl(std::uint64_t, beast_sv, boost::system::error_code&) override { return 0; }
    void on_finish_impl(boost::system::error_code&) override {}

    ResponseHead& head_;
  };
  enum class State : uint8_t { kHead, kLength, kToEof, kChunkLine, kChunkData, kChunkEnd, kTrailer, kDone };

  void start_body();
  size_t body(const char* p, size_t n, boost::system::error_code& ec);
  // The CR of the CRLF ending the line at p, or nullptr with ec: need_more (scanned_ keeps how far
  // it looked), `too_long` past `limit` bytes, bad_line_ending for a CR without LF.
  const char* line_end(const char* p, const char* end, size_t limit, http::error too_long,
                       boost::system::error_code& ec);
  bool piece(std::string_view s) {
    if (count_ == pieces_.size()) return false;
    pieces_[count_++] = s;
    bytes_ += s.size();
    return true;
  }

  Head head_;
  State state_ = State::kHead;
  bool eager_ = false;
  bool trailers_ = false;
  boost::optional<std::uint64_t> body_limit_;
  std::uint64_t left_ = 0;     // of the body (kLength) or of the chunk (kChunkData)
  size_t scanned_ = 0;         // bytes of a chunk line or the trailers already searched
  std::array<std::string_view, kMaxPieces> pieces_;
  size_t count_ = 0;
  size_t bytes_ = 0;
};

// --- serialisation -------------------------------------------------------------------------

// "HTTP/1.x <code> <reason>\r\n": the standard reason for a known code, else `fallback`.
void append_status_line(HeadBuffer& out, unsigned version, unsigned code, std::string_view fallback);
// "<name>: <value>\r\n"
inline void append_field(HeadBuffer& out, std::string_view name, std::string_view value) {
  char* p = out.prepare(name.size() + value.size() + 4);
  std::memcpy(p, name.data(), name.size());
  p += name.size();
  *p++ = ':';
  *p++ = ' ';
  if (!value.empty()) std::memcpy(p, value.data(), value.size());
  p += value.size();
  *p++ = '\r';
  *p = '\n';
  out.advance(name.size() + value.size() + 4);
}
void append_decimal(HeadBuffer& out, uint64_t v);
// Connection header for a response to an HTTP/1.`version` client, as Beast's keep_alive() does
// on a message without one: HTTP/1.1 says "close" when not keeping alive, HTTP/1.0 says
// "keep-alive" when keeping alive; otherwise nothing.
void append_connection(HeadBuffer& out, unsigned version, bool keep_alive);

}  // namespace ramjet::net
