// Fuzz target for prefill/decode disaggregation's two legs (request/stream/disagg_legs.h): a
// prefill engine's answer (untrusted bytes) gives usable transfer parameters or a reason, never
// more than the limits; a client's body (untrusted bytes) edited into a prefill or decode leg is,
// whenever the client's body is one JSON object, one JSON object again with ramjet's members and
// none of the client's of those names.
#include <boost/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "request/stream/disagg_legs.h"
#include "request/stream/owned_body.h"

namespace {

using namespace ramjet::request;
namespace json = boost::json;

void check(bool ok) {
  if (!ok) std::abort();
}

// The body a leg sends, parsed strictly (duplicate keys refused), or null when it is not JSON.
json::value edit(std::string_view body, BodyEdit e, std::string members, bool priority) {
  const OwnedMembers f = find_owned_members(body, owned_names(e, priority), 64);
  if (!f.object) members.clear();
  if (!members.empty() && f.members_left) members.push_back(',');
  std::string out;
  edited_body(body, f, members, [&](std::string_view p) { out.append(p); });
  check(out.size() == edited_body_size(body, f, members));
  json::parse_options opts;
  opts.max_depth = 10000;
  boost::system::error_code ec;
  json::value v = json::parse(out, ec, {}, opts);
  return ec ? json::value() : v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  // The input as a prefill engine's answer.
  const TransferParams p = transfer_params(in);
  if (p.error == ParamsError::kNone) {
    check(p.json.size() <= kMaxTransferParamsBytes);
    const json::value v = json::parse(p.json);
    check(v.is_object() && v.as_object().at("do_remote_prefill") == true);
  } else {
    check(p.json.empty());
  }
  // The input as a client's body, for every endpoint and leg.
  json::parse_options opts;
  opts.max_depth = 10000;
  boost::system::error_code ec;
  const json::value client = json::parse(in, ec, {}, opts);
  const bool object = !ec && client.is_object();
  for (Endpoint e : {Endpoint::kChat, Endpoint::kCompletions, Endpoint::kResponses, Endpoint::kMessages}) {
    for (bool priority : {false, true}) {
      const json::value pre = edit(in, BodyEdit::kPrefillLeg, prefill_leg_members(e, priority ? std::optional<int64_t>(1) : std::nullopt), priority);
      const json::value dec = edit(in, BodyEdit::kDecodeLeg, decode_leg_members(p.json, priority ? std::optional<int64_t>(0) : std::nullopt), priority);
      // (find_owned_members refuses nesting past 64: such a body goes as it came.)
      if (!object || !find_owned_members(in, owned_names(BodyEdit::kPrefillLeg, priority), 64).object) continue;
      check(pre.is_object() && dec.is_object());
      const json::object& o = pre.as_object();
      check(o.at("stream") == false);
      check(o.at("kv_transfer_params").as_object().at("do_remote_decode") == true);
      check(o.contains(e == Endpoint::kResponses ? "max_output_tokens" : "max_tokens"));
      check(!o.contains("stream_options") && !o.contains("min_tokens"));
      if (priority) check(o.at("priority") == 1 && dec.as_object().at("priority") == 0);
      const json::object& d = dec.as_object();
      if (p.error == ParamsError::kNone) {
        check(d.at("kv_transfer_params") == json::parse(p.json));
      } else {
        check(!d.contains("kv_transfer_params"));
      }
    }
  }
  return 0;
}
