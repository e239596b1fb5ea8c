// common/json: the one JSON string escaper for what ramjet writes itself (log lines, error
// bodies, the journal, the decision log and the dashboard's answers). Quotes and backslashes are
// escaped, \n \r \t by name and every other control byte as \u00XX; other bytes (UTF-8) pass
// through. Python-compatible renderings (the chat template's tojson, canonical request bodies)
// follow their own rules in render/ and request/prepare/.
#pragma once

#include <string>
#include <string_view>

namespace ramjet {

inline void append_json_escaped(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          const char u[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
          out.append(u, sizeof u);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
}

// `s` as a JSON string literal, quotes included.
inline void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  append_json_escaped(out, s);
  out += '"';
}

}  // namespace ramjet
