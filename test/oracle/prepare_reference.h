// The frozen Boost.JSON-only prepare() (before the simdjson fast path): the oracle that the
// differential test, the fuzz target and the canonical benchmark compare prepare() against. A
// test-only library (ramjet_prepare_reference, test/oracle/CMakeLists.txt): the ramjet binary does
// not link it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "request/prepare/prepare.h"

namespace ramjet::request::reference {

PreparedRequest prepare_reference(Endpoint endpoint, std::string body, const PrepareConfig& config);

// The reference's fingerprint chain (ramjet 0.4.0): FNV-1a 64 over (the previous fingerprint as 8
// little-endian bytes) ++ chunk, 0 before the first. ramjet hashes with XXH3 now; the reference's
// golden vectors still prove the canonical bytes are the reference's (canonical_test), and the
// canonical benchmark measures it beside ours.
std::vector<uint64_t> reference_fnv_chain(std::string_view bytes, size_t chunk);

}  // namespace ramjet::request::reference
