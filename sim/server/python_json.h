// sim/server/python_json: Python's text forms of parsed JSON, where vLLM's conversions put them
// into prompts: json.dumps (Anthropic tool_use arguments) and str() (an assistant-side
// tool_result's content). Exact, because a prompt byte that differs is a cache miss.
#pragma once

#include <boost/json/value.hpp>

#include <string>

namespace ramjet::sim {

// Python's json.dumps(v) with its defaults: separators ", " and ": ", ensure_ascii=True (every
// character outside printable ASCII as \uXXXX, surrogate pairs above the BMP), floats as repr().
std::string python_json_dumps(const boost::json::value& v);
// Python's str(v) of a parsed JSON value (repr of dicts/lists: {'k': 'v'}, True, None).
std::string python_str(const boost::json::value& v);
// Python's truthiness of a parsed JSON value, as `data.get(k)` is tested: None (or absent: null
// pointer), False, 0, "", [] and {} are false.
bool python_truthy(const boost::json::value* v);

}  // namespace ramjet::sim
