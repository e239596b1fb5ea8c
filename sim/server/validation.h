// sim/server/validation: what vLLM's HTTP front (FastAPI + pydantic) does with a request body
// before vLLM's own code sees it, and the 400 it answers when that fails (vLLM 0.32,
// entrypoints/serve/exception_handling/handlers/validation.py):
//   {"error":{"message":"N validation error(s):\n  {<pydantic error as Python str()>}...",
//             "type":"Bad Request","param":"<first error's dotted loc>","code":400}}
// on every API, /v1/messages included (the handler is the app's, not the Anthropic router's).
//
// Modelled: the body's JSON read by Python's json.loads (CPython's C scanner: its messages and
// character positions, "body.<pos>"), a body that is absent, null or not an object, and the
// top-level fields the simulator reads, in each request model's declaration order: required
// fields (missing), and lax pydantic coercion of the typed ones (an int from "2", 2.0 or True; a
// bool from "yes" or 1; string_type, list_type, int_type, int_parsing, int_from_float,
// bool_type, bool_parsing), plus the Messages model's own validators (value_error). A coerced
// field is written back, so the caller reads the value vLLM would use. Deeper fields (message
// items, tools, content blocks) are left to the API code (its own 400s).
#pragma once

#include <boost/json/object.hpp>

#include <string>
#include <string_view>

#include "common/result.h"

namespace ramjet::sim {

enum class BodyApi { kChat, kCompletions, kResponses, kMessages };

struct BodyRejection {
  unsigned status = 400;
  std::string body{};  // the JSON (or FastAPI's {"detail":…}) to answer
};

// Parses and validates a request body as vLLM's front would; the object (fields coerced) or
// the answer to send.
Result<boost::json::object, BodyRejection> validate_body(BodyApi api, std::string_view body);

// Python's json.loads error for `text` (UTF-8): "" when it parses, else sets `pos` (in
// characters, as Python counts them) and returns the message ("Expecting value", …).
std::string python_json_error(std::string_view text, size_t& pos);

}  // namespace ramjet::sim
