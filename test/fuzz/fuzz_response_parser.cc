// Fuzz target for net::ResponseParser, the reader of an engine's response (untrusted bytes from
// the network): the head (status line, fields, the framing they declare) and the body
// (Content-Length, chunked, to the end of the connection). Input: one byte of options (how the bytes arrive: 1..16 at a
// time or all at once; a body limit; a HEAD request), then the response bytes. Checks that it
// reads exactly what Beast's own parser reads (test/oracle/response_reference.cc): the same
// verdict, and for an accepted message the same status line, fields, keep-alive, body bytes and
// bytes used — except that with trailer fields only Beast's acceptance is binding (ours checks
// their grammar only; Beast also applies framing fields found there), and a head with a folded
// line or a Transfer-Encoding field may be refused where Beast reads it (ours is stricter). Never crashes, never loops.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "oracle/cut_feed.h"
#include "oracle/request_reference.h"
#include "oracle/response_reference.h"

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
  const bool head_request = o.top_bits;
  using ramjet::oracle::read_response;
  const auto want = read_response(false, bytes, cuts, limit, head_request);
  const auto got = read_response(true, bytes, cuts, limit, head_request);
  check(got.used <= bytes.size());
  if (!got.ok && ramjet::oracle::stricter(bytes, false)) return 0;  // ours refuses what a server may misread
  if (got.trailers || want.trailers) {  // what Beast reads there, ours reads too
    if (want.ok) {
      check(got.ok && got.status == want.status && got.body == want.body && got.used == want.used);
    }
    if (!want.ok && !ramjet::oracle::trailer_framing_refusal(want.error)) check(!got.ok);
    return 0;
  }
  check(got.ok == want.ok);
  check(got.header_done == want.header_done);
  if (want.ok) {
    check(got.status == want.status);
    check(got.reason == want.reason && got.fields == want.fields);
    check(got.keep_alive == want.keep_alive);
    check(got.body == want.body);
    check(got.used == want.used);
  }
  return 0;
}
