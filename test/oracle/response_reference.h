// The reference reader of an engine's response for net::ResponseParser's differential test and
// fuzz_response_parser: Beast's own basic_parser reading head and body, as ramjet's
// ResponseParser did before its body framing was its own. `read_response` drives ours over the
// bytes cut into pieces of `cuts` sizes, as the relay feeds it (put what is buffered, consume
// what was used, append the next piece; put_eof at the end), and Beast's over all of them at
// once, and says what it read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ramjet::oracle {

struct ResponseRead {
  bool ok = false;         // a complete message (or one ended by the connection, read to its end)
  bool header_done = false;
  unsigned status = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> fields;  // the head's
  bool keep_alive = false;
  std::string body;        // the body's bytes, chunk framing removed
  size_t used = 0;         // input bytes consumed by the message
  std::string error;       // the first error (Beast's error message), "" when ok
  bool trailers = false;   // the chunked body had trailer fields (ours: read for their grammar only)
};

// `ours`: net::ResponseParser; otherwise Beast's parser. `body_limit` < 0: none.
ResponseRead read_response(bool ours, std::string_view bytes, const std::vector<size_t>& cuts,
                           int64_t body_limit = -1, bool head_request = false);

}  // namespace ramjet::oracle
