// request/prepare/canonical: canonical prompt bytes and chained XXH3 fingerprints. The rules
// are one writer template (canonical_writer.h) over a JSON view and a sink: the hashing sink
// (production) never materialises the bytes, the string sink (tests, debugging) returns them.
// This file runs it over a Boost.JSON value; prepare.cc also runs it over common/json_tape.
#include "request/prepare/canonical.h"

#include <boost/json.hpp>

#include "request/prepare/canonical_writer.h"

namespace ramjet::request {
namespace detail {

// ryu/serde_json layout from the shortest round-trip digits that std::to_chars produces.
size_t format_double(double d, char* out) {
  char sci[40];
  auto r = std::to_chars(sci, sci + sizeof sci, d, std::chars_format::scientific);
  const char* p = sci;
  char* o = out;
  if (*p == '-') *o++ = *p++;
  char digits[24];
  size_t len = 0;
  for (; *p != 'e'; ++p) {
    if (*p != '.') digits[len++] = *p;
  }
  int exp10 = 0;
  std::from_chars(p + 1 + (p[1] == '+' ? 1 : 0), r.ptr, exp10);
  const int length = static_cast<int>(len);
  const int kk = exp10 + 1;  // 10^(kk-1) <= |d| < 10^kk
  const int k = kk - length;
  if (0 <= k && kk <= 16) {  // 1234e7 -> 12340000000.0
    std::memcpy(o, digits, len);
    o += len;
    for (int i = 0; i < k; ++i) *o++ = '0';
    *o++ = '.';
    *o++ = '0';
  } else if (0 < kk && kk <= 16) {  // 1234e-2 -> 12.34
    std::memcpy(o, digits, static_cast<size_t>(kk));
    o += kk;
    *o++ = '.';
    std::memcpy(o, digits + kk, len - static_cast<size_t>(kk));
    o += len - static_cast<size_t>(kk);
  } else if (-5 < kk && kk <= 0) {  // 1234e-6 -> 0.001234
    *o++ = '0';
    *o++ = '.';
    for (int i = 0; i < -kk; ++i) *o++ = '0';
    std::memcpy(o, digits, len);
    o += len;
  } else {  // 1e30, 1.234e33, 1e-7
    *o++ = digits[0];
    if (len > 1) {
      *o++ = '.';
      std::memcpy(o, digits + 1, len - 1);
      o += len - 1;
    }
    *o++ = 'e';
    o = std::to_chars(o, o + 8, kk - 1).ptr;
  }
  return static_cast<size_t>(o - out);
}

}  // namespace detail

namespace {

std::optional<detail::BoostView> view_of(const boost::json::value& root) {
  return detail::BoostView(root);
}

}  // namespace

Fingerprints fingerprint_request(Endpoint /*endpoint*/, const boost::json::value& root,
                                 std::string_view body, const FingerprintConfig& config) {
  Fingerprints out;
  detail::fingerprint_view(view_of(root), body, config, out);  // a Boost view is never unsure
  return out;
}

std::string canonical_prompt_bytes(const boost::json::value& root, std::string_view body,
                                   const FingerprintConfig& config, bool* raw_fallback) {
  std::string out;
  detail::StringSink sink(config.max_prefix_bytes, out);
  const bool raw =
      detail::write_prompt(view_of(root), body, config, sink) == detail::WriteResult::kRaw;
  if (raw_fallback != nullptr) *raw_fallback = raw;
  return out;
}

std::vector<uint64_t> chain_fingerprints(std::string_view bytes, uint64_t chunk_bytes) {
  std::vector<uint64_t> out;
  if (chunk_bytes == 0) return out;
  detail::ChainSink sink(chunk_bytes, UINT64_MAX, out);
  sink.put(bytes.data(), bytes.size());
  sink.finish();
  return out;
}

void namespace_fingerprints(Fingerprints& f, std::string_view adapter, std::string_view cache_salt) {
  if (adapter.empty() && cache_salt.empty()) return;
  // The adapter's length (8 little-endian bytes), the adapter, the salt: no two pairs spell the
  // same bytes, whatever they contain.
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset(&state);
  unsigned char length[8];
  for (size_t i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>((adapter.size() >> (8 * i)) & 0xff);
  XXH3_64bits_update(&state, length, sizeof length);
  XXH3_64bits_update(&state, adapter.data(), adapter.size());
  XXH3_64bits_update(&state, cache_salt.data(), cache_salt.size());
  const uint64_t ns = XXH3_64bits_digest(&state);
  for (uint64_t& fp : f.chain) fp ^= ns;
}

std::string format_double_like_serde(double d) {
  char buf[40];
  return std::string(buf, detail::format_double(d, buf));
}

}  // namespace ramjet::request
