// net/http: small HTTP/1.1 helpers for the proxy and the probes: hop-by-hop header filtering,
// message heads kept in one reusable arena (no allocation per field), the data plane's own
// message reader, and the bits of HTTP/1.1 serialisation it writes itself.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/optional.hpp>
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
// one arena that keeps its capacity across messages (clear() between them). A parsed head's ids
// are known_field()'s: http::field::unknown for every name the proxy does not act on.
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

// The fields whose id() a parsed head sets (every other name is http::field::unknown): the ones
// the proxy acts on. HeadFields::get() and id() comparisons only work for these.
http::field known_field(std::string_view name);
bool is_known_field(http::field id);

// An HTTP/1.1 message reader, the request side's and the engine side's (RequestParser,
// ResponseParser): the head is read once it is complete (up to the blank line, within the header
// limit), then the body's framing (Content-Length, chunked, or to the end of the connection for
// a response) in one pass per put(). Body bytes are not copied: each piece is recorded as a view
// into the caller's input buffer (valid until that buffer is modified), up to kMaxPieces per put();
// then put() stops with error::need_buffer.
//
// It accepts and refuses what Beast's basic_parser does (http_test and the fuzz targets hold it to
// Beast), except where it is stricter: a line folded onto the one before it (obs-fold; RFC 9112
// lets a server or gateway refuse it), two Transfer-Encoding fields or one with a Content-Length,
// a request's Transfer-Encoding other than `chunked` alone (Beast reads no body for `gzip` and the
// bytes as the next request), and a response's with `chunked` not last are refused; a chunk-size line
// longer than kMaxChunkLine or trailers past kMaxTrailerBytes are refused (Beast keeps asking for
// more); trailer fields are checked for the field grammar only (obs-fold accepted there) and
// otherwise ignored, where Beast also applies framing fields found there. Errors are Beast's
// http::error codes: need_more (wait for bytes), header_limit, body_limit, the rest malformed.
class MessageParser {
 public:
  static constexpr size_t kMaxPieces = 32;
  static constexpr size_t kMaxChunkLine = 4096;
  static constexpr size_t kMaxTrailerBytes = 64 * 1024;

  // The whole head (start line, fields, blank line) must fit `n` bytes.
  void header_limit(std::uint32_t n) { header_limit_ = n; }
  // The most body bytes (none: unlimited). Beast's defaults: 1 MiB for a request, 8 MiB for a
  // response.
  void body_limit(boost::optional<std::uint64_t> n) { body_limit_ = n; }
  // Whether put() goes on into the body once the head is complete (Beast's eager()).
  void eager(bool v) { eager_ = v; }
  // A response without a body whatever its fields say (the answer to a HEAD request).
  void skip(bool v) { skip_body_ = v; }

  // How many bytes of `b` were used. need_more: the head or a chunk line is incomplete;
  // need_buffer: kMaxPieces pieces recorded (wants_input() tells these two from an error).
  size_t put(boost::asio::const_buffer b, boost::system::error_code& ec);
  // Whether put()'s `ec` is need_more or need_buffer: a compare of the value and the category's
  // address where `ec == need_more || ec == need_buffer` calls the comparison twice (once per
  // relayed read).
  static bool wants_input(const boost::system::error_code& ec) {
    static const boost::system::error_category& http_category =
        boost::system::error_code(boost::beast::http::error::need_more).category();
    const int v = ec.value();
    return (v == static_cast<int>(boost::beast::http::error::need_more) ||
            v == static_cast<int>(boost::beast::http::error::need_buffer)) &&
           &ec.category() == &http_category;
  }
  // The connection ended: complete when the body runs to the end of it, else partial_message.
  void put_eof(boost::system::error_code& ec);
  // A read from the connection failed with `ec`: the end of stream (eof) ends the message —
  // put_eof() once some bytes were put, end_of_stream before any (a connection closed between
  // messages), as Beast's read operations report it; any other error stays as it is.
  void read_error(boost::system::error_code& ec);
  // put(), the body's pieces appended to `body` (never need_buffer).
  size_t put_into(boost::asio::const_buffer b, std::string& body, boost::system::error_code& ec);

  bool got_some() const { return got_some_; }
  bool is_header_done() const { return state_ != State::kHead; }
  bool is_done() const { return state_ == State::kDone; }
  // Beast's keep_alive(): HTTP/1.1 unless Connection (or Proxy-Connection) says close; HTTP/1.0
  // only when it says keep-alive; never for a body read to the end of the connection.
  bool keep_alive() const;
  bool chunked() const { return (flags_ & kChunked) != 0; }
  // The head's Content-Length (not what is left of it).
  boost::optional<std::uint64_t> content_length() const {
    return (flags_ & kLength) != 0 ? boost::optional<std::uint64_t>(length_) : boost::none;
  }
  // Whether a chunked body's trailer section held a field (read, never relayed).
  bool had_trailers() const { return trailers_; }

  std::string_view piece(size_t i) const { return {pieces_[i].data, pieces_[i].size}; }
  size_t piece_count() const { return count_; }
  size_t piece_bytes() const { return bytes_; }
  void clear_pieces() {
    count_ = 0;
    bytes_ = 0;
  }

 protected:
  MessageParser(RequestHead& head);
  MessageParser(ResponseHead& head);

 private:
  enum class State : uint8_t { kHead, kLength, kToEof, kChunkLine, kChunkData, kChunkEnd, kTrailer, kDone };
  enum Flag : uint8_t {
    kHttp11 = 1,
    kClose = 2,
    kKeepAlive = 4,
    kLength = 8,
    kChunked = 16,
    kNeedEof = 32,
    kTransferEncoding = 64,
  };

  // Finds the head's end in [p, p + n); parses it when complete. Returns the head's size, or 0.
  size_t head(const char* p, size_t n, boost::system::error_code& ec);
  bool parse_head(const char* p, const char* end, boost::system::error_code& ec);
  bool request_line(const char*& p, const char* line_cr, boost::system::error_code& ec);
  bool status_line(const char*& p, const char* line_cr, boost::system::error_code& ec);
  bool framing_field(http::field id, std::string_view value, boost::system::error_code& ec);
  void start_body(boost::system::error_code& ec);
  size_t body(const char* p, size_t n, boost::system::error_code& ec);
  // The CR of the CRLF ending the line at p, or nullptr with ec: need_more (scanned_ keeps how far
  // it looked), `too_long` past `limit` bytes, bad_line_ending for a CR without LF.
  const char* line_end(const char* p, const char* end, size_t limit, http::error too_long,
                       boost::system::error_code& ec);
  bool record(const char* p, size_t n) {
    if (count_ == kMaxPieces) return false;
    pieces_[count_++] = {p, n};
    bytes_ += n;
    return true;
  }

  RequestHead* request_ = nullptr;
  ResponseHead* response_ = nullptr;
  HeadFields& fields_;
  State state_ = State::kHead;
  uint8_t flags_ = 0;
  bool got_some_ = false;
  bool eager_ = false;
  bool skip_body_ = false;
  bool trailers_ = false;
  std::uint32_t header_limit_ = 8 * 1024;
  boost::optional<std::uint64_t> body_limit_;
  std::uint64_t length_ = 0;   // Content-Length
  std::uint64_t left_ = 0;     // of the body (kLength) or of the chunk (kChunkData)
  static constexpr size_t kLineEnds = 64;
  uint32_t line_ends_[kLineEnds];  // the head's first lines' CR offsets (lines_ of them are set)
  size_t lines_ = 0;
  size_t head_line_ = 0;       // head: where the line being searched starts
  size_t scanned_ = 0;         // head: where the search goes on; chunk line and
                               // trailers: bytes already searched
  struct Piece {
    const char* data;
    size_t size;
  };
  Piece pieces_[kMaxPieces];  // the first count_ are set
  size_t count_ = 0;
  size_t bytes_ = 0;
};

// A client's request: the head into a RequestHead, the body appended to a string (both reused
// across requests). A declared-length body's capacity is reserved by the first put() after the
// head's (never by the head's own).
class RequestParser final : public MessageParser {
 public:
  RequestParser(RequestHead& head, std::string& body);
  // MessageParser::put(), the body's pieces appended to the body string (never need_buffer).
  size_t put(boost::asio::const_buffer b, boost::system::error_code& ec);

 private:
  std::string& body_;
  bool reserved_ = false;
};

// An engine's response: the caller takes the body's pieces (relayed as they are).
class ResponseParser final : public MessageParser {
 public:
  explicit ResponseParser(ResponseHead& head) : MessageParser(head) {}
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
