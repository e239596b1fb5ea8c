// The frozen Boost.JSON-only prepare() (before the simdjson fast path): the oracle that the
// differential test and the fuzz target compare prepare() against. Not for production use.
#pragma once

#include <string>

#include "request/prepare/prepare.h"

namespace ramjet::request::reference {

PreparedRequest prepare_reference(Endpoint endpoint, std::string body, const PrepareConfig& config);

}  // namespace ramjet::request::reference

namespace ramjet::request::detail {

// How many prepare() calls on this thread the simdjson path answered (for the differential test,
// which must show that both paths ran).
uint64_t simdjson_path_count();

}  // namespace ramjet::request::detail
