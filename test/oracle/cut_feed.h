// What the parser oracles (request_reference, response_reference) share: bytes fed in pieces of
// the given sizes in turn, as reads from a socket hand them over; the end of the connection as
// both Beast's readers and ramjet's take it; a head's fields as a list; the fuzz targets' options.
#pragma once

#include <boost/beast/http/error.hpp>

#include "net/http.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ramjet::oracle {

class CutFeed {
 public:
  // `cuts` empty: all the bytes at once.
  CutFeed(std::string_view bytes, const std::vector<size_t>& cuts) : bytes_(bytes), cuts_(cuts) {}
  bool exhausted() const { return fed_ == bytes_.size(); }
  // Appends the next piece to `buffer`.
  void append_next(std::string& buffer) {
    const size_t rest = bytes_.size() - fed_;
    const size_t n = std::min(rest, cuts_.empty() ? rest : std::max<size_t>(1, cuts_[cut_++ % cuts_.size()]));
    buffer.append(bytes_.substr(fed_, n));
    fed_ += n;
  }

 private:
  std::string_view bytes_;
  const std::vector<size_t>& cuts_;
  size_t fed_ = 0;
  size_t cut_ = 0;
};

// The connection ended: put_eof() once some bytes were put, else end_of_stream.
template <typename Parser>
void end_of_connection(Parser& p, boost::system::error_code& ec) {
  if (p.got_some()) {
    p.put_eof(ec);
  } else {
    ec = boost::beast::http::error::end_of_stream;
  }
}

// Whether Beast's refusal (its error message) is one a framing field in a chunked body's trailers
// can cause (Content-Length, Transfer-Encoding, a Connection list it cannot read): Beast applies
// those fields there, ramjet checks a trailer's grammar only and accepts the message.
inline bool trailer_framing_refusal(const std::string& message) {
  namespace http = boost::beast::http;
  for (http::error e : {http::error::bad_content_length, http::error::multiple_content_length,
                        http::error::bad_transfer_encoding, http::error::bad_value}) {
    if (message == http::make_error_code(e).message()) return true;
  }
  return false;
}

// A parsed head's fields, in order, as (name, value) pairs.
inline std::vector<std::pair<std::string, std::string>> field_list(const net::HeadFields& fields) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < fields.size(); ++i) out.emplace_back(std::string(fields.name(i)), std::string(fields.value(i)));
  return out;
}

// The parser fuzz targets' option byte: the low four bits N != 0 cut the bytes into pieces of N, 1
// and 3N in turn (0: all at once); bits 4 and 5 both set give a body limit of 16N; bits 6 and 7
// both set are the target's own switch.
struct FeedOptions {
  std::vector<size_t> cuts;
  int64_t body_limit = -1;  // none
  bool top_bits = false;
};
inline FeedOptions feed_options(uint8_t opt) {
  FeedOptions o;
  if (opt & 0x0F) o.cuts = {static_cast<size_t>(opt & 0x0F), 1, static_cast<size_t>((opt & 0x0F) * 3)};
  if ((opt & 0x30) == 0x30) o.body_limit = static_cast<int64_t>(opt & 0x0F) * 16;
  o.top_bits = (opt & 0xC0) == 0xC0;
  return o;
}

}  // namespace ramjet::oracle
