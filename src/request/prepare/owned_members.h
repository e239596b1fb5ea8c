// request/prepare/owned_members: where a body's top-level members that ramjet writes itself are,
// for the body it sends an engine (request/stream/owned_body.h makes it). ramjet owns two kinds:
// - an SGLang data-parallel rank: SGLang pins a request to a rank by "routed_dp_rank" in its JSON
//   body ("data_parallel_rank", the older name, when that is null or absent); ramjet decides the
//   rank, so both of a client's members are left out and ramjet's own goes first;
// - vLLM's per-request "priority" (RJ_ADMISSION_ENGINE_PRIORITY): ramjet decides the class, so a
//   client's own priority is left out and ramjet's goes first.
// This file finds them; it changes nothing.
//
// One pass over the bytes at the top level of one JSON object: members are located, nested values
// skipped by bracket matching (strings and escapes honoured), keys with escapes decoded before
// they are compared (Python's json decodes "routed\u005fdp_rank" too). Anything that is not one
// object with well-formed members (a syntax error, trailing bytes, nesting past the depth limit)
// is `object == false`: such a body is forwarded as it came, without ramjet's member. Scalars are
// checked for their characters only; an engine refuses an invalid number or literal itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace ramjet::request {

inline constexpr std::string_view kRoutedDpRank = "routed_dp_rank";
inline constexpr std::string_view kDataParallelRank = "data_parallel_rank";
inline constexpr std::string_view kPriority = "priority";
// The member names of each kind (the first is the one ramjet writes).
inline constexpr std::string_view kSglangRankMembers[] = {kRoutedDpRank, kDataParallelRank};
inline constexpr std::string_view kPriorityMembers[] = {kPriority};

struct OwnedMembers {
  bool object = false;        // the body is one JSON object (whitespace around it allowed)
  size_t open = 0;            // the offset just past its '{' (object only)
  bool members_left = false;  // a member other than the owned ones remains
  // Byte ranges [first, second) to leave out, ascending and disjoint: each client member of an
  // owned name with the comma that joined it to its neighbour. Empty when the client sent none.
  std::vector<std::pair<size_t, size_t>> drop;
  size_t dropped_bytes() const {
    size_t n = 0;
    for (const auto& [a, b] : drop) n += b - a;
    return n;
  }
};

// The members of `body` named in `names` (ASCII, at most 32 bytes each). `max_depth`: nesting
// deeper than this (PrepareLimits::max_json_depth) is `object == false`.
OwnedMembers find_owned_members(std::string_view body, std::span<const std::string_view> names, uint32_t max_depth);

}  // namespace ramjet::request
