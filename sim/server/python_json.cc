// sim/server/python_json (see python_json.h).
#include "sim/server/python_json.h"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string_view>

namespace ramjet::sim {

namespace json = boost::json;

namespace {

// Decodes one UTF-8 sequence (boost::json validated the input). Returns the code point.
uint32_t next_code_point(std::string_view s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  int extra = c < 0x80 ? 0 : c < 0xe0 ? 1 : c < 0xf0 ? 2 : 3;
  uint32_t cp = extra == 0 ? c : extra == 1 ? (c & 0x1f) : extra == 2 ? (c & 0x0f) : (c & 0x07);
  ++i;
  for (; extra > 0 && i < s.size(); --extra, ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[i]) & 0x3f);
  return cp;
}

void append_u(std::string& out, uint32_t unit) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\u%04x", unit);
  out += buf;
}

void dumps_string(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = next_code_point(s, i);
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp >= 0x20 && cp <= 0x7e) {
      out += static_cast<char>(cp);
    } else if (cp < 0x10000) {
      append_u(out, cp);
    } else {
      const uint32_t v = cp - 0x10000;
      append_u(out, 0xd800 | (v >> 10));
      append_u(out, 0xdc00 | (v & 0x3ff));
    }
  }
  out += '"';
}

// Python's float repr: the shortest round-trip digits, fixed notation for exponents in
// [-4, 16), scientific ("1e+16", "1.5e-05") otherwise; integral values keep ".0".
std::string python_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  if (ec != std::errc()) return "0.0";
  std::string sci(buf, end);  // e.g. "-1.2345e+02"
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(e + 1));
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
    return sign + out;
  }
  std::string mant = digits.substr(0, 1);
  if (digits.size() > 1) mant += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return sign + mant + ebuf;
}

void dumps(std::string& out, const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: out += "null"; return;
    case json::kind::bool_: out += v.get_bool() ? "true" : "false"; return;
    case json::kind::int64: out += std::to_string(v.get_int64()); return;
    case json::kind::uint64: out += std::to_string(v.get_uint64()); return;
    case json::kind::double_: out += python_float(v.get_double()); return;
    case json::kind::string: dumps_string(out, v.get_string()); return;
    case json::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& x : v.get_array()) {
        if (!first) out += ", ";
        first = false;
        dumps(out, x);
      }
      out += ']';
      return;
    }
    case json::kind::object: {
      out += '{';
      bool first = true;
      for (const auto& kv : v.get_object()) {
        if (!first) out += ", ";
        first = false;
        dumps_string(out, kv.key());
        out += ": ";
        dumps(out, kv.value());
      }
      out += '}';
      return;
    }
  }
}

// Python's repr of a str: single quotes unless the text holds ' and no ".
void repr_string(std::string& out, std::string_view s) {
  const char q = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos ? '"' : '\'';
  out += q;
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) (out += '\\') += static_cast<char>(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);  // non-ASCII kept as is (printable in practice)
    }
  }
  out += q;
}

void repr(std::string& out, const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: out += "None"; return;
    case json::kind::bool_: out += v.get_bool() ? "True" : "False"; return;
    case json::kind::string: repr_string(out, v.get_string()); return;
    case json::kind::double_: {
      const std::string f = python_float(v.get_double());
      out += f == "NaN" ? "nan" : f == "Infinity" ? "inf" : f == "-Infinity" ? "-inf" : f;
      return;
    }
    case json::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& x : v.get_array()) {
        if (!first) out += ", ";
        first = false;
        repr(out, x);
      }
      out += ']';
      return;
    }
    case json::kind::object: {
      out += '{';
      bool first = true;
      for (const auto& kv : v.get_object()) {
        if (!first) out += ", ";
        first = false;
        repr_string(out, kv.key());
        out += ": ";
        repr(out, kv.value());
      }
      out += '}';
      return;
    }
    default: dumps(out, v); return;  // integers
  }
}

}  // namespace

std::string python_json_dumps(const json::value& v) {
  std::string out;
  dumps(out, v);
  return out;
}

std::string python_str(const json::value& v) {
  if (v.is_string()) return std::string(v.as_string());
  std::string out;
  repr(out, v);
  return out;
}

bool python_truthy(const json::value* v) {
  if (v == nullptr || v->is_null()) return false;
  if (v->is_bool()) return v->as_bool();
  if (v->is_string()) return !v->as_string().empty();
  if (v->is_array()) return !v->as_array().empty();
  if (v->is_object()) return !v->as_object().empty();
  return v->to_number<double>() != 0;
}

}  // namespace ramjet::sim
