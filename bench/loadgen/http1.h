// loadgen/http1: the client side of HTTP/1.1 as ramjet-bench needs it, with no I/O: base-URL
// parsing, request heads, and an incremental response parser (Content-Length, chunked, or
// until close) that hands body bytes to the caller as they arrive, so SSE can be timed per read.
// Sockets, deadlines and connection reuse live in client.*.
//
// Kept apart from src/net on purpose: ramjet-bench is an independent peer that ramjet's HTTP
// stack is measured and tested against, so a bug in one cannot agree with itself in the other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace ramjet::bench {

struct Url {
  std::string host;
  uint16_t port = 80;
  std::string base_path;  // "" or "/prefix", never with a trailing '/' or a trailing "/v1"
  std::string host_header() const;  // "host:port" ("host" for port 80)
  std::string display() const;      // "http://host:port/base"
};

// "http://host[:port][/base][/v1][/]". https is not supported (loopback benchmarks).
Result<Url> parse_url(std::string_view text);

// "POST <path> HTTP/1.1" head with Host, Content-Type: application/json, Content-Length and
// keep-alive. `accept_sse` adds Accept: text/event-stream.
std::string post_head(const Url& url, std::string_view path, size_t content_length,
                      bool accept_sse);
std::string get_head(const Url& url, std::string_view path);

// Incremental HTTP/1.1 response parser.
class ResponseParser {
 public:
  struct Limits {
    size_t max_head_bytes = 64 * 1024;
    size_t max_chunk_line_bytes = 1024;
  };
  enum class Error { kNone, kHeadTooLarge, kBadStatusLine, kBadHeader, kBadLength, kBadChunk };
  static std::string_view reason(Error e);

  ResponseParser() = default;
  explicit ResponseParser(Limits limits) : limits_(limits) {}

  // Consumes bytes of one response. Body bytes are passed to on_body(std::string_view) as soon as
  // they are parsed. Returns how many bytes were consumed: fewer than `data.size()` only when the
  // message ended (done()) or on error (error() != kNone).
  template <typename OnBody>
  size_t feed(std::string_view data, OnBody&& on_body);
  // The peer closed the connection: completes an until-close body, else the message is truncated.
  // Returns true when the message is complete.
  bool on_eof();

  bool head_done() const { return state_ > State::kHead; }
  bool done() const { return state_ == State::kDone; }
  Error error() const { return error_; }
  unsigned status() const { return status_; }
  bool keep_alive() const { return keep_alive_; }
  bool event_stream() const { return event_stream_; }  // Content-Type: text/event-stream
  const std::string& upstream() const { return upstream_; }  // X-Ramjet-Upstream, or ""

 private:
  enum class State { kHead, kLengthBody, kChunkSize, kChunkData, kChunkCrlf, kTrailers,
                     kCloseBody, kDone, kError };
  size_t feed_head(std::string_view data);
  bool parse_head();  // parses head_ (status line + fields, without the final CRLFCRLF)
  size_t fail(Error e) {
    error_ = e;
    state_ = State::kError;
    return 0;
  }
  // Chunk-size line / trailer line accumulation: returns bytes used, sets `complete`.
  size_t take_line(std::string_view data, bool& complete);

  Limits limits_;
  State state_ = State::kHead;
  Error error_ = Error::kNone;
  std::string head_;
  std::string line_;
  unsigned status_ = 0;
  bool keep_alive_ = true;
  bool event_stream_ = false;
  bool chunked_ = false;
  bool has_length_ = false;
  uint64_t remaining_ = 0;
  std::string upstream_;
};

template <typename OnBody>
size_t ResponseParser::feed(std::string_view data, OnBody&& on_body) {
  size_t used = 0;
  while (used < data.size()) {
    std::string_view rest = data.substr(used);
    switch (state_) {
      case State::kHead: {
        size_t n = feed_head(rest);
        if (state_ == State::kError) return used;
        used += n;
        break;
      }
      case State::kLengthBody: {
        size_t n = rest.size() < remaining_ ? rest.size() : static_cast<size_t>(remaining_);
        on_body(rest.substr(0, n));
        used += n;
        remaining_ -= n;
        if (remaining_ == 0) state_ = State::kDone;
        break;
      }
      case State::kChunkSize: {
        bool complete = false;
        used += take_line(rest, complete);
        if (state_ == State::kError) return used;
        if (complete) {
          // hex size, optional ";ext"
          uint64_t size = 0;
          size_t i = 0, digits = 0;
          for (; i < line_.size(); ++i) {
            char c = line_[i];
            int v = (c >= '0' && c <= '9')   ? c - '0'
                    : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                             : -1;
            if (v < 0) break;
            if (++digits > 15) return used + fail(Error::kBadChunk);
            size = size * 16 + static_cast<uint64_t>(v);
          }
          if (digits == 0 || (i < line_.size() && line_[i] != ';' && line_[i] != ' ' &&
                              line_[i] != '\t'))
            return used + fail(Error::kBadChunk);
          line_.clear();
          remaining_ = size;
          state_ = size == 0 ? State::kTrailers : State::kChunkData;
        }
        break;
      }
      case State::kChunkData: {
        size_t n = rest.size() < remaining_ ? rest.size() : static_cast<size_t>(remaining_);
        on_body(rest.substr(0, n));
        used += n;
        remaining_ -= n;
        if (remaining_ == 0) state_ = State::kChunkCrlf;
        break;
      }
      case State::kChunkCrlf: {
        bool complete = false;
        used += take_line(rest, complete);
        if (state_ == State::kError) return used;
        if (complete) {
          if (!line_.empty()) return used + fail(Error::kBadChunk);
          state_ = State::kChunkSize;
        }
        break;
      }
      case State::kTrailers: {
        bool complete = false;
        used += take_line(rest, complete);
        if (state_ == State::kError) return used;
        if (complete) {
          if (line_.empty()) state_ = State::kDone;
          line_.clear();
        }
        break;
      }
      case State::kCloseBody:
        on_body(rest);
        used += rest.size();
        break;
      case State::kDone:
      case State::kError:
        return used;
    }
  }
  return used;
}

}  // namespace ramjet::bench
