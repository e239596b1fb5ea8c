// The frozen Boost.JSON-only prepare() (before the simdjson fast path): the oracle that the
// differential test, the fuzz target and the canonical benchmark compare prepare() against. A
// test-only library (ramjet_prepare_reference, test/oracle/CMakeLists.txt): the ramjet binary does
// not link it.
#pragma once

#include <string>

#include "request/prepare/prepare.h"

namespace ramjet::request::reference {

PreparedRequest prepare_reference(Endpoint endpoint, std::string body, const PrepareConfig& config);

}  // namespace ramjet::request::reference
