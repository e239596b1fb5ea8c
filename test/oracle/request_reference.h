// The reference reader of a client's request for net::RequestParser's differential test and
// fuzz_request_parser: Beast's own request parser reading head and body, as ramjet's
// RequestParser did before it read messages itself. `read_request` drives ours over the bytes cut
// into pieces of `cuts` sizes, as the proxy feeds it (put what is buffered, consume what was used,
// append the next piece; put_eof at the end), and Beast's over all of them at once, and says what
// it read. `stricter` says whether a head has what ours refuses and Beast may read: a folded line
// (obs-fold), two Transfer-Encoding fields or one with a Content-Length, a request's
// Transfer-Encoding other than `chunked` alone, a response's with `chunked` not last (or a coding
// that is not a token).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ramjet::oracle {

struct RequestRead {
  bool ok = false;  // a complete message
  bool header_done = false;
  std::string method;
  std::string target;
  unsigned version = 0;
  std::vector<std::pair<std::string, std::string>> fields;
  bool keep_alive = false;
  bool chunked = false;
  std::string body;   // chunk framing removed
  size_t used = 0;    // input bytes consumed by the message
  std::string error;  // the first error (Beast's error message), "" when ok
  bool header_limit = false;  // the error was header_limit
  bool body_limit = false;    // the error was body_limit
  bool trailers = false;      // the chunked body had trailer fields (ours: read for their grammar only)
};

// `ours`: net::RequestParser; otherwise Beast's. `body_limit` < 0: none.
RequestRead read_request(bool ours, std::string_view bytes, const std::vector<size_t>& cuts, int64_t body_limit = -1,
                         uint32_t header_limit = 256 * 1024);

// Whether the head at the start of `bytes` (a request's when `request`) has one of those.
bool stricter(std::string_view bytes, bool request);

}  // namespace ramjet::oracle
