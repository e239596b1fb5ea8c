// request/stream/owned_body: the body ramjet sends an engine when it writes a member of its own
// (request/prepare/owned_members.h finds the client's members of that name, which are left out):
// - an SGLang engine (RJ_UPSTREAM_ENGINE=sglang) gets "routed_dp_rank":k for a target that is one
//   data-parallel rank (vLLM engines get their rank in the head: rank_header.h);
// - a vLLM engine with RJ_ADMISSION_ENGINE_PRIORITY gets "priority":p, the request's class.
// The member is known only when the request is placed, and a retry may go to another rank or
// engine kind, so the body is edited as it is sent: a gather of the client's bytes around ramjet's
// member, no copy. A body that is not a JSON object goes as it came, without ramjet's member.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "request/prepare/owned_members.h"
#include "request/stream/disagg_legs.h"

namespace ramjet::request {

// What ramjet writes into the body for one engine.
enum class BodyEdit : uint8_t {
  kNone,          // the client's bytes as they came
  kSglangRank,    // SGLang: the client's rank members out, routed_dp_rank in (a rank target only)
  kVllmPriority,  // vLLM: the client's priority out, ramjet's in
  kPrefillLeg,    // P/D: the prefill leg (remote decode, one token, not streamed)
  kDecodeLeg,     // P/D: the client's kv_transfer_params out, the prefill answer's (if any) in
};

// The client's members an edit leaves out (`priority`: the legs carry ramjet's priority too).
inline std::span<const std::string_view> owned_names(BodyEdit e, bool priority = false) {
  if (e == BodyEdit::kSglangRank) return kSglangRankMembers;
  if (e == BodyEdit::kVllmPriority) return kPriorityMembers;
  if (e == BodyEdit::kPrefillLeg) return prefill_leg_names(priority);
  if (e == BodyEdit::kDecodeLeg) return decode_leg_names(priority);
  return {};
}

// ramjet's member into `out` ("" for none): "name":value, with a comma when members follow it.
inline void owned_member(std::string& out, BodyEdit e, std::optional<int64_t> value, const OwnedMembers& f) {
  out.clear();
  if (e == BodyEdit::kNone || !value || !f.object) return;
  out.push_back('"');
  out.append(owned_names(e).front());
  out.append("\":");
  out.append(std::to_string(*value));
  if (f.members_left) out.push_back(',');
}

// The pieces of the body sent, in order (views into `body` and `member`; empty ones included).
template <class Piece>
void edited_body(std::string_view body, const OwnedMembers& f, std::string_view member, Piece&& piece) {
  if (!f.object) {
    piece(body);
    return;
  }
  piece(body.substr(0, f.open));
  piece(member);
  size_t at = f.open;
  for (const auto& [from, to] : f.drop) {
    piece(body.substr(at, from - at));
    at = to;
  }
  piece(body.substr(at));
}

// How many pieces edited_body() makes, and their size (the Content-Length).
inline size_t edited_body_pieces(const OwnedMembers& f) { return f.object ? 3 + f.drop.size() : 1; }
inline size_t edited_body_size(std::string_view body, const OwnedMembers& f, std::string_view member) {
  return f.object ? body.size() - f.dropped_bytes() + member.size() : body.size();
}

}  // namespace ramjet::request
