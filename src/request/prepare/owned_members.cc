#include "request/prepare/owned_members.h"

#include <algorithm>

#include <optional>
#include <string>

#include "common/hex.h"

namespace ramjet::request {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void skip_ws(std::string_view s, size_t& i) {
  while (i < s.size() && is_ws(s[i])) ++i;
}

// s[i] is '"': moves past the closing quote. `escaped` says whether a backslash was seen.
bool skip_string(std::string_view s, size_t& i, bool& escaped) {
  ++i;
  for (;;) {
    i = s.find_first_of("\"\\", i);
    if (i == std::string_view::npos) return false;
    if (s[i] == '"') {
      ++i;
      return true;
    }
    escaped = true;
    if (i + 1 >= s.size()) return false;
    i += 2;
  }
}

bool scalar_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '+' || c == '-' ||
         c == '.';
}

// One value at s[i]; `depth` is the nesting of the object holding it.
bool skip_value(std::string_view s, size_t& i, uint32_t depth, uint32_t max_depth) {
  if (i >= s.size()) return false;
  bool escaped = false;
  const char c = s[i];
  if (c == '"') return skip_string(s, i, escaped);
  if (c != '{' && c != '[') {
    const size_t from = i;
    while (i < s.size() && scalar_char(s[i])) ++i;
    return i > from;
  }
  std::string closers;  // what closes each open container, innermost last
  while (i < s.size()) {
    const char d = s[i];
    if (d == '"') {
      if (!skip_string(s, i, escaped)) return false;
      continue;
    }
    if (d == '{' || d == '[') {
      if (depth + closers.size() + 1 > max_depth) return false;
      closers.push_back(d == '{' ? '}' : ']');
    } else if (d == '}' || d == ']') {
      if (closers.empty() || closers.back() != d) return false;
      closers.pop_back();
      if (closers.empty()) {
        ++i;
        return true;
      }
    }
    ++i;
  }
  return false;
}

// A key written with escapes, decoded as far as it can equal one of the owned names (ASCII, at
// most `longest` bytes): nullopt for an invalid escape (the body is not JSON); "" when it cannot
// be one.
std::optional<std::string> decode_key(std::string_view raw, size_t longest) {
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    char c = raw[i];
    if (c == '\\') {
      if (++i >= raw.size()) return std::nullopt;
      switch (raw[i]) {
        case '"': case '\\': case '/': c = raw[i]; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u': {
          if (i + 4 >= raw.size()) return std::nullopt;
          int cp = 0;
          for (size_t k = 1; k <= 4; ++k) {
            const int h = hex_value(raw[i + k]);
            if (h < 0) return std::nullopt;
            cp = cp * 16 + h;
          }
          i += 4;
          if (cp == 0 || cp > 0x7f) return std::string();  // not a character of an owned name
          c = static_cast<char>(cp);
          break;
        }
        default: return std::nullopt;
      }
    }
    out.push_back(c);
    if (out.size() > longest) return std::string();
  }
  return out;
}

struct Member {
  size_t start, end;  // the key's opening quote; just past the value
  bool owned;
};

}  // namespace

OwnedMembers find_owned_members(std::string_view s, std::span<const std::string_view> names, uint32_t max_depth) {
  OwnedMembers out;
  size_t longest = 0;
  for (std::string_view n : names) longest = std::max(longest, n.size());
  auto named = [&](std::string_view key) { return std::find(names.begin(), names.end(), key) != names.end(); };
  std::vector<Member> members;
  size_t i = 0;
  skip_ws(s, i);
  if (i >= s.size() || s[i] != '{' || max_depth == 0) return out;
  const size_t open = ++i;
  skip_ws(s, i);
  if (i < s.size() && s[i] == '}') {
    ++i;
  } else {
    for (;;) {
      if (i >= s.size() || s[i] != '"') return out;
      const size_t start = i;
      bool escaped = false;
      if (!skip_string(s, i, escaped)) return out;
      const std::string_view raw = s.substr(start + 1, i - start - 2);
      bool owned = false;
      if (!escaped) {
        owned = named(raw);
      } else {
        const std::optional<std::string> key = decode_key(raw, longest);
        if (!key) return out;
        owned = !key->empty() && named(*key);
      }
      skip_ws(s, i);
      if (i >= s.size() || s[i] != ':') return out;
      ++i;
      skip_ws(s, i);
      if (!skip_value(s, i, 1, max_depth)) return out;
      members.push_back(Member{start, i, owned});
      skip_ws(s, i);
      if (i < s.size() && s[i] == ',') {
        ++i;
        skip_ws(s, i);
        continue;
      }
      if (i < s.size() && s[i] == '}') {
        ++i;
        break;
      }
      return out;
    }
  }
  skip_ws(s, i);
  if (i != s.size()) return out;
  out.object = true;
  out.open = open;

  // An owned member before the last kept one goes with the gap up to the next member (its comma);
  // the owned members after it go with the comma before them.
  size_t last_kept = members.size();
  for (size_t k = 0; k < members.size(); ++k) {
    if (!members[k].owned) last_kept = k;
  }
  out.members_left = last_kept != members.size();
  auto add = [&](size_t a, size_t b) {
    if (!out.drop.empty() && out.drop.back().second == a) {
      out.drop.back().second = b;
    } else {
      out.drop.emplace_back(a, b);
    }
  };
  const size_t stop = out.members_left ? last_kept : 0;
  for (size_t k = 0; k < stop; ++k) {
    if (members[k].owned) add(members[k].start, members[k + 1].start);
  }
  if (!members.empty() && members.back().owned) {
    add(out.members_left ? members[last_kept].end : members.front().start, members.back().end);
  }
  return out;
}

}  // namespace ramjet::request
