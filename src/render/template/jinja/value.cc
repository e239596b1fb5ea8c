#include "render/template/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "common/utf8.h"

namespace ramjet::render::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (same_name(k, key)) return &v;
  return nullptr;
}
Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : items)
    if (same_name(k, key)) return &v;
  return nullptr;
}
void Dict::set(std::string key, Value v) {
  if (Value* existing = find(key)) {
    *existing = std::move(v);
    return;
  }
  items.emplace_back(std::move(key), std::move(v));
}

Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  uint32_t n = 0;
  for (const auto& kv : d.items) n = kv.second.nest_ > n ? kv.second.nest_ : n;
  v.nest_ = static_cast<uint16_t>(n < 65535 ? n + 1 : 65535);
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}

bool contains_namespace(const Value& v, const Value& ns) {
  if (v.is_callable()) {
    const Callable& c = v.fn();
    if (c.opaque) return true;
    for (const auto& x : c.held)
      if (contains_namespace(x, ns)) return true;
    for (const auto& kv : c.attrs.items)
      if (contains_namespace(kv.second, ns)) return true;
    return false;
  }
  if (v.is_namespace()) {
    if (&v.dict_ref() == &ns.dict_ref()) return true;
  } else if (!v.is_list() && !v.is_dict()) {
    return false;
  }
  if (v.is_list()) {
    for (const auto& x : v.items())
      if (contains_namespace(x, ns)) return true;
    return false;
  }
  for (const auto& kv : v.dict_ref().items)
    if (contains_namespace(kv.second, ns)) return true;
  return false;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool:
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return d_ != 0.0;
    case Kind::kString: return !str_->empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return !dict_->items.empty();
    case Kind::kNamespace:
    case Kind::kCallable: return true;
  }
  return false;
}

void append_float_repr(std::string& out, double d) {
  if (std::isnan(d)) { out += "nan"; return; }
  if (std::isinf(d)) { out += d < 0 ? "-inf" : "inf"; return; }
  if (d == 0) { out += std::signbit(d) ? "-0.0" : "0.0"; return; }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  // sci: [-]D[.DDD]e[+-]XX
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  if (neg) out += '-';
  if (exp < -4 || exp >= 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
    return;
  }
  if (exp < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exp - 1), '0');
    out += digits;
    return;
  }
  size_t int_len = static_cast<size_t>(exp) + 1;
  if (digits.size() <= int_len) {
    out += digits;
    out.append(int_len - digits.size(), '0');
    out += ".0";
  } else {
    out.append(digits, 0, int_len);
    out += '.';
    out.append(digits, int_len);
  }
}

std::vector<char32_t> utf8_decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) { out.push_back(c); ++i; continue; }
    size_t n = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 0;
    bool ok = n > 0 && i + n < s.size();
    char32_t cp = c & (0x3F >> n);
    for (size_t k = 1; ok && k <= n; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      else cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) { out.push_back(0xDC00 + c); ++i; continue; }  // surrogateescape: lossless
    out.push_back(cp);
    i += n + 1;
  }
  return out;
}

void utf8_append(std::string& out, char32_t c) {
  if (c >= 0xDC80 && c <= 0xDCFF) { out += static_cast<char>(c - 0xDC00); return; }
  append_utf8(out, static_cast<uint32_t>(c));
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

namespace {

void append_str_repr(std::string& out, const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  out += q;
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(q) || c == '\\') { out += '\\'; out += static_cast<char>(c); }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F || (c >= 0x80 && c < 0xA0)) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned>(c));
      out += b;
    } else if (c >= 0xDC80 && c <= 0xDCFF) {
      char b[8];
      std::snprintf(b, sizeof b, "\\udc%02x", static_cast<unsigned>(c - 0xDC00));
      out += b;
    } else {
      utf8_append(out, c);
    }
  }
  out += q;
}

}  // namespace

void Value::append_repr(std::string& out, int depth) const {
  if (depth > 512) { out += "..."; return; }
  switch (kind_) {
    case Kind::kString: append_str_repr(out, *str_); return;
    case Kind::kList: {
      out += tuple_ ? '(' : '[';
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        (*list_)[i].append_repr(out, depth + 1);
      }
      if (tuple_ && list_->size() == 1) out += ',';
      out += tuple_ ? ')' : ']';
      return;
    }
    case Kind::kDict: {
      out += '{';
      bool first = true;
      for (const auto& [k, v] : dict_->items) {
        if (!first) out += ", ";
        first = false;
        append_str_repr(out, k);
        out += ": ";
        v.append_repr(out, depth + 1);
      }
      out += '}';
      return;
    }
    case Kind::kUndefined: out += "Undefined"; return;
    default: append_str(out, depth); return;
  }
}

void Value::append_str(std::string& out, int depth) const {
  switch (kind_) {
    case Kind::kUndefined: return;
    case Kind::kNone: out += "None"; return;
    case Kind::kBool: out += i_ ? "True" : "False"; return;
    case Kind::kInt: out += std::to_string(i_); return;
    case Kind::kFloat: append_float_repr(out, d_); return;
    case Kind::kString: out += *str_; return;
    case Kind::kList:
    case Kind::kDict: append_repr(out, depth); return;
    case Kind::kNamespace: {
      out += "<Namespace ";
      Value d = *this;
      d.kind_ = Kind::kDict;
      d.append_repr(out, depth + 1);
      out += '>';
      return;
    }
    case Kind::kCallable:
      if (fn_->loop) {
        out += "<LoopContext ";
        out += std::to_string(fn_->loop_index + 1);
        out += '/';
        out += std::to_string(fn_->loop_length);
        out += '>';
        return;
      }
      out += fn_->repr.empty() ? "<function " + fn_->name + ">" : fn_->repr;
      return;
  }
}

std::string Value::to_str() const {
  std::string s;
  append_str(s);
  return s;
}

bool py_equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kString: return a.str() == b.str();
    case K::kList: {
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!py_equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case K::kDict: {
      const auto& da = a.dict_ref();
      const auto& db = b.dict_ref();
      if (da.items.size() != db.items.size()) return false;
      for (const auto& [k, v] : da.items) {
        const Value* o = db.find(k);
        if (!o || !py_equal(v, *o)) return false;
      }
      return true;
    }
    case K::kNamespace: return &a.dict_ref() == &b.dict_ref();
    case K::kCallable: return &a.fn() == &b.fn();
    default: return false;
  }
}

namespace {

void json_string(std::string& out, const std::string& s) {
  out += '"';
  size_t run = 0;  // s[run, i) needs no escaping: appended in one piece
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s, run, i - run);
    run = i + 1;
    const char ch = s[i];
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += ch;
        }
    }
  }
  out.append(s, run, s.size() - run);
  out += '"';
}

bool json_rec(const Value& v, std::string& out, int indent, bool sort_keys, std::string& bad,
              int depth, int max_depth) {
  using K = Value::Kind;
  if (depth > max_depth) { bad = "nesting too deep"; return false; }
  auto newline = [&](int level) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
  };
  switch (v.kind()) {
    case K::kNone: out += "null"; return true;
    case K::kBool: out += v.as_bool() ? "true" : "false"; return true;
    case K::kInt: out += std::to_string(v.as_int()); return true;
    case K::kFloat: {
      double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
      else append_float_repr(out, d);
      return true;
    }
    case K::kString: json_string(out, v.str()); return true;
    case K::kList: {
      const auto& items = v.items();
      if (items.empty()) { out += "[]"; return true; }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(depth + 1);
        if (!json_rec(items[i], out, indent, sort_keys, bad, depth + 1, max_depth)) return false;
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return true;
    }
    case K::kDict: {
      const auto& d = v.dict_ref();
      if (d.items.empty()) { out += "{}"; return true; }
      std::vector<const std::pair<std::string, Value>*> order;
      for (const auto& kv : d.items) order.push_back(&kv);
      if (sort_keys)
        std::stable_sort(order.begin(), order.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      bool first = true;
      for (const auto* kv : order) {
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(depth + 1);
        json_string(out, kv->first);
        out += ": ";
        if (!json_rec(kv->second, out, indent, sort_keys, bad, depth + 1, max_depth)) return false;
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return true;
    }
    case K::kUndefined: bad = "Undefined"; return false;
    case K::kNamespace: bad = "Namespace"; return false;
    case K::kCallable: bad = "function"; return false;
  }
  return false;
}

}  // namespace

bool to_json(const Value& v, std::string& out, int indent, bool sort_keys, std::string& bad,
             int max_depth) {
  return json_rec(v, out, indent, sort_keys, bad, 0, max_depth);
}

}  // namespace ramjet::render::jinja
