// render::message_spans: where the messages of a chat request body are, byte for byte — what
// exact routing's turn cache (render/prompt/turn_cache.h) compares a follow-up's body with. A
// structural scan (strings, escapes, nesting), no values decoded: it is run on bytes Boost.JSON
// has accepted (the caller parses first) and is safe, never trusted, on any other bytes (fuzz
// target message_spans). Parsing and meaning stay with Boost.JSON and the formatters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace ramjet::render {

struct MessageSpans {
  size_t open = 0;            // the offset right after the messages array's '['
  std::vector<uint32_t> ends; // the offset right after each element of it
};

// The top-level "messages" array of a JSON object `body`. nullopt when the body is not an
// object, is larger than 4 GiB, has no "messages" array, or when a key of the object could name
// "messages" without being spelled so (any key with an escape) or "messages" appears twice —
// then which array a parser keeps is not this scan's to say.
std::optional<MessageSpans> scan_message_spans(std::string_view body);

// The elements of an array continued by `more`: the bytes after one of its elements up to its
// closing ']' (exclusive), i.e. (whitespace ',' whitespace value)* whitespace. Appends the offset
// right after each value, plus `base`, to `ends`; false (ends unchanged) when `more` is not that.
bool scan_more_elements(std::string_view more, size_t base, std::vector<uint32_t>& ends);

}  // namespace ramjet::render
