// Fuzz target for request/prepare: the request body is untrusted bytes. Every endpoint, two
// configurations, plus the /v1/models rewrite. Invariants are checked, not just "no crash", and
// prepare() (simdjson fast path + Boost fallback) must equal the frozen Boost-only
// implementation (test/oracle/prepare_reference.cc) in every field, fingerprints included. The
// same bytes go through the body edits (request/prepare/owned_members.h, the body built by
// request/stream/owned_body.h): a JSON object stays the same object less its top-level members
// of the owned names (an SGLang rank's, vLLM's priority), with ramjet's member; anything else
// goes unchanged.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include <boost/json.hpp>

#include "request/prepare/prepare.h"
#include "request/prepare/owned_members.h"
#include "request/stream/owned_body.h"
#include "oracle/prepare_reference.h"  // test/oracle: the frozen Boost-only prepare()

namespace {

using ramjet::request::Endpoint;
using ramjet::request::PrepareConfig;
using ramjet::request::PreparedRequest;

void check(bool ok) {
  if (!ok) std::abort();
}

bool is_json_object(std::string_view text) {
  boost::system::error_code ec;
  boost::json::parse_options opts;
  opts.max_depth = 1024;
  boost::json::value v = boost::json::parse(text, ec, {}, opts);
  return !ec && v.is_object();
}

bool same(const PreparedRequest& a, const PreparedRequest& b) {
  return a.endpoint == b.endpoint && a.body == b.body && a.rewritten == b.rewritten &&
         a.json_object == b.json_object && a.malformed_json == b.malformed_json &&
         a.stream == b.stream && a.max_output_tokens == b.max_output_tokens &&
         a.shims.max_tokens_stripped == b.shims.max_tokens_stripped &&
         a.shims.max_completion_tokens_stripped == b.shims.max_completion_tokens_stripped &&
         a.shims.contents_flattened == b.shims.contents_flattened &&
         a.shims.reasoning_effort_dropped == b.shims.reasoning_effort_dropped &&
         a.fingerprints.chain == b.fingerprints.chain &&
         a.fingerprints.canonical_bytes == b.fingerprints.canonical_bytes &&
         a.fingerprints.raw_fallback == b.fingerprints.raw_fallback;
}

// A number whose exponent does not fit Boost.JSON's int ("2.5e-39999999999999999999") is valid
// JSON (RFC 8259; Python's json, and so vLLM, reads 0.0; so does simdjson): Boost alone refuses it
// (error::exponent_overflow). The frozen Boost-only oracle cannot judge such a body; prepare() still
// runs on it, unchecked against the oracle.
bool outside_the_oracle(std::string_view text) {
  boost::system::error_code ec;
  boost::json::parse_options opts;
  opts.max_depth = 1024;
  (void)boost::json::parse(text, ec, {}, opts);
  return ec == boost::json::error::exponent_overflow;
}

void check_prepare(Endpoint e, const std::string& input, const PrepareConfig& config) {
  PreparedRequest p = ramjet::request::prepare(e, input, config);
  // Again: the per-thread tape, reused, reads the same.
  check(same(ramjet::request::prepare(e, input, config), p));
  if (outside_the_oracle(input)) return;
  check(same(p, ramjet::request::reference::prepare_reference(e, input, config)));
  const bool shimmable = e == Endpoint::kChat || e == Endpoint::kCompletions;
  check(p.endpoint == e);
  check(p.malformed_json == (ramjet::request::is_inference(e) && !p.json_object));
  check(p.rewritten == p.shims.any());
  if (!p.rewritten) {
    check(p.body == input);  // unchanged bodies are forwarded byte for byte
    return;
  }
  check(shimmable && p.json_object);
  check(is_json_object(p.body));
  // The shims are idempotent: a rewritten body passes through a second time unchanged.
  PreparedRequest again = ramjet::request::prepare(e, p.body, config);
  check(again.json_object && !again.rewritten && again.body == p.body);
  check(again.stream == p.stream && again.max_output_tokens == p.max_output_tokens);
}

// Boost 1.81 reads a huge exponent of zero (0e400) as NaN, which equals nothing: such a body is
// compared as far as it can be (the edit itself is checked below all the same).
bool all_finite(const boost::json::value& v) {
  if (v.is_double()) return std::isfinite(v.get_double());
  if (v.is_array()) {
    for (const auto& e : v.get_array()) {
      if (!all_finite(e)) return false;
    }
  }
  if (v.is_object()) {
    for (const auto& m : v.get_object()) {
      if (!all_finite(m.value())) return false;
    }
  }
  return true;
}

void check_edited_body(const std::string& input, ramjet::request::BodyEdit edit, std::optional<int64_t> value) {
  namespace json = boost::json;
  namespace rq = ramjet::request;
  const rq::OwnedMembers f = rq::find_owned_members(input, rq::owned_names(edit), 64);
  std::string member;
  rq::owned_member(member, edit, value, f);
  std::string out;
  rq::edited_body(input, f, member, [&](std::string_view piece) { out.append(piece); });
  check(out.size() == rq::edited_body_size(input, f, member));
  if (!f.object) check(out == input);
  boost::system::error_code ec;
  json::parse_options opts;
  opts.max_depth = 32;  // within the scan's 64
  json::value want = json::parse(input, ec, {}, opts);
  if (ec || !want.is_object()) return;
  check(f.object);  // every JSON object is found as one
  opts.max_depth = 64;
  json::value got = json::parse(out, ec, {}, opts);
  check(!ec && got.is_object());
  const auto names = rq::owned_names(edit);
  for (bool more = true; more;) {  // (a client may send a name more than once)
    more = false;
    for (std::string_view n : names) more = want.as_object().erase(n) > 0 || more;
  }
  for (size_t k = 1; k < names.size(); ++k) check(!got.as_object().contains(names[k]));
  if (!names.empty()) {
    if (value) {
      const json::value* r = got.as_object().if_contains(names.front());
      check(r != nullptr && r->is_int64() && r->as_int64() == *value);
      got.as_object().erase(names.front());
    }
    check(!got.as_object().contains(names.front()));
  }
  check(got == want || !all_finite(want));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  PrepareConfig defaults;
  defaults.fingerprint = true;
  PrepareConfig tight;
  tight.max_tokens_strip = 16;
  tight.limits.max_json_depth = 8;
  tight.fingerprint = true;
  tight.fingerprints.chunk_bytes = 64;
  tight.fingerprints.max_prefix_bytes = 300;
  for (Endpoint e : {Endpoint::kChat, Endpoint::kCompletions, Endpoint::kResponses,
                     Endpoint::kMessages, Endpoint::kModels, Endpoint::kHealth, Endpoint::kOther}) {
    check_prepare(e, input, defaults);
    check_prepare(e, input, tight);
  }
  using ramjet::request::BodyEdit;
  check_edited_body(input, BodyEdit::kSglangRank, std::nullopt);
  check_edited_body(input, BodyEdit::kSglangRank, 3);
  check_edited_body(input, BodyEdit::kVllmPriority, 1);
  for (uint64_t margin : {uint64_t{0}, uint64_t{1}, uint64_t{16384}}) {
    auto rewritten = ramjet::request::rewrite_models_context(input, margin);
    if (rewritten) check(margin > 0 && is_json_object(*rewritten) && *rewritten != input);
  }
  return 0;
}
