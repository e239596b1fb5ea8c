// Fuzz target for net::RequestParser, the reader of a client's request (untrusted bytes from the
// network): the head (request line, fields, the framing they declare) and the body (Content-Length
// or chunked). Input: one byte of options (how the bytes arrive: 1..16 at a time or all at once;
// a body limit; a small header limit), then the request bytes. Checks that it reads exactly what
// Beast's own parser reads (test/oracle/request_reference.cc): the same verdict, and for a read
// head the same request line and fields, for an accepted message the same keep-alive, body bytes
// and bytes used — except that a head with a folded line or a Transfer-Encoding field may be
// refused where Beast reads it (ours is stricter there), and with trailer fields only Beast's
// acceptance is binding (ours checks their grammar only; Beast also applies framing fields found
// there). Never crashes, never loops.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "oracle/cut_feed.h"
#include "oracle/request_reference.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t opt = data[0];
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  const ramjet::oracle::FeedOptions o = ramjet::oracle::feed_options(opt);
  const std::vector<size_t>& cuts = o.cuts;
  const int64_t limit = o.body_limit;
  const uint32_t header_limit = o.top_bits ? 64 : 256 * 1024;
  using ramjet::oracle::read_request;
  const auto got = read_request(true, bytes, cuts, limit, header_limit);
  check(got.used <= bytes.size());
  if (header_limit < 1024) {
    // Beast's limit bounds one parse step, ours the whole head: only ours is checked.
    check(!got.header_done || bytes.find("\r\n\r\n") + 4 <= header_limit);
    return 0;
  }
  const auto want = read_request(false, bytes, cuts, limit, header_limit);
  if (!got.ok && ramjet::oracle::stricter(bytes, true)) return 0;  // ours refuses what a server may misread
  if (got.trailers || want.trailers) {  // what Beast reads there, ours reads too
    if (want.ok) check(got.ok && got.body == want.body && got.used == want.used);
    if (!want.ok && !ramjet::oracle::trailer_framing_refusal(want.error)) check(!got.ok);
    return 0;
  }
  check(got.ok == want.ok);
  check(got.header_done == want.header_done);
  check(got.body_limit == want.body_limit);
  if (want.header_done) {
    check(got.method == want.method && got.target == want.target && got.version == want.version);
    check(got.fields == want.fields);
    check(got.chunked == want.chunked);
  }
  if (want.ok) {
    check(got.keep_alive == want.keep_alive);
    check(got.body == want.body);
    check(got.used == want.used);
  }
  return 0;
}
