// The frozen simdjson DOM reader of usage from response events and bodies: request/usage read
// them this way until common/json_tape replaced it (issue 32). usage_test's differential test and
// fuzz_usage hold request/usage to it: the same documents accepted, the same Usage read.
#pragma once

#include <cstddef>
#include <string_view>

#include "request/usage/usage.h"

namespace ramjet::oracle {

// Parses one event or body (`json`) with simdjson's DOM parser at `max_depth`, then reads it
// into `u` as request/usage does. Returns whether it carried generated output; `failed` is set
// when the document is not valid JSON.
bool usage_reference_event(std::string_view json, request::Endpoint endpoint, size_t max_depth,
                           request::Usage& u, bool& failed);

}  // namespace ramjet::oracle
