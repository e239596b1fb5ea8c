// render::message_spans (see message_spans.h).
#include "render/template/message_spans.h"

#include <cstring>

namespace ramjet::render {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// After the opening quote at s[i - 1]: the offset after the closing quote, or npos. `escaped`:
// whether the string holds a backslash.
size_t skip_string(std::string_view s, size_t i, bool* escaped = nullptr) {
  auto find = [&](char c, size_t from, size_t to) {
    const void* p = from < to ? std::memchr(s.data() + from, c, to - from) : nullptr;
    return p ? static_cast<size_t>(static_cast<const char*>(p) - s.data()) : to;
  };
  size_t quote = find('"', i, s.size());
  for (;;) {
    const size_t b = find('\\', i, quote);
    if (b == quote) return quote < s.size() ? quote + 1 : std::string_view::npos;
    if (escaped) *escaped = true;
    i = b + 2;  // the escaped byte too
    if (i > quote) quote = find('"', i, s.size());  // the escape was the quote's
    if (i > s.size()) return std::string_view::npos;
  }
}

// A value starting at s[i]: the offset right after it, or npos. Structural only: brackets are
// balanced (any kind matches any kind: the bytes were accepted by a parser or are refused later),
// strings skipped, scalars run to the next delimiter.
size_t skip_value(std::string_view s, size_t i) {
  if (i >= s.size()) return std::string_view::npos;
  const char c = s[i];
  if (c == '"') return skip_string(s, i + 1);
  if (c == '{' || c == '[') {
    size_t depth = 0;
    while (i < s.size()) {
      const char d = s[i];
      if (d == '"') {
        i = skip_string(s, i + 1);
        if (i == std::string_view::npos) return i;
        continue;
      }
      if (d == '{' || d == '[') {
        ++depth;
      } else if (d == '}' || d == ']') {
        if (--depth == 0) return i + 1;
      }
      ++i;
    }
    return std::string_view::npos;
  }
  if (c == '}' || c == ']' || c == ',' || c == ':' || is_ws(c)) return std::string_view::npos;
  while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ':' && s[i] != '"' && !is_ws(s[i]))
    ++i;
  return i;
}

}  // namespace

bool scan_more_elements(std::string_view s, size_t base, std::vector<uint32_t>& ends) {
  const size_t mark = ends.size();
  size_t i = skip_ws(s, 0);
  while (i < s.size()) {
    if (s[i] != ',') break;
    i = skip_value(s, skip_ws(s, i + 1));
    if (i == std::string_view::npos || base + i > UINT32_MAX) break;
    ends.push_back(static_cast<uint32_t>(base + i));
    i = skip_ws(s, i);
  }
  if (i == s.size()) return true;
  ends.resize(mark);
  return false;
}

std::optional<MessageSpans> scan_message_spans(std::string_view s) {
  if (s.size() > UINT32_MAX) return std::nullopt;
  size_t i = skip_ws(s, 0);
  if (i >= s.size() || s[i] != '{') return std::nullopt;
  i = skip_ws(s, i + 1);
  std::optional<MessageSpans> spans;
  if (i < s.size() && s[i] == '}') return std::nullopt;
  while (i < s.size()) {
    if (s[i] != '"') return std::nullopt;
    bool escaped = false;
    const size_t key_end = skip_string(s, i + 1, &escaped);
    if (key_end == std::string_view::npos || escaped) return std::nullopt;
    const std::string_view key = s.substr(i + 1, key_end - i - 2);
    i = skip_ws(s, key_end);
    if (i >= s.size() || s[i] != ':') return std::nullopt;
    i = skip_ws(s, i + 1);
    if (key == "messages") {
      if (spans || i >= s.size() || s[i] != '[') return std::nullopt;
      spans.emplace();
      spans->open = i + 1;
      i = skip_ws(s, i + 1);
      if (i < s.size() && s[i] != ']') {
        i = skip_value(s, i);
        if (i == std::string_view::npos) return std::nullopt;
        spans->ends.push_back(static_cast<uint32_t>(i));
        // The rest of the array up to its ']'.
        size_t close = i;
        for (;;) {
          close = skip_ws(s, close);
          if (close >= s.size() || s[close] != ',') break;
          close = skip_value(s, skip_ws(s, close + 1));
          if (close == std::string_view::npos) return std::nullopt;
          spans->ends.push_back(static_cast<uint32_t>(close));
        }
        i = close;
      }
      if (i >= s.size() || s[i] != ']') return std::nullopt;
      ++i;
    } else {
      i = skip_value(s, i);
      if (i == std::string_view::npos) return std::nullopt;
    }
    i = skip_ws(s, i);
    if (i >= s.size()) return std::nullopt;
    if (s[i] == '}') {
      if (skip_ws(s, i + 1) != s.size()) return std::nullopt;
      return spans;
    }
    if (s[i] != ',') return std::nullopt;
    i = skip_ws(s, i + 1);
  }
  return std::nullopt;
}

}  // namespace ramjet::render
