// Builtins: attribute/item access (jinja2 sandbox getattr/getitem rules), operators with
// Python semantics, filters, tests, str/dict/list methods and the globals transformers adds.
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <iterator>
#include <string_view>

#include "render/template/jinja/interp.h"
#include "render/template/jinja/parser.h"

namespace ramjet::render::jinja {

namespace {

std::string undefined_msg(const Value& v) {
  std::string n = v.undefined_name();
  return n.empty() ? "value is undefined" : "'" + n + "' is undefined";
}

const char* type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return v.is_tuple() ? "tuple" : "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kCallable: return "function";
  }
  return "object";
}

size_t cp_len(const std::string& s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

std::string encode(const std::vector<char32_t>& cps, size_t from = 0, size_t to = SIZE_MAX) {
  std::string out;
  to = std::min(to, cps.size());
  for (size_t i = from; i < to; ++i) utf8_append(out, cps[i]);
  return out;
}

// Python str.strip/lstrip/rstrip(chars).
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<char32_t> cps = utf8_decode(s);
  std::vector<char32_t> set;
  bool ws = !chars || chars->is_none() || chars->is_undefined();
  if (!ws) set = utf8_decode(chars->is_string() ? chars->str() : chars->to_str());
  auto strip_it = [&](char32_t c) {
    return ws ? py_isspace(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return encode(cps, b, e);
}

std::string map_case(const std::string& s, int mode) {  // 0 upper 1 lower 2 title 3 capitalize
  std::string out;
  bool prev_cased = false;
  bool first = true;
  for (char32_t c : utf8_decode(s)) {
    auto ci = static_cast<utf8proc_int32_t>(c);
    char32_t r = c;
    if (c < 0x110000 && !(c >= 0xD800 && c <= 0xDFFF)) {
      if (mode == 0) r = static_cast<char32_t>(utf8proc_toupper(ci));
      else if (mode == 1) r = static_cast<char32_t>(utf8proc_tolower(ci));
      else if (mode == 2) {
        r = static_cast<char32_t>(prev_cased ? utf8proc_tolower(ci) : utf8proc_totitle(ci));
        auto cat = utf8proc_category(ci);
        prev_cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
                     cat == UTF8PROC_CATEGORY_LT;
      } else {
        r = static_cast<char32_t>(first ? utf8proc_totitle(ci) : utf8proc_tolower(ci));
      }
    }
    first = false;
    utf8_append(out, r);
  }
  return out;
}

std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (!sep || sep->is_none() || sep->is_undefined()) {
    std::vector<char32_t> cps = utf8_decode(s);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && py_isspace(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t e = cps.size();
        while (e > i && py_isspace(cps[e - 1])) --e;
        parts.push_back(encode(cps, i, e));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !py_isspace(cps[j])) ++j;
      parts.push_back(encode(cps, i, j));
      i = j;
    }
    return parts;
  }
  const std::string& d = sep->str();
  size_t pos = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) break;
    size_t f = s.find(d, pos);
    if (f == std::string::npos) break;
    parts.push_back(s.substr(pos, f - pos));
    pos = f + d.size();
  }
  parts.push_back(s.substr(pos));
  return parts;
}

std::vector<std::string> py_splitlines(const std::string& s) {
  // Python str.splitlines(): \n \r \r\n \v \f \x1c-\x1e \x85 \u2028 \u2029.
  std::vector<std::string> parts;
  std::vector<char32_t> cps = utf8_decode(s);
  size_t b = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    char32_t c = cps[i];
    if (c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
        c == 0x85 || c == 0x2028 || c == 0x2029) {
      parts.push_back(encode(cps, b, i));
      if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
      b = i + 1;
    }
  }
  if (b < cps.size()) parts.push_back(encode(cps, b));
  return parts;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep,
                       int64_t count) {
  std::string out;
  if (old.empty()) {
    std::vector<char32_t> cps = utf8_decode(s);
    int64_t n = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || n < count) { out += rep; ++n; }
      if (i < cps.size()) utf8_append(out, cps[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += rep;
    pos = f + old.size();
    ++n;
  }
  out.append(s, pos);
  return out;
}

Value str_list(const std::vector<std::string>& parts) {
  List l;
  for (const auto& p : parts) l.emplace_back(p);
  return Value::list(std::move(l));
}

bool need_str(Interp& in, const Value* v, const char* what) {
  if (!v || !v->is_string()) return in.fail(RenderErrc::kType, std::string(what) + " must be str");
  return true;
}

bool int_arg(Interp& in, const Value* v, int64_t& out, int64_t dflt) {
  if (!v || v->is_none()) { out = dflt; return true; }
  if (!v->is_int() && !v->is_bool()) return in.fail(RenderErrc::kType, "integer argument expected");
  out = v->as_int();
  return true;
}

bool str_method(Interp& in, const std::string& s, const std::string& name, CallArgs& a, Value& out) {
  if (name == "startswith" || name == "endswith") {
    const Value* p = a.arg(0, "prefix");
    if (!p) return in.fail(RenderErrc::kType, name + "() takes at least 1 argument");
    auto test = [&](const std::string& x) {
      if (name == "startswith") return s.compare(0, x.size(), x) == 0 && s.size() >= x.size();
      return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
    };
    if (p->is_tuple()) {
      bool any = false;
      for (const auto& x : p->items()) {
        if (!need_str(in, &x, name.c_str())) return false;
        any = any || test(x.str());
      }
      out = Value(any);
      return true;
    }
    if (!need_str(in, p, name.c_str())) return false;
    out = Value(test(p->str()));
    return true;
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* c = a.arg(0, "chars");
    if (c && !c->is_none() && !c->is_string()) return in.fail(RenderErrc::kType, "strip arg must be None or str");
    out = Value(py_strip(s, c, name != "rstrip", name != "lstrip"));
    return true;
  }
  if (name == "split" || name == "rsplit") {
    const Value* sep = a.arg(0, "sep");
    if (sep && !sep->is_none() && !need_str(in, sep, "separator")) return false;
    if (sep && sep->is_string() && sep->str().empty()) return in.fail(RenderErrc::kType, "empty separator");
    int64_t maxsplit;
    if (!int_arg(in, a.arg(1, "maxsplit"), maxsplit, -1)) return false;
    if (name == "rsplit" && maxsplit >= 0) {
      // rsplit with a limit: split fully, then re-join the leading parts.
      std::vector<std::string> all = py_split(s, sep, -1);
      if (sep && sep->is_string() && static_cast<int64_t>(all.size()) > maxsplit + 1) {
        size_t keep = all.size() - static_cast<size_t>(maxsplit);
        std::string head;
        for (size_t i = 0; i < keep; ++i) { if (i) head += sep->str(); head += all[i]; }
        std::vector<std::string> r{head};
        r.insert(r.end(), all.begin() + static_cast<std::ptrdiff_t>(keep), all.end());
        out = str_list(r);
        return true;
      }
      if (!sep || !sep->is_string())
        return in.fail(RenderErrc::kUnsupported, "rsplit on whitespace with maxsplit");
      out = str_list(all);
      return true;
    }
    out = str_list(py_split(s, sep, maxsplit));
    return true;
  }
  if (name == "replace") {
    const Value* o = a.arg(0, "old");
    const Value* n = a.arg(1, "new");
    if (!need_str(in, o, "replace() old") || !need_str(in, n, "replace() new")) return false;
    int64_t count;
    if (!int_arg(in, a.arg(2, "count"), count, -1)) return false;
    std::string r = py_replace(s, o->str(), n->str(), count);
    if (r.size() > in.opt_.limits.max_output_bytes) return in.fail(RenderErrc::kLimit, "string too large");
    out = Value(std::move(r));
    return true;
  }
  if (name == "upper") { out = Value(map_case(s, 0)); return true; }
  if (name == "lower") { out = Value(map_case(s, 1)); return true; }
  if (name == "title") { out = Value(map_case(s, 2)); return true; }
  if (name == "capitalize") { out = Value(map_case(s, 3)); return true; }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    const Value* sub = a.arg(0, "sub");
    if (!need_str(in, sub, name.c_str())) return false;
    if (name == "count") {
      int64_t n = 0;
      if (sub->str().empty()) n = static_cast<int64_t>(cp_len(s)) + 1;
      else
        for (size_t p = s.find(sub->str()); p != std::string::npos; p = s.find(sub->str(), p + sub->str().size())) ++n;
      out = Value(n);
      return true;
    }
    size_t p = (name == "find" || name == "index") ? s.find(sub->str()) : s.rfind(sub->str());
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex") return in.fail(RenderErrc::kType, "substring not found");
      out = Value(int64_t{-1});
      return true;
    }
    out = Value(static_cast<int64_t>(cp_len(s.substr(0, p))));
    return true;
  }
  if (name == "join") {
    const Value* it = a.arg(0, "iterable");
    std::vector<Value> items;
    if (!it || !in.iterate(*it, items)) return it ? false : in.fail(RenderErrc::kType, "join() takes 1 argument");
    std::string r;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) return in.fail(RenderErrc::kType, "sequence item: expected str");
      if (i) r += s;
      r += items[i].str();
    }
    out = Value(std::move(r));
    return true;
  }
  if (name == "splitlines") {
    out = str_list(py_splitlines(s));
    return true;
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" ||
      name == "isupper" || name == "islower") {
    std::vector<char32_t> cps = utf8_decode(s);
    bool r = !cps.empty();
    bool cased = false;
    for (char32_t c : cps) {
      auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
      bool letter = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
      bool digit = cat == UTF8PROC_CATEGORY_ND;
      if (name == "isdigit") r = r && digit;
      else if (name == "isalpha") r = r && letter;
      else if (name == "isalnum") r = r && (letter || digit || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO);
      else if (name == "isspace") r = r && py_isspace(c);
      else if (name == "isupper") { if (cat == UTF8PROC_CATEGORY_LL) r = false; if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) cased = true; }
      else { if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) r = false; if (cat == UTF8PROC_CATEGORY_LL) cased = true; }
    }
    if (name == "isupper" || name == "islower") r = r && cased;
    out = Value(r);
    return true;
  }
  if (name == "format") {  // str.format: {}, {0}, {name}, {{ and }}; no format specs
    std::string r;
    size_t auto_idx = 0;
    bool manual = false;
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (c == '}' ) {
        if (i + 1 < s.size() && s[i + 1] == '}') { r += '}'; ++i; continue; }
        return in.fail(RenderErrc::kType, "Single '}' encountered in format string");
      }
      if (c != '{') { r += c; continue; }
      if (i + 1 < s.size() && s[i + 1] == '{') { r += '{'; ++i; continue; }
      size_t e = s.find('}', i);
      if (e == std::string::npos) return in.fail(RenderErrc::kType, "Single '{' encountered in format string");
      std::string field = s.substr(i + 1, e - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos)
        return in.fail(RenderErrc::kUnsupported, "str.format with a format spec or field access");
      const Value* v = nullptr;
      bool numeric = !field.empty() && std::all_of(field.begin(), field.end(), [](char d) {
        return std::isdigit(static_cast<unsigned char>(d));
      });
      if (field.empty() ? manual : numeric ? auto_idx > 0 : false)
        return in.fail(RenderErrc::kType, "cannot switch between automatic and manual field numbering");
      if (numeric) manual = true;
      if (field.empty()) {
        v = auto_idx < a.pos.size() ? &a.pos[auto_idx] : nullptr;
        ++auto_idx;
      } else if (numeric) {
        size_t k = field.size() > 6 ? SIZE_MAX : std::stoul(field);
        v = k < a.pos.size() ? &a.pos[k] : nullptr;
      } else {
        v = a.get_kw(field);
      }
      if (!v) return in.fail(RenderErrc::kType, "format field '" + field + "' has no argument");
      v->append_str(r);
      if (r.size() > in.opt_.limits.max_output_bytes) return in.fail(RenderErrc::kLimit, "string too large");
      i = e;
    }
    out = Value(std::move(r));
    return true;
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const Value* x = a.arg(0, "prefix");
    if (!need_str(in, x, name.c_str())) return false;
    const std::string& f = x->str();
    if (name == "removeprefix" && s.compare(0, f.size(), f) == 0 && s.size() >= f.size()) out = Value(s.substr(f.size()));
    else if (name == "removesuffix" && !f.empty() && s.size() >= f.size() && s.compare(s.size() - f.size(), f.size(), f) == 0)
      out = Value(s.substr(0, s.size() - f.size()));
    else out = Value(s);
    return true;
  }
  return in.fail(RenderErrc::kUnsupported, "str." + name + "() is not supported");
}

const std::string_view kStrMethods[] = {"startswith", "endswith", "strip", "lstrip", "rstrip", "split",
                                   "rsplit", "replace", "upper", "lower", "title", "capitalize",
                                   "find", "rfind", "index", "rindex", "count", "join", "splitlines",
                                   "isdigit", "isalpha", "isspace", "isalnum", "isupper", "islower",
                                   "format", "zfill", "center", "ljust", "rjust", "encode",
                                   "partition", "rpartition", "casefold", "swapcase", "expandtabs",
                                   "isnumeric", "isdecimal", "istitle", "isidentifier",
                                   "isprintable", "isascii", "removeprefix", "removesuffix",
                                   "translate", "maketrans", "format_map"};
const std::string_view kDictMethods[] = {"items", "keys", "values", "get", "copy", "pop", "popitem",
                                    "setdefault", "update", "clear", "fromkeys"};
const std::string_view kListMethods[] = {"index", "count", "copy", "append", "extend", "insert",
                                    "pop", "remove", "reverse", "sort", "clear"};

template <size_t N>
bool in_list(const std::string_view (&arr)[N], std::string_view s) {
  for (std::string_view x : arr)
    if (same_name(s, x)) return true;
  return false;
}

Value dict_items(const Dict& d) {
  List l;
  for (const auto& [k, v] : d.items) l.push_back(Value::list({Value(k), v}, true));
  return Value::list(std::move(l));
}

bool dict_method(Interp& in, const Value& obj, const std::string& name, CallArgs& a, Value& out) {
  const Dict& d = obj.dict_ref();
  if (name == "items") { out = dict_items(d); return true; }
  if (name == "keys" || name == "values") {
    List l;
    for (const auto& [k, v] : d.items) l.push_back(name == "keys" ? Value(k) : v);
    out = Value::list(std::move(l));
    return true;
  }
  if (name == "get") {
    const Value* k = a.arg(0, "key");
    if (!k) return in.fail(RenderErrc::kType, "get expected at least 1 argument");
    const Value* v = k->is_string() ? d.find(k->str()) : nullptr;
    const Value* dflt = a.arg(1, "default");
    out = v ? *v : dflt ? *dflt : Value::none();
    return true;
  }
  if (name == "copy") { out = Value::dict(d); return true; }
  return in.fail(RenderErrc::kUnsupported, "access to dict." + name + "() is unsafe (immutable sandbox)");
}

bool list_method(Interp& in, const Value& obj, const std::string& name, CallArgs& a, Value& out) {
  const List& l = obj.items();
  if (name == "index" || name == "count") {
    const Value* x = a.arg(0, "value");
    if (!x) return in.fail(RenderErrc::kType, name + "() takes exactly one argument");
    int64_t n = 0;
    for (size_t i = 0; i < l.size(); ++i)
      if (py_equal(l[i], *x)) {
        if (name == "index") { out = Value(static_cast<int64_t>(i)); return true; }
        ++n;
      }
    if (name == "index") return in.fail(RenderErrc::kType, "value is not in list");
    out = Value(n);
    return true;
  }
  if (name == "copy") { out = Value::list(l); return true; }
  return in.fail(RenderErrc::kUnsupported, "access to list." + name + "() is unsafe (immutable sandbox)");
}

Value bound(const Value& obj, const std::string& name) {
  Callable c;
  c.name = name;
  c.fn = [obj, name](Interp& in, CallArgs& a, Value& out, RenderError&) {
    if (obj.is_string()) return str_method(in, obj.str(), name, a, out);
    if (obj.is_dict()) return dict_method(in, obj, name, a, out);
    return list_method(in, obj, name, a, out);
  };
  c.held.push_back(obj);
  return Value::callable(std::move(c));
}

#include "render/template/jinja/html_entities.inc"

const HtmlEntity* find_entity(std::string_view name) {
  auto it = std::lower_bound(std::begin(kHtmlEntities), std::end(kHtmlEntities), name,
                             [](const HtmlEntity& e, std::string_view n) { return e.name < n; });
  return it != std::end(kHtmlEntities) && it->name == name ? it : nullptr;
}

// Python's html.unescape: numeric references with HTML5's replacements, named references
// (kHtmlEntities), legacy names without ';' and as a prefix.
std::string html_unescape(const std::string& s) {
  if (s.find('&') == std::string::npos) return s;
  static constexpr std::pair<char32_t, char32_t> kCharrefs[] = {
      {0x00, 0xFFFD}, {0x0D, 0x0D}, {0x80, 0x20AC}, {0x81, 0x81}, {0x82, 0x201A}, {0x83, 0x192},
      {0x84, 0x201E}, {0x85, 0x2026}, {0x86, 0x2020}, {0x87, 0x2021}, {0x88, 0x2C6}, {0x89, 0x2030},
      {0x8A, 0x160}, {0x8B, 0x2039}, {0x8C, 0x152}, {0x8D, 0x8D}, {0x8E, 0x17D}, {0x8F, 0x8F},
      {0x90, 0x90}, {0x91, 0x2018}, {0x92, 0x2019}, {0x93, 0x201C}, {0x94, 0x201D}, {0x95, 0x2022},
      {0x96, 0x2013}, {0x97, 0x2014}, {0x98, 0x2DC}, {0x99, 0x2122}, {0x9A, 0x161}, {0x9B, 0x203A},
      {0x9C, 0x153}, {0x9D, 0x9D}, {0x9E, 0x17E}, {0x9F, 0x178}};
  auto dropped = [](char32_t c) {  // html._invalid_codepoints
    return (c >= 0x1 && c <= 0x8) || c == 0xB || (c >= 0xE && c <= 0x1F) || (c >= 0x7F && c <= 0x9F) ||
           (c >= 0xFDD0 && c <= 0xFDEF) || (c & 0xFFFE) == 0xFFFE;
  };
  auto is_digit = [](char32_t c, bool hex) {
    return (c >= '0' && c <= '9') || (hex && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')));
  };
  std::vector<char32_t> cps = utf8_decode(s);
  const size_t n = cps.size();
  std::string out;
  size_t i = 0;
  while (i < n) {
    if (cps[i] != '&') { utf8_append(out, cps[i++]); continue; }
    size_t j = i + 1;
    if (j < n && cps[j] == '#') {
      size_t k = j + 1;
      bool hex = k < n && (cps[k] == 'x' || cps[k] == 'X');
      if (hex) ++k;
      size_t digits = k;
      uint64_t num = 0;
      for (; k < n && is_digit(cps[k], hex); ++k) {
        char32_t c = cps[k];
        uint64_t d = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
        num = std::min<uint64_t>(num * (hex ? 16 : 10) + d, 0x110000);
      }
      if (k == digits) { out += '&'; ++i; continue; }
      if (k < n && cps[k] == ';') ++k;
      i = k;
      char32_t c = static_cast<char32_t>(num);
      auto ref = std::find_if(std::begin(kCharrefs), std::end(kCharrefs), [&](auto& p) { return p.first == c; });
      if (ref != std::end(kCharrefs)) utf8_append(out, ref->second);
      else if (num > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) utf8_append(out, 0xFFFD);
      else if (!dropped(c)) utf8_append(out, c);
      continue;
    }
    size_t k = j;
    auto name_char = [](char32_t c) {
      return c != '\t' && c != '\n' && c != '\f' && c != ' ' && c != '<' && c != '&' && c != '#' && c != ';';
    };
    while (k < n && k - j < 32 && name_char(cps[k])) ++k;
    if (k == j) { out += '&'; ++i; continue; }
    bool semi = k < n && cps[k] == ';';
    std::string name = encode(cps, j, k);
    i = k + (semi ? 1 : 0);
    const HtmlEntity* e = find_entity(name);
    if (e && (semi || e->legacy)) { utf8_append(out, e->cp); continue; }
    // The longest legacy name that is a proper prefix of name + ';' (at least 2 characters).
    size_t len = k - j + (semi ? 1 : 0);
    bool done = false;
    for (size_t x = len - 1; x >= 2 && !done; --x) {
      if (x > k - j) continue;
      std::string prefix = encode(cps, j, j + x);
      const HtmlEntity* p = find_entity(prefix);
      if (p && p->legacy) {
        utf8_append(out, p->cp);
        out += encode(cps, j + x, k);
        if (semi) out += ';';
        done = true;
      }
    }
    if (!done) {
      out += '&';
      out += name;
      if (semi) out += ';';
    }
  }
  return out;
}

// markupsafe's Markup.striptags: drop <!--...--> comments, then <...> tags, collapse whitespace
// runs to one space, then html.unescape.
std::string strip_tags(const std::string& s) {
  auto drop = [](const std::string& in, std::string_view open, std::string_view close) {
    std::string out;
    size_t pos = 0;
    while (true) {
      size_t a = in.find(open, pos);
      size_t b = a == std::string::npos ? a : in.find(close, a + open.size());
      if (b == std::string::npos) {
        out.append(in, pos, std::string::npos);
        return out;
      }
      out.append(in, pos, a - pos);
      pos = b + close.size();
    }
  };
  std::string t = drop(drop(s, "<!--", "-->"), "<", ">");
  std::string joined;
  for (const auto& w : py_split(t, nullptr, -1)) {
    if (!joined.empty()) joined += ' ';
    joined += w;
  }
  return html_unescape(joined);
}

bool check_arith(Interp& in, const Value& a, const Value& b) {
  if (a.is_undefined()) return in.fail(RenderErrc::kUndefined, undefined_msg(a));
  if (b.is_undefined()) return in.fail(RenderErrc::kUndefined, undefined_msg(b));
  return true;
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

bool Interp::get_attr(const Value& obj, const std::string& name, Value& out) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: return fail(RenderErrc::kUndefined, undefined_msg(obj) + " (attribute '" + name + "')");
    case Value::Kind::kDict:
      if (in_list(kDictMethods, name)) { out = bound(obj, name); return true; }
      if (const Value* v = obj.dict_ref().find(name)) { out = *v; return true; }
      break;
    case Value::Kind::kNamespace:
      if (const Value* v = obj.dict_ref().find(name)) { out = *v; return true; }
      break;
    case Value::Kind::kString:
      if (in_list(kStrMethods, name)) { out = bound(obj, name); return true; }
      break;
    case Value::Kind::kList:
      if (in_list(kListMethods, name) && !(obj.is_tuple() && name != "index" && name != "count")) {
        out = bound(obj, name);
        return true;
      }
      break;
    case Value::Kind::kCallable:  // a loop object's attributes
      if (obj.fn().loop) {
        if (loop_attr(obj.fn(), name, out)) return true;
      } else if (const Value* v = obj.fn().attrs.find(name)) {
        out = *v;
        return true;
      }
      break;
    default: break;
  }
  out = Value::undefined(name);
  return true;
}

bool Interp::get_item(const Value& obj, const Value& key, Value& out) {
  switch (obj.kind()) {
    case Value::Kind::kDict:
      if (key.is_string()) {
        if (const Value* v = obj.dict_ref().find(key.str())) { out = *v; return true; }
        if (in_list(kDictMethods, key.str())) { out = bound(obj, key.str()); return true; }
      }
      break;
    case Value::Kind::kList:
    case Value::Kind::kString:
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_int();
        if (obj.is_list()) {
          auto n = static_cast<int64_t>(obj.items().size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) { out = obj.items()[static_cast<size_t>(i)]; return true; }
        } else {
          std::vector<char32_t> cps = utf8_decode(obj.str());
          auto n = static_cast<int64_t>(cps.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) {
            std::string s;
            utf8_append(s, cps[static_cast<size_t>(i)]);
            out = Value(std::move(s));
            return true;
          }
        }
      } else if (key.is_string()) {
        return get_attr(obj, key.str(), out);
      }
      break;
    case Value::Kind::kUndefined:
      if (key.is_string()) return fail(RenderErrc::kUndefined, undefined_msg(obj));
      break;
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
      if (key.is_string()) return get_attr(obj, key.str(), out);
      break;
    default: break;
  }
  out = Value::undefined(key.is_string() ? key.str() : std::string());
  return true;
}

bool Interp::slice(const Value& obj, const Value* start, const Value* stop, const Value* step_v,
                   Value& out) {
  auto get = [&](const Value* v, bool& present, int64_t& x) {
    present = v && !v->is_none();
    if (!present) return true;
    if (!v->is_int() && !v->is_bool()) return fail(RenderErrc::kType, "slice indices must be integers or None");
    x = v->as_int();
    return true;
  };
  bool has_a, has_b, has_c;
  int64_t a = 0, b = 0, c = 1;
  if (!get(start, has_a, a) || !get(stop, has_b, b) || !get(step_v, has_c, c)) return false;
  if (!has_c) c = 1;
  if (c == 0) return fail(RenderErrc::kType, "slice step cannot be zero");
  if (c == INT64_MIN) c = -INT64_MAX;
  std::vector<char32_t> cps;
  int64_t n;
  if (obj.is_list()) n = static_cast<int64_t>(obj.items().size());
  else if (obj.is_string()) { cps = utf8_decode(obj.str()); n = static_cast<int64_t>(cps.size()); }
  else if (obj.is_undefined()) { out = Value::undefined(); return true; }
  else return fail(RenderErrc::kType, std::string("'") + type_name(obj) + "' object is not subscriptable");
  auto clamp = [&](bool has, int64_t x, int64_t dflt) {
    if (!has) return dflt;
    if (x < 0) { x += n; if (x < 0) x = c < 0 ? -1 : 0; }
    else if (x >= n) x = c < 0 ? n - 1 : n;
    return x;
  };
  int64_t lo = clamp(has_a, a, c < 0 ? n - 1 : 0);
  int64_t hi = clamp(has_b, b, c < 0 ? -1 : n);
  std::vector<size_t> idx;
  if (c > 0) for (int64_t i = lo; i < hi; i += c) idx.push_back(static_cast<size_t>(i));
  else for (int64_t i = lo; i > hi; i += c) idx.push_back(static_cast<size_t>(i));
  if (obj.is_list()) {
    List l;
    l.reserve(idx.size());
    for (size_t i : idx) l.push_back(obj.items()[i]);
    out = Value::list(std::move(l), obj.is_tuple());
  } else {
    std::string s;
    for (size_t i : idx) utf8_append(s, cps[i]);
    out = Value(std::move(s));
  }
  return true;
}

bool Interp::iterate(const Value& v, std::vector<Value>& out) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: out.clear(); return true;
    case Value::Kind::kList: out = v.items(); return true;
    case Value::Kind::kDict:
      out.clear();
      for (const auto& [k, x] : v.dict_ref().items) out.emplace_back(k);
      return true;
    case Value::Kind::kString: {
      out.clear();
      for (char32_t c : utf8_decode(v.str())) {
        std::string s;
        utf8_append(s, c);
        out.emplace_back(std::move(s));
      }
      return true;
    }
    default: return fail(RenderErrc::kType, std::string("'") + type_name(v) + "' object is not iterable");
  }
}

bool Interp::contains(const Value& container, const Value& item, bool& out) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string()) return fail(RenderErrc::kType, "'in <string>' requires string as left operand");
      out = container.str().find(item.str()) != std::string::npos;
      return true;
    case Value::Kind::kList:
      out = false;
      for (const auto& x : container.items())
        if (py_equal(x, item)) { out = true; break; }
      return true;
    case Value::Kind::kDict:
      out = item.is_string() && container.dict_ref().find(item.str()) != nullptr;
      return true;
    case Value::Kind::kUndefined: out = false; return true;
    default: return fail(RenderErrc::kType, std::string("argument of type '") + type_name(container) + "' is not iterable");
  }
}

bool Interp::compare(std::string_view op, const Value& a, const Value& b, bool& out) {
  if (op == "==") { out = py_equal(a, b); return true; }
  if (op == "!=") { out = !py_equal(a, b); return true; }
  int c = 0;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      if (std::isnan(x) || std::isnan(y)) { out = false; return true; }
      c = x < y ? -1 : x > y ? 1 : 0;
    } else {
      c = a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    }
  } else if (a.is_string() && b.is_string()) {
    int r = a.str().compare(b.str());
    c = r < 0 ? -1 : r > 0 ? 1 : 0;
  } else if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.items();
    const auto& y = b.items();
    size_t i = 0;
    while (i < x.size() && i < y.size() && py_equal(x[i], y[i])) ++i;
    if (i < x.size() && i < y.size()) return compare(op, x[i], y[i], out);
    c = x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  } else {
    if (a.is_undefined()) return fail(RenderErrc::kUndefined, undefined_msg(a));
    if (b.is_undefined()) return fail(RenderErrc::kUndefined, undefined_msg(b));
    return fail(RenderErrc::kType, std::string("'") + std::string(op) + "' not supported between instances of '" +
                                       type_name(a) + "' and '" + type_name(b) + "'");
  }
  out = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
  return true;
}

bool Interp::binary(std::string_view op, const Value& a, const Value& b, Value& out) {
  if (op == "~") {
    std::string s;
    a.append_str(s);
    b.append_str(s);
    if (!charge(s.size())) return false;
    if (s.size() > opt_.limits.max_output_bytes) return fail(RenderErrc::kLimit, "string too large");
    out = Value(std::move(s));
    return true;
  }
  if (!check_arith(*this, a, b)) return false;
  const size_t max_bytes = opt_.limits.max_output_bytes;
  if (a.is_number() && b.is_number()) {
    bool fl = a.is_float() || b.is_float();
    if (op == "/") {
      if (b.as_double() == 0) return fail(RenderErrc::kType, "division by zero");
      out = Value(a.as_double() / b.as_double());
      return true;
    }
    if (fl) {
      double x = a.as_double(), y = b.as_double();
      if (op == "+") out = Value(x + y);
      else if (op == "-") out = Value(x - y);
      else if (op == "*") out = Value(x * y);
      else if (op == "**") out = Value(std::pow(x, y));
      else {
        if (y == 0) return fail(RenderErrc::kType, "float division by zero");
        if (op == "//") out = Value(std::floor(x / y));
        else out = Value(py_fmod(x, y));
      }
      return true;
    }
    int64_t x = a.as_int(), y = b.as_int(), r = 0;
    bool ovf = false;
    if (op == "+") ovf = __builtin_add_overflow(x, y, &r);
    else if (op == "-") ovf = __builtin_sub_overflow(x, y, &r);
    else if (op == "*") ovf = __builtin_mul_overflow(x, y, &r);
    else if (op == "//" || op == "%") {
      if (y == 0) return fail(RenderErrc::kType, "integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) return fail(RenderErrc::kLimit, "integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) { --q; m += y; }
      r = op == "//" ? q : m;
    } else if (op == "**") {
      if (y < 0) { out = Value(std::pow(static_cast<double>(x), static_cast<double>(y))); return true; }
      r = 1;
      for (int64_t i = 0; i < y && !ovf; ++i) {
        ovf = __builtin_mul_overflow(r, x, &r);
        if (r == 0 || r == 1) break;
        if (r == -1) { r = (y % 2) ? -1 : 1; break; }
      }
    }
    if (ovf) return fail(RenderErrc::kLimit, "integer overflow");
    out = Value(r);
    return true;
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.str().size() + b.str().size() > max_bytes) return fail(RenderErrc::kLimit, "string too large");
      if (!charge(a.str().size() + b.str().size())) return false;
      out = Value(a.str() + b.str());
      return true;
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      List l = a.items();
      l.insert(l.end(), b.items().begin(), b.items().end());
      out = Value::list(std::move(l), a.is_tuple());
      return true;
    }
  }
  if (op == "*") {
    const Value* seq = (a.is_string() || a.is_list()) ? &a : (b.is_string() || b.is_list()) ? &b : nullptr;
    const Value* cnt = seq == &a ? &b : &a;
    if (seq && (cnt->is_int() || cnt->is_bool())) {
      int64_t n = std::max<int64_t>(0, cnt->as_int());
      size_t unit = seq->is_string() ? seq->str().size() : seq->items().size() * 16;
      if (unit && static_cast<uint64_t>(n) > max_bytes / unit) return fail(RenderErrc::kLimit, "sequence too large");
      if (!charge(unit * static_cast<size_t>(n))) return false;
      if (seq->is_string()) {
        std::string s;
        for (int64_t i = 0; i < n; ++i) s += seq->str();
        out = Value(std::move(s));
      } else {
        List l;
        for (int64_t i = 0; i < n; ++i) l.insert(l.end(), seq->items().begin(), seq->items().end());
        out = Value::list(std::move(l), seq->is_tuple());
      }
      return true;
    }
  }
  if (op == "%" && a.is_string()) {
    std::string s;
    if (!percent_format(a.str(), b, s)) return false;
    out = Value(std::move(s));
    return true;
  }
  return fail(RenderErrc::kType, std::string("unsupported operand type(s) for ") + std::string(op) + ": '" +
                                     type_name(a) + "' and '" + type_name(b) + "'");
}

bool Interp::percent_format(const std::string& fmt, const Value& args, std::string& out) {
  std::vector<Value> pos;
  const Dict* map = nullptr;
  if (args.is_tuple()) pos = args.items();
  else if (args.is_dict()) map = &args.dict_ref();
  else pos.push_back(args);
  size_t next_arg = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') { out += fmt[i]; continue; }
    if (++i >= fmt.size()) return fail(RenderErrc::kType, "incomplete format");
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      size_t e = fmt.find(')', i);
      if (e == std::string::npos || !map) return fail(RenderErrc::kType, "format requires a mapping");
      arg = map->find(fmt.substr(i + 1, e - i - 1));
      if (!arg) return fail(RenderErrc::kType, "format key not found");
      i = e + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) flags += fmt[i++];
    std::string width, prec;
    while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) width += fmt[i++];
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      prec = "0";
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) prec += fmt[i++];
    }
    if (width.size() > 4 || prec.size() > 4) return fail(RenderErrc::kLimit, "format width too large");
    if (i >= fmt.size()) return fail(RenderErrc::kType, "incomplete format");
    char conv = fmt[i];
    if (conv == '%') { out += '%'; continue; }
    if (!arg) {
      if (map && !args.is_tuple()) arg = &args;
      else if (next_arg < pos.size()) arg = &pos[next_arg++];
      else return fail(RenderErrc::kType, "not enough arguments for format string");
    }
    std::string piece;
    std::string spec = "%" + flags + width + (prec.empty() ? "" : "." + prec.substr(1).insert(0, ""));
    if (!prec.empty()) spec = "%" + flags + width + "." + prec.substr(1);
    char buf[512];
    switch (conv) {
      case 's': case 'r': {
        std::string s;
        if (conv == 's') arg->append_str(s); else arg->append_repr(s);
        if (!prec.empty()) s = encode(utf8_decode(s), 0, static_cast<size_t>(std::stoi(prec.substr(1).empty() ? "0" : prec.substr(1))));
        size_t w = width.empty() ? 0 : static_cast<size_t>(std::stoi(width));
        size_t len = cp_len(s);
        if (len < w) {
          if (flags.find('-') != std::string::npos) s.append(w - len, ' ');
          else s.insert(0, w - len, ' ');
        }
        piece = s;
        break;
      }
      case 'd': case 'i': case 'x': case 'X': case 'o': case 'c': {
        if (!arg->is_number()) return fail(RenderErrc::kType, "%d format: a number is required");
        auto v = static_cast<long long>(arg->is_float() ? std::trunc(arg->as_double()) : static_cast<double>(arg->as_int()));
        if (!arg->is_float()) v = arg->as_int();
        if (conv == 'c') { utf8_append(piece, static_cast<char32_t>(v)); break; }
        std::string f = spec + "ll" + (conv == 'i' ? 'd' : conv);
        std::snprintf(buf, sizeof buf, f.c_str(), v);
        piece = buf;
        break;
      }
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
        if (!arg->is_number()) return fail(RenderErrc::kType, "must be real number");
        std::string f = spec + conv;
        std::snprintf(buf, sizeof buf, f.c_str(), arg->as_double());
        piece = buf;
        break;
      }
      default: return fail(RenderErrc::kType, "unsupported format character");
    }
    out += piece;
    if (out.size() > opt_.limits.max_output_bytes) return fail(RenderErrc::kLimit, "string too large");
  }
  if (!map && next_arg < pos.size() && args.is_tuple())
    return fail(RenderErrc::kType, "not all arguments converted during string formatting");
  return true;
}

Value Interp::globals_lookup(std::string_view name) {
  if (name == "range") {
    return Value::callable("range", [](Interp& in, CallArgs& a, Value& out, RenderError&) {
      int64_t v[3] = {0, 0, 1};
      for (const auto& x : a.pos)
        if (!x.is_int() && !x.is_bool()) return in.fail(RenderErrc::kType, "range() integer arguments expected");
      if (a.pos.size() == 1) v[1] = a.pos[0].as_int();
      else if (a.pos.size() == 2 || a.pos.size() == 3) {
        for (size_t i = 0; i < a.pos.size(); ++i) v[i] = a.pos[i].as_int();
      } else {
        return in.fail(RenderErrc::kType, "range expected 1 to 3 arguments");
      }
      if (v[2] == 0) return in.fail(RenderErrc::kType, "range() arg 3 must not be zero");
      double count = std::ceil((static_cast<double>(v[1]) - static_cast<double>(v[0])) / static_cast<double>(v[2]));
      if (count > static_cast<double>(in.opt_.limits.max_range))
        return in.fail(RenderErrc::kLimit, "range too large");
      List l;
      for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) l.emplace_back(i);
      out = Value::list(std::move(l));
      return true;
    });
  }
  if (name == "namespace" || name == "dict") {
    bool ns = name == "namespace";
    return Value::callable(std::string(name), [ns](Interp& in, CallArgs& a, Value& out, RenderError&) {
      Dict d;
      for (const auto& p : a.pos) {
        if (!p.is_dict()) return in.fail(RenderErrc::kType, "namespace()/dict() positional argument must be a dict");
        for (const auto& [k, v] : p.dict_ref().items) d.set(k, v);
      }
      if (a.pos.empty()) d.items = a.kw;  // keywords are unique (a **mapping can be large)
      else for (const auto& [k, v] : a.kw) d.set(k, v);
      out = ns ? Value::ns(std::move(d)) : Value::dict(std::move(d));
      return true;
    });
  }
  if (name == "raise_exception") {
    return Value::callable("raise_exception", [](Interp& in, CallArgs& a, Value&, RenderError&) {
      std::string msg;
      if (!a.pos.empty()) a.pos[0].append_str(msg);
      return in.fail(RenderErrc::kRaised, msg);
    });
  }
  if (name == "strftime_now") {
    return Value::callable("strftime_now", [](Interp& in, CallArgs& a, Value& out, RenderError&) {
      if (a.pos.empty() || !a.pos[0].is_string()) return in.fail(RenderErrc::kType, "strftime_now(format)");
      std::time_t t = in.opt_.now ? static_cast<std::time_t>(in.opt_.now()) : std::time(nullptr);
      std::tm tm{};
      gmtime_r(&t, &tm);
      const std::string& f = a.pos[0].str();
      if (f.size() > 256) return in.fail(RenderErrc::kLimit, "strftime format too long");
      char buf[2048];
      size_t n = std::strftime(buf, sizeof buf, f.c_str(), &tm);
      out = Value(std::string(buf, n));
      return true;
    });
  }
  return Value::undefined(std::string(name));
}

// ---- filters
//
// A filter is a function of one signature (FilterFn) found by name in kFilters; aliases (count
// and length, e and escape, ...) are entries of the same function. jinja2's other filters pass
// the parser (is_known_filter) and fail here as unsupported.

namespace {

using FilterFn = bool (*)(Interp& in, const Value& v, CallArgs& a, Value& out);

std::string str_of(const Value& x) {
  std::string s;
  x.append_str(s);
  return s;
}

bool filter_length(Interp& in, const Value& v, CallArgs&, Value& out) {
  switch (v.kind()) {
    case Value::Kind::kString: out = Value(static_cast<int64_t>(cp_len(v.str()))); return true;
    case Value::Kind::kList: out = Value(static_cast<int64_t>(v.items().size())); return true;
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: out = Value(static_cast<int64_t>(v.dict_ref().items.size())); return true;
    case Value::Kind::kUndefined: out = Value(int64_t{0}); return true;
    case Value::Kind::kCallable:  // a loop object: len(loop) is loop.length
      if (v.fn().loop) { out = Value(v.fn().loop_length); return true; }
      if (const Value* n = v.fn().attrs.find("length")) { out = *n; return true; }
      [[fallthrough]];
    default: return in.fail(RenderErrc::kType, std::string("object of type '") + type_name(v) + "' has no len()");
  }
}

bool filter_string(Interp&, const Value& v, CallArgs&, Value& out) {
  out = Value(str_of(v));
  return true;
}

bool filter_safe(Interp&, const Value& v, CallArgs&, Value& out) {
  out = v.is_string() ? v : Value(str_of(v));
  return true;
}

bool filter_escape(Interp&, const Value& v, CallArgs&, Value& out) {
  std::string s = str_of(v), r;
  for (char c : s) {
    switch (c) {
      case '&': r += "&amp;"; break;
      case '<': r += "&lt;"; break;
      case '>': r += "&gt;"; break;
      case '"': r += "&#34;"; break;
      case '\'': r += "&#39;"; break;
      default: r += c;
    }
  }
  out = Value(std::move(r));
  return true;
}

bool filter_trim(Interp&, const Value& v, CallArgs& a, Value& out) {
  const Value* chars = a.arg(0, "chars");
  out = Value(py_strip(str_of(v), chars, true, true));
  return true;
}

template <int Mode>  // map_case's mode: 0 upper 1 lower 2 title 3 capitalize
bool filter_case(Interp&, const Value& v, CallArgs&, Value& out) {
  out = Value(map_case(str_of(v), Mode));
  return true;
}

bool filter_default(Interp&, const Value& v, CallArgs& a, Value& out) {
  const Value* dflt = a.arg(0, "default_value");
  const Value* boolean = a.arg(1, "boolean");
  bool use = v.is_undefined() || (boolean && boolean->truthy() && !v.truthy());
  out = use ? (dflt ? *dflt : Value("")) : v;
  return true;
}

bool filter_tojson(Interp& in, const Value& v, CallArgs& a, Value& out) {
  const Value* ind = a.arg(0, "indent");
  const Value* sk = a.get_kw("sort_keys");
  if (a.get_kw("separators")) return in.fail(RenderErrc::kUnsupported, "tojson separators");
  int indent = -1;
  if (ind && !ind->is_none()) {
    if (!ind->is_int() || ind->as_int() < 0 || ind->as_int() > 64)
      return in.fail(RenderErrc::kUnsupported, "tojson indent must be a small integer");
    indent = static_cast<int>(ind->as_int());
  }
  std::string s, bad;
  if (!to_json(v, s, indent, sk && sk->truthy(), bad, in.opt_.limits.max_depth))
    return in.fail(RenderErrc::kType, "Object of type " + bad + " is not JSON serializable");
  if (s.size() > in.opt_.limits.max_output_bytes) return in.fail(RenderErrc::kLimit, "output larger than the limit");
  out = Value(std::move(s));
  return true;
}

bool filter_list(Interp& in, const Value& v, CallArgs&, Value& out) {
  std::vector<Value> items;
  if (!in.iterate(v, items)) return false;
  out = Value::list(std::move(items));
  return true;
}

template <bool First>
bool filter_first_last(Interp& in, const Value& v, CallArgs&, Value& out) {
  std::vector<Value> items;
  if (!in.iterate(v, items)) return false;
  if (items.empty()) out = Value::undefined();
  else out = First ? items.front() : items.back();
  return true;
}

bool filter_reverse(Interp& in, const Value& v, CallArgs&, Value& out) {
  if (v.is_string()) {
    std::vector<char32_t> cps = utf8_decode(v.str());
    std::reverse(cps.begin(), cps.end());
    out = Value(encode(cps));
    return true;
  }
  std::vector<Value> items;
  if (!in.iterate(v, items)) return false;
  std::reverse(items.begin(), items.end());
  out = Value::list(std::move(items));
  return true;
}

bool filter_join(Interp& in, const Value& v, CallArgs& a, Value& out) {
  const Value* sep = a.arg(0, "d");
  const Value* attr = a.arg(1, "attribute");
  std::vector<Value> items;
  if (!in.iterate(v, items)) return false;
  std::string s, sp = sep ? str_of(*sep) : "";
  for (size_t i = 0; i < items.size(); ++i) {
    Value x = items[i];
    if (attr && !attr->is_none()) {
      Value y;
      if (!in.get_item(x, *attr, y)) return false;
      x = y;
    }
    if (i) s += sp;
    x.append_str(s);
    if (s.size() > in.opt_.limits.max_output_bytes) return in.fail(RenderErrc::kLimit, "string too large");
  }
  out = Value(std::move(s));
  return true;
}

bool filter_items(Interp& in, const Value& v, CallArgs&, Value& out) {
  if (v.is_undefined()) { out = Value::list({}); return true; }
  if (!v.is_dict()) return in.fail(RenderErrc::kType, "Can only get item pairs from a mapping.");
  out = dict_items(v.dict_ref());
  return true;
}

bool filter_dictsort(Interp& in, const Value& v, CallArgs&, Value& out) {
  if (!v.is_dict()) return in.fail(RenderErrc::kType, "dictsort expects a mapping");
  auto items = v.dict_ref().items;
  std::stable_sort(items.begin(), items.end(), [](auto& x, auto& y) { return map_case(x.first, 1) < map_case(y.first, 1); });
  Dict d;
  d.items = std::move(items);
  out = dict_items(d);
  return true;
}

bool filter_int(Interp&, const Value& v, CallArgs& a, Value& out) {
  const Value* dflt = a.arg(0, "default");
  Value d = dflt ? *dflt : Value(int64_t{0});
  if (v.is_int() || v.is_bool()) { out = Value(v.as_int()); return true; }
  if (v.is_float()) {
    double x = v.as_double();
    if (!std::isfinite(x) || std::fabs(x) > 9.2e18) { out = d; return true; }
    out = Value(static_cast<int64_t>(x));
    return true;
  }
  if (v.is_string()) {
    std::string s = py_strip(v.str(), nullptr, true, true);
    std::string t;
    for (char c : s) if (c != '_') t += c;
    char* end = nullptr;
    errno = 0;
    long long r = t.empty() ? 0 : std::strtoll(t.c_str(), &end, 10);
    if (!t.empty() && end && *end == 0 && errno == 0) { out = Value(static_cast<int64_t>(r)); return true; }
    double f = t.empty() ? 0 : std::strtod(t.c_str(), &end);
    if (!t.empty() && end && *end == 0 && std::isfinite(f) && std::fabs(f) < 9.2e18) {
      out = Value(static_cast<int64_t>(f));
      return true;
    }
  }
  out = d;
  return true;
}

bool filter_float(Interp&, const Value& v, CallArgs& a, Value& out) {
  const Value* dflt = a.arg(0, "default");
  if (v.is_number()) { out = Value(v.as_double()); return true; }
  if (v.is_string()) {
    std::string t = py_strip(v.str(), nullptr, true, true);
    char* end = nullptr;
    double f = t.empty() ? 0 : std::strtod(t.c_str(), &end);
    if (!t.empty() && end && *end == 0) { out = Value(f); return true; }
  }
  out = dflt ? *dflt : Value(0.0);
  return true;
}

bool filter_abs(Interp& in, const Value& v, CallArgs&, Value& out) {
  if (v.is_float()) out = Value(std::fabs(v.as_double()));
  else if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) return in.fail(RenderErrc::kLimit, "integer overflow");
    out = Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  } else return in.fail(RenderErrc::kType, "bad operand type for abs()");
  return true;
}

bool filter_round(Interp& in, const Value& v, CallArgs& a, Value& out) {
  if (!v.is_number()) return in.fail(RenderErrc::kType, "round expects a number");
  int64_t prec;
  if (!int_arg(in, a.arg(0, "precision"), prec, 0)) return false;
  prec = std::clamp<int64_t>(prec, -20, 20);
  const Value* m = a.arg(1, "method");
  std::string method = m && m->is_string() ? m->str() : "common";
  double p = std::pow(10.0, static_cast<double>(prec));
  if (method == "common" && prec >= 0 && std::isfinite(v.as_double())) {
    // Python round(): correctly rounded from the exact binary value, ties to even.
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(prec), v.as_double());
    out = Value(std::strtod(buf, nullptr));
    return true;
  }
  double x = v.as_double() * p;
  x = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
  out = Value(x / p);
  return true;
}

bool filter_format(Interp& in, const Value& v, CallArgs& a, Value& out) {
  std::string s;
  Value args = Value::list(a.pos, true);
  if (!a.kw.empty()) {
    Dict d;
    for (auto& [k, x] : a.kw) d.set(k, x);
    args = Value::dict(std::move(d));
  }
  if (!in.percent_format(str_of(v), args, s)) return false;
  out = Value(std::move(s));
  return true;
}

bool filter_replace(Interp& in, const Value& v, CallArgs& a, Value& out) {
  const Value* o = a.arg(0, "old");
  const Value* n = a.arg(1, "new");
  if (!o || !n) return in.fail(RenderErrc::kType, "replace(old, new)");
  int64_t count;
  if (!int_arg(in, a.arg(2, "count"), count, -1)) return false;
  std::string r = py_replace(str_of(v), str_of(*o), str_of(*n), count);
  if (r.size() > in.opt_.limits.max_output_bytes) return in.fail(RenderErrc::kLimit, "string too large");
  out = Value(std::move(r));
  return true;
}

bool filter_indent(Interp& in, const Value& v, CallArgs& a, Value& out) {
  int64_t width = 4;
  const Value* w = a.arg(0, "width");
  std::string ind(4, ' ');
  if (w && w->is_string()) ind = w->str();
  else if (w) {
    if (!int_arg(in, w, width, 4)) return false;
    ind.assign(static_cast<size_t>(std::clamp<int64_t>(width, 0, 256)), ' ');
  }
  const Value* first = a.arg(1, "first");
  const Value* blank = a.arg(2, "blank");
  std::string s = str_of(v) + "\n";
  std::vector<std::string> lines = py_splitlines(s);
  std::string r;
  if (blank && blank->truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) { if (i) r += "\n" + ind; r += lines[i]; }
  } else {
    r = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) { r += "\n"; if (!lines[i].empty()) r += ind; r += lines[i]; }
  }
  if (first && first->truthy()) r = ind + r;
  if (r.size() > in.opt_.limits.max_output_bytes) return in.fail(RenderErrc::kLimit, "string too large");
  out = Value(std::move(r));
  return true;
}

bool filter_attr(Interp& in, const Value& v, CallArgs& a, Value& out) {
  const Value* n = a.arg(0, "name");
  if (!n || !n->is_string()) return in.fail(RenderErrc::kType, "attr(name)");
  return in.get_attr(v, n->str(), out);
}

bool filter_map(Interp& in, const Value& v, CallArgs& a, Value& out) {
  std::vector<Value> items;
  if (!in.iterate(v, items)) return false;
  List res;
  const Value* attr = a.get_kw("attribute");
  if (attr) {
    const Value* dflt = a.get_kw("default");
    for (auto& x : items) {
      Value y = x;
      std::string path = str_of(*attr);
      size_t p = 0;
      while (true) {
        size_t dot = path.find('.', p);
        std::string part = path.substr(p, dot == std::string::npos ? std::string::npos : dot - p);
        Value z;
        bool digit = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
        if (!in.get_item(y, digit ? Value(static_cast<int64_t>(std::stoll(part.substr(0, 18)))) : Value(part), z)) return false;
        y = z;
        if (dot == std::string::npos) break;
        p = dot + 1;
      }
      if (y.is_undefined() && dflt) y = *dflt;
      res.push_back(y);
    }
  } else {
    if (a.pos.empty() || !a.pos[0].is_string()) return in.fail(RenderErrc::kType, "map requires a filter name or attribute=");
    std::string fname = a.pos[0].str();
    if (fname == "map" || fname == "select" || fname == "reject" || fname == "selectattr" || fname == "rejectattr")
      return in.fail(RenderErrc::kUnsupported, "nested map filter");
    CallArgs rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (auto& x : items) {
      Value y;
      if (!in.step() || !in.apply_filter(fname, x, rest, y)) return false;
      res.push_back(y);
    }
  }
  out = Value::list(std::move(res));
  return true;
}

// select / reject (ByAttr false) and selectattr / rejectattr (true); KeepTrue: select*.
template <bool ByAttr, bool KeepTrue>
bool filter_select(Interp& in, const Value& v, CallArgs& a, Value& out) {
  std::vector<Value> items;
  if (!in.iterate(v, items)) return false;
  List res;
  size_t k = 0;
  std::string attr;
  if (ByAttr) {
    if (a.pos.empty()) return in.fail(RenderErrc::kType, "missing attribute");
    attr = str_of(a.pos[0]);
    k = 1;
  }
  std::string test = a.pos.size() > k && a.pos[k].is_string() ? a.pos[k].str() : "";
  CallArgs targs;
  if (a.pos.size() > k + 1) targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(k + 1), a.pos.end());
  for (auto& x : items) {
    Value y = x;
    if (ByAttr && !in.get_item(x, Value(attr), y)) return false;
    bool r;
    if (test.empty()) r = y.truthy();
    else if (!in.step() || !in.apply_test(test, y, targs, r)) return false;
    if (r == KeepTrue) res.push_back(x);
  }
  out = Value::list(std::move(res));
  return true;
}

// The item itself, or its `attribute=` item (sum, sort, min, max).
bool attribute_key(Interp& in, const Value* attr, const Value& x, Value& y) {
  if (!attr) { y = x; return true; }
  return in.get_item(x, *attr, y);
}

bool filter_sum(Interp& in, const Value& v, CallArgs& a, Value& out) {
  std::vector<Value> items;
  if (!in.iterate(v, items)) return false;
  const Value* attr = a.get_kw("attribute");
  Value acc = a.get_kw("start") ? *a.get_kw("start") : Value(int64_t{0});
  for (auto& x : items) {
    Value y, z;
    if (!attribute_key(in, attr, x, y) || !in.binary("+", acc, y, z)) return false;
    acc = z;
  }
  out = acc;
  return true;
}

bool filter_unique(Interp& in, const Value& v, CallArgs&, Value& out) {
  std::vector<Value> items;
  if (!in.iterate(v, items)) return false;
  List res;
  for (auto& x : items) {
    bool seen = false;
    for (auto& r : res) if (py_equal(r, x)) { seen = true; break; }
    if (!seen) res.push_back(x);
  }
  out = Value::list(std::move(res));
  return true;
}

// sort (Sort), min (!Sort && Min) and max: the items ordered by their keys with Python's <.
template <bool Sort, bool Min>
bool filter_order(Interp& in, const Value& v, CallArgs& a, Value& out) {
  std::vector<Value> items;
  if (!in.iterate(v, items)) return false;
  const Value* attr = a.get_kw("attribute");
  std::vector<std::pair<Value, Value>> kv;
  for (auto& x : items) {
    Value y;
    if (!attribute_key(in, attr, x, y)) return false;
    kv.emplace_back(y, x);
  }
  bool bad = false;
  auto less = [&](const std::pair<Value, Value>& p, const std::pair<Value, Value>& q) {
    bool r = false;
    if (!bad && !in.compare("<", p.first, q.first, r)) bad = true;
    return r;
  };
  if (Sort) {
    std::stable_sort(kv.begin(), kv.end(), less);
    const Value* rev = a.arg(0, "reverse");
    if (rev && rev->truthy()) std::stable_sort(kv.begin(), kv.end(), [&](auto& p, auto& q) { return less(q, p); });
    if (bad) return false;
    List res;
    for (auto& p : kv) res.push_back(p.second);
    out = Value::list(std::move(res));
    return true;
  }
  if (kv.empty()) { out = Value::undefined(); return true; }
  auto it = Min ? std::min_element(kv.begin(), kv.end(), less) : std::max_element(kv.begin(), kv.end(), less);
  if (bad) return false;
  out = it->second;
  return true;
}

bool filter_wordcount(Interp&, const Value& v, CallArgs&, Value& out) {
  out = Value(static_cast<int64_t>(py_split(str_of(v), nullptr, -1).size()));
  return true;
}

bool filter_center(Interp& in, const Value& v, CallArgs& a, Value& out) {
  int64_t w;
  if (!int_arg(in, a.arg(0, "width"), w, 80)) return false;
  std::string s = str_of(v);
  auto len = static_cast<int64_t>(cp_len(s));
  w = std::min<int64_t>(w, 4096);
  if (len < w) {
    int64_t total = w - len, left = total / 2 + (total & w & 1);
    s = std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' ');
  }
  out = Value(std::move(s));
  return true;
}

bool filter_batch(Interp& in, const Value& v, CallArgs& a, Value& out) {
  int64_t count;
  if (!int_arg(in, a.arg(0, "linecount"), count, 1)) return false;
  if (count <= 0) return in.fail(RenderErrc::kType, "batch size must be positive");
  const Value* fill = a.arg(1, "fill_with");
  std::vector<Value> items;
  if (!in.iterate(v, items)) return false;
  List res, cur;
  for (auto& x : items) {
    cur.push_back(x);
    if (static_cast<int64_t>(cur.size()) == count) { res.push_back(Value::list(std::move(cur))); cur.clear(); }
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none())
      while (static_cast<int64_t>(cur.size()) < count) cur.push_back(*fill);
    res.push_back(Value::list(std::move(cur)));
  }
  out = Value::list(std::move(res));
  return true;
}

bool filter_striptags(Interp& in, const Value& v, CallArgs&, Value& out) {
  std::string s = strip_tags(str_of(v));
  if (!in.charge(s.size())) return false;
  out = Value(std::move(s));
  return true;
}

// jinja2 do_truncate with the default environment's truncate.leeway policy (5).
bool filter_truncate(Interp& in, const Value& v, CallArgs& a, Value& out) {
  const Value* len_v = a.arg(0, "length");
  const Value* kill = a.arg(1, "killwords");
  const Value* end_v = a.arg(2, "end");
  int64_t length = 255, leeway = 5;
  if (len_v && !len_v->is_int() && !len_v->is_bool())
    return in.fail(RenderErrc::kType, "truncate length must be an integer");
  if (len_v) length = len_v->as_int();
  if (!int_arg(in, a.arg(3, "leeway"), leeway, 5)) return false;
  if (end_v && !end_v->is_string()) return in.fail(RenderErrc::kType, "truncate end must be a string");
  std::vector<char32_t> end = utf8_decode(end_v ? end_v->str() : std::string("..."));
  const auto end_len = static_cast<int64_t>(end.size());
  if (length < end_len)
    return in.fail(RenderErrc::kType, "expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) return in.fail(RenderErrc::kType, "expected leeway >= 0, got " + std::to_string(leeway));
  auto fits = [&](int64_t n) { return length > INT64_MAX - leeway || n <= length + leeway; };
  if (v.is_undefined()) { out = v; return true; }
  if (v.is_list() || v.is_dict()) {
    auto n = static_cast<int64_t>(v.is_list() ? v.items().size() : v.dict_ref().items.size());
    if (fits(n)) { out = v; return true; }
    return in.fail(RenderErrc::kType, std::string("cannot truncate a ") + type_name(v));
  }
  if (!v.is_string()) return in.fail(RenderErrc::kType, std::string("object of type '") + type_name(v) + "' has no len()");
  std::vector<char32_t> cps = utf8_decode(v.str());
  if (fits(static_cast<int64_t>(cps.size()))) { out = v; return true; }
  size_t keep = static_cast<size_t>(length - end_len);
  if (!(kill && kill->truthy())) {  // s[:keep].rsplit(" ", 1)[0]
    size_t k = std::min(keep, cps.size());
    while (k > 0 && cps[k - 1] != ' ') --k;
    if (k > 0) keep = k - 1;
  }
  std::string r = encode(cps, 0, keep);
  r += encode(end);
  out = Value(std::move(r));
  return true;
}

// Cheap rather than strong, from the length and the first, second and last characters: with
// 128 slots, 6 of the 84 filter and test names are one slot off their hash, none of the
// common ones (length, tojson, trim, defined, none, string).
constexpr uint32_t name_hash(std::string_view s) {
  if (s.empty()) return 0;
  auto c = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i])); };
  return static_cast<uint32_t>(s.size()) * 29 + c(0) * 4 + c(s.size() - 1) * 4 +
         (s.size() > 1 ? c(1) : 0);
}

// A name -> entry table built at compile time: open addressing with linear probing over Size
// slots (a power of two, at least twice the entries), each slot 0 (empty) or 1 + the index of
// an entry. Entry has a member `std::string_view name`.
template <typename Entry, size_t N, size_t Size>
class NameTable {
  static_assert((Size & (Size - 1)) == 0 && Size >= 2 * N && N < 256);

 public:
  constexpr explicit NameTable(const Entry (&entries)[N]) : entries_(entries) {
    for (size_t i = 0; i < N; ++i) {
      size_t h = name_hash(entries[i].name) & (Size - 1);
      while (slots_[h]) h = (h + 1) & (Size - 1);
      slots_[h] = static_cast<uint8_t>(i + 1);
    }
  }
  // The entry named `name`, or nullptr.
  const Entry* find(std::string_view name) const {
    for (size_t h = name_hash(name) & (Size - 1); slots_[h]; h = (h + 1) & (Size - 1)) {
      const Entry& e = entries_[slots_[h] - 1];
      if (e.name == name) return &e;
    }
    return nullptr;
  }

 private:
  const Entry* entries_;
  uint8_t slots_[Size] = {};
};

template <typename Entry, size_t N>
constexpr bool names_unique(const Entry (&entries)[N]) {
  for (size_t i = 0; i < N; ++i)
    for (size_t j = i + 1; j < N; ++j)
      if (entries[i].name == entries[j].name) return false;
  return true;
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", filter_abs},
    {"attr", filter_attr},
    {"batch", filter_batch},
    {"capitalize", filter_case<3>},
    {"center", filter_center},
    {"count", filter_length},
    {"d", filter_default},
    {"default", filter_default},
    {"dictsort", filter_dictsort},
    {"e", filter_escape},
    {"escape", filter_escape},
    {"first", filter_first_last<true>},
    {"float", filter_float},
    {"forceescape", filter_escape},
    {"format", filter_format},
    {"indent", filter_indent},
    {"int", filter_int},
    {"items", filter_items},
    {"join", filter_join},
    {"last", filter_first_last<false>},
    {"length", filter_length},
    {"list", filter_list},
    {"lower", filter_case<1>},
    {"map", filter_map},
    {"max", filter_order<false, false>},
    {"min", filter_order<false, true>},
    {"reject", filter_select<false, false>},
    {"rejectattr", filter_select<true, false>},
    {"replace", filter_replace},
    {"reverse", filter_reverse},
    {"round", filter_round},
    {"safe", filter_safe},
    {"select", filter_select<false, true>},
    {"selectattr", filter_select<true, true>},
    {"sort", filter_order<true, false>},
    {"string", filter_string},
    {"striptags", filter_striptags},
    {"sum", filter_sum},
    {"title", filter_case<2>},
    {"tojson", filter_tojson},
    {"trim", filter_trim},
    {"truncate", filter_truncate},
    {"unique", filter_unique},
    {"upper", filter_case<0>},
    {"wordcount", filter_wordcount},
};
static_assert(names_unique(kFilters));
constexpr NameTable<FilterEntry, std::size(kFilters), 128> kFilterTable(kFilters);

}  // namespace

bool is_implemented_filter(std::string_view name) { return kFilterTable.find(name) != nullptr; }

bool Interp::apply_filter(std::string_view name, const Value& in_v, CallArgs& a, Value& out) {
  if (const FilterEntry* f = kFilterTable.find(name)) return f->fn(*this, in_v, a, out);
  return fail(RenderErrc::kUnsupported, "filter '" + std::string(name) + "' is not supported");
}

// ---- tests
//
// A test is a function of one signature (TestFn) found by name in kTests; `arg` is its operand
// (positional or keyword), nullptr when none was given.

namespace {

using TestFn = bool (*)(Interp& in, std::string_view name, const Value& v, const Value* arg,
                        bool& out);

struct TestEntry {
  std::string_view name;
  TestFn fn;
  // nullptr: the test takes no operand; else it takes one, positional or by this keyword ("":
  // positional only), as jinja2's sameas(other), divisibleby(num) and in(seq).
  const char* kw;
};

bool no_operand(Interp& in, std::string_view name) {
  return in.fail(RenderErrc::kType, "test '" + std::string(name) + "' needs an argument");
}

template <bool (Value::*Is)() const>
bool test_is(Interp&, std::string_view, const Value& v, const Value*, bool& out) {
  out = (v.*Is)();
  return true;
}

bool test_defined(Interp&, std::string_view, const Value& v, const Value*, bool& out) {
  out = !v.is_undefined();
  return true;
}

bool test_iterable(Interp&, std::string_view, const Value& v, const Value*, bool& out) {
  out = v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  return true;
}

bool test_sequence(Interp&, std::string_view, const Value& v, const Value*, bool& out) {
  out = v.is_string() || v.is_list() || v.is_dict();
  return true;
}

template <bool B>
bool test_bool(Interp&, std::string_view, const Value& v, const Value*, bool& out) {
  out = v.is_bool() && v.as_bool() == B;
  return true;
}

bool test_escaped(Interp&, std::string_view, const Value&, const Value*, bool& out) {
  out = false;
  return true;
}

bool test_filter(Interp&, std::string_view, const Value& v, const Value*, bool& out) {
  out = v.is_string() && is_known_filter(v.str());
  return true;
}

bool test_test(Interp&, std::string_view, const Value& v, const Value*, bool& out) {
  out = v.is_string() && is_known_test(v.str());
  return true;
}

template <int Mode>  // map_case's mode: 0 upper 1 lower
bool test_case(Interp&, std::string_view, const Value& v, const Value*, bool& out) {
  if (!v.is_string()) {
    std::string s;
    v.append_str(s);
    out = s == map_case(s, Mode);
    return true;
  }
  out = v.str() == map_case(v.str(), Mode);
  return true;
}

bool need_integer(Interp& in, std::string_view name, const Value& v) {
  if (!v.is_int() && !v.is_bool())
    return in.fail(RenderErrc::kType, "test '" + std::string(name) + "' expects an integer");
  return true;
}

template <bool Odd>
bool test_odd_even(Interp& in, std::string_view name, const Value& v, const Value*, bool& out) {
  if (!need_integer(in, name, v)) return false;
  out = (v.as_int() % 2 != 0) == Odd;
  return true;
}

bool test_divisibleby(Interp& in, std::string_view name, const Value& v, const Value* arg,
                      bool& out) {
  if (!need_integer(in, name, v)) return false;
  if (!arg || !(arg->is_int() || arg->is_bool()))
    return in.fail(RenderErrc::kType, "divisibleby(num)");
  if (arg->as_int() == 0) return in.fail(RenderErrc::kType, "integer division or modulo by zero");
  out = arg->as_int() == -1 ? true : v.as_int() % arg->as_int() == 0;
  return true;
}

bool test_in(Interp& in, std::string_view name, const Value& v, const Value* arg, bool& out) {
  if (!arg) return no_operand(in, name);
  return in.contains(*arg, v, out);
}

bool test_sameas(Interp& in, std::string_view name, const Value& v, const Value* arg, bool& out) {
  using K = Value::Kind;
  if (!arg) return no_operand(in, name);
  if (v.kind() != arg->kind()) {
    out = false;
    return true;
  }
  if (v.kind() == K::kNone || v.kind() == K::kBool || v.kind() == K::kUndefined) {
    out = py_equal(v, *arg);
    return true;
  }
  out = v.identity() ? v.identity() == arg->identity() : py_equal(v, *arg);
  return true;
}

// eq, ne, lt, le, gt, ge and their aliases: Python's comparison `Op`.
template <const std::string_view& Op>
bool test_compare(Interp& in, std::string_view name, const Value& v, const Value* arg, bool& out) {
  if (!arg) return no_operand(in, name);
  return in.compare(Op, v, *arg, out);
}
constexpr std::string_view kEq = "==", kNe = "!=", kLt = "<", kLe = "<=", kGt = ">", kGe = ">=";

constexpr TestEntry kTests[] = {
    {"!=", test_compare<kNe>, ""},
    {"<", test_compare<kLt>, ""},
    {"<=", test_compare<kLe>, ""},
    {"==", test_compare<kEq>, ""},
    {">", test_compare<kGt>, ""},
    {">=", test_compare<kGe>, ""},
    {"boolean", test_is<&Value::is_bool>, nullptr},
    {"callable", test_is<&Value::is_callable>, nullptr},
    {"defined", test_defined, nullptr},
    {"divisibleby", test_divisibleby, "num"},
    {"eq", test_compare<kEq>, ""},
    {"equalto", test_compare<kEq>, ""},
    {"escaped", test_escaped, nullptr},
    {"even", test_odd_even<false>, nullptr},
    {"false", test_bool<false>, nullptr},
    {"filter", test_filter, nullptr},
    {"float", test_is<&Value::is_float>, nullptr},
    {"ge", test_compare<kGe>, ""},
    {"greaterthan", test_compare<kGt>, ""},
    {"gt", test_compare<kGt>, ""},
    {"in", test_in, "seq"},
    {"integer", test_is<&Value::is_int>, nullptr},
    {"iterable", test_iterable, nullptr},
    {"le", test_compare<kLe>, ""},
    {"lessthan", test_compare<kLt>, ""},
    {"lower", test_case<1>, nullptr},
    {"lt", test_compare<kLt>, ""},
    {"mapping", test_is<&Value::is_dict>, nullptr},
    {"ne", test_compare<kNe>, ""},
    {"none", test_is<&Value::is_none>, nullptr},
    {"number", test_is<&Value::is_number>, nullptr},
    {"odd", test_odd_even<true>, nullptr},
    {"sameas", test_sameas, "other"},
    {"sequence", test_sequence, nullptr},
    {"string", test_is<&Value::is_string>, nullptr},
    {"test", test_test, nullptr},
    {"true", test_bool<true>, nullptr},
    {"undefined", test_is<&Value::is_undefined>, nullptr},
    {"upper", test_case<0>, nullptr},
};
static_assert(names_unique(kTests));
constexpr NameTable<TestEntry, std::size(kTests), 128> kTestTable(kTests);

}  // namespace

bool Interp::apply_test(std::string_view name, const Value& v, CallArgs& a, bool& out) {
  // jinja2's test functions: most take only the value; the comparison ones take one operand
  // (sameas, divisibleby and in also by keyword: other, num, seq).
  const TestEntry* t = kTestTable.find(name);
  const size_t nargs = a.pos.size() + a.kw.size();
  if (t && !t->kw) {
    if (nargs)
      return fail(RenderErrc::kType, "test '" + std::string(name) + "' takes no arguments");
  } else {
    if (nargs > 1)
      return fail(RenderErrc::kType, "test '" + std::string(name) + "' takes one argument");
    const char* kw_name = t ? t->kw : "";
    if (!a.kw.empty() && a.kw[0].first != kw_name)
      return fail(RenderErrc::kType,
                  "test '" + std::string(name) + "' got an unexpected keyword argument");
  }
  const Value* arg = !a.pos.empty() ? &a.pos[0] : !a.kw.empty() ? &a.kw[0].second : nullptr;
  if (t) return t->fn(*this, name, v, arg, out);
  if (!arg) return no_operand(*this, name);
  return fail(RenderErrc::kUnsupported, "test '" + std::string(name) + "' is not supported");
}

}  // namespace ramjet::render::jinja
