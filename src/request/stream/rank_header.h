// request/stream/rank_header: X-Data-Parallel-Rank in the head ramjet sends an engine. vLLM pins a
// request carrying it to one of its data-parallel ranks; ramjet routes to ranks itself (an ordinal
// per rank, net/roster.h), so a client's field is never forwarded (to any engine: newer SGLang reads
// it too) and the chosen rank's is added for a vLLM engine; an SGLang engine gets its rank in the
// body instead (owned_body.h). The rest of the upstream head is forward.cc's (Proxy::build_request_head).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include <boost/beast/core/string.hpp>

#include "net/http.h"

namespace ramjet::request {

inline constexpr std::string_view kRankHeader = "X-Data-Parallel-Rank";

// Field i of a client's head is an X-Data-Parallel-Rank (any case): not forwarded.
inline bool is_rank_header(const net::HeadFields& fields, size_t i) {
  return fields.id(i) == boost::beast::http::field::unknown && boost::beast::iequals(fields.name(i), kRankHeader);
}

// Appends "X-Data-Parallel-Rank: <rank>\r\n" for a target that is one rank; nothing for a whole
// engine. Returns the fields added (0 or 1).
inline size_t append_rank_header(net::HeadBuffer& out, std::optional<uint32_t> rank) {
  if (!rank) return 0;
  out.append(kRankHeader);
  out.append(": ");
  net::append_decimal(out, *rank);
  out.append("\r\n");
  return 1;
}

}  // namespace ramjet::request
