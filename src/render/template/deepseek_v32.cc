#include "render/template/deepseek_v32.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <simdjson.h>

#include "common/utf8.h"

namespace ramjet::render::deepseek_v32 {

std::string_view to_string(RenderErrc code) {
  switch (code) {
    case RenderErrc::kBadJson: return "bad_json";
    case RenderErrc::kBadRequest: return "bad_request";
    case RenderErrc::kInvalid: return "invalid_conversation";
    case RenderErrc::kUnsupported: return "unsupported";
    case RenderErrc::kLimit: return "limit";
  }
  return "unknown";
}

namespace {

// ---------------------------------------------------------------------------------------------
// A JSON value read with Python json.loads semantics: integers keep their digits (Python ints are
// unbounded), floats are doubles, objects are dicts (a repeated key keeps its first position and
// takes the last value).

struct JVal {
  enum class Kind { kNull, kBool, kInt, kFloat, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool b = false;
  double d = 0;
  std::string s;  // string value, or an int's canonical digits
  std::vector<JVal> items;  // array elements / object values
  std::vector<std::string> keys;  // object keys (parallel to items)

  const JVal* get(std::string_view key) const {
    if (kind != Kind::kObject) return nullptr;
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return &items[i];
    return nullptr;
  }
};

RenderError err(RenderErrc code, std::string message) { return RenderError{code, std::move(message)}; }

class Parser {
 public:
  Parser(std::string_view text, size_t max_depth) : t_(text), max_depth_(max_depth) {}

  std::optional<RenderError> parse(JVal& out) {
    skip_ws();
    if (auto e = value(out, 0)) return e;
    skip_ws();
    if (p_ != t_.size()) return err(RenderErrc::kBadJson, "trailing characters after the JSON value");
    return std::nullopt;
  }

 private:
  void skip_ws() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\t' || t_[p_] == '\n' || t_[p_] == '\r')) ++p_;
  }
  bool lit(std::string_view w) {
    if (t_.substr(p_, w.size()) != w) return false;
    p_ += w.size();
    return true;
  }

  std::optional<RenderError> value(JVal& out, size_t depth) {
    if (depth > max_depth_) return err(RenderErrc::kLimit, "JSON nesting deeper than the limit");
    if (p_ >= t_.size()) return err(RenderErrc::kBadJson, "unexpected end of JSON");
    const char c = t_[p_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      out.kind = JVal::Kind::kString;
      return string(out.s);
    }
    if (lit("null")) { out.kind = JVal::Kind::kNull; return std::nullopt; }
    if (lit("true")) { out.kind = JVal::Kind::kBool; out.b = true; return std::nullopt; }
    if (lit("false")) { out.kind = JVal::Kind::kBool; out.b = false; return std::nullopt; }
    if (lit("NaN") || lit("Infinity") || lit("-Infinity"))
      return err(RenderErrc::kUnsupported, "NaN/Infinity literals are not rendered locally");
    if (c == '-' || (c >= '0' && c <= '9')) return number(out);
    return err(RenderErrc::kBadJson, "unexpected character in JSON");
  }

  std::optional<RenderError> object(JVal& out, size_t depth) {
    out.kind = JVal::Kind::kObject;
    ++p_;
    skip_ws();
    if (p_ < t_.size() && t_[p_] == '}') { ++p_; return std::nullopt; }
    std::unordered_map<std::string, size_t> index;
    for (;;) {
      skip_ws();
      if (p_ >= t_.size() || t_[p_] != '"') return err(RenderErrc::kBadJson, "expected an object key");
      std::string key;
      if (auto e = string(key)) return e;
      skip_ws();
      if (p_ >= t_.size() || t_[p_] != ':') return err(RenderErrc::kBadJson, "expected ':'");
      ++p_;
      skip_ws();
      JVal v;
      if (auto e = value(v, depth + 1)) return e;
      auto [it, inserted] = index.try_emplace(key, out.keys.size());
      if (inserted) {
        out.keys.push_back(std::move(key));
        out.items.push_back(std::move(v));
      } else {
        out.items[it->second] = std::move(v);  // Python dict: first position, last value
      }
      skip_ws();
      if (p_ < t_.size() && t_[p_] == ',') { ++p_; continue; }
      if (p_ < t_.size() && t_[p_] == '}') { ++p_; return std::nullopt; }
      return err(RenderErrc::kBadJson, "expected ',' or '}'");
    }
  }

  std::optional<RenderError> array(JVal& out, size_t depth) {
    out.kind = JVal::Kind::kArray;
    ++p_;
    skip_ws();
    if (p_ < t_.size() && t_[p_] == ']') { ++p_; return std::nullopt; }
    for (;;) {
      skip_ws();
      out.items.emplace_back();
      if (auto e = value(out.items.back(), depth + 1)) return e;
      skip_ws();
      if (p_ < t_.size() && t_[p_] == ',') { ++p_; continue; }
      if (p_ < t_.size() && t_[p_] == ']') { ++p_; return std::nullopt; }
      return err(RenderErrc::kBadJson, "expected ',' or ']'");
    }
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  bool u4(uint32_t& cp) {
    if (p_ + 4 > t_.size()) return false;
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = hex(t_[p_ + i]);
      if (h < 0) return false;
      cp = cp * 16 + static_cast<uint32_t>(h);
    }
    p_ += 4;
    return true;
  }

  std::optional<RenderError> string(std::string& out) {
    ++p_;  // opening quote
    for (;;) {
      const size_t start = p_;
      while (p_ < t_.size() && t_[p_] != '"' && t_[p_] != '\\' &&
             static_cast<unsigned char>(t_[p_]) >= 0x20)
        ++p_;
      out.append(t_.substr(start, p_ - start));
      if (p_ >= t_.size()) return err(RenderErrc::kBadJson, "unterminated string");
      const char c = t_[p_];
      if (c == '"') { ++p_; return std::nullopt; }
      if (c != '\\') return err(RenderErrc::kBadJson, "control character in a string");
      if (++p_ >= t_.size()) return err(RenderErrc::kBadJson, "unterminated escape");
      const char e = t_[p_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          if (!u4(cp)) return err(RenderErrc::kBadJson, "bad \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo = 0;
            if (t_.substr(p_, 2) != "\\u") return err(RenderErrc::kUnsupported, "lone surrogate");
            p_ += 2;
            if (!u4(lo)) return err(RenderErrc::kBadJson, "bad \\u escape");
            if (lo < 0xDC00 || lo > 0xDFFF) return err(RenderErrc::kUnsupported, "lone surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return err(RenderErrc::kUnsupported, "lone surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: return err(RenderErrc::kBadJson, "bad escape");
      }
    }
  }

  std::optional<RenderError> number(JVal& out) {
    const size_t start = p_;
    bool neg = false;
    if (t_[p_] == '-') { neg = true; ++p_; }
    if (p_ >= t_.size()) return err(RenderErrc::kBadJson, "bad number");
    if (t_[p_] == '0') {
      ++p_;
    } else if (t_[p_] >= '1' && t_[p_] <= '9') {
      while (p_ < t_.size() && t_[p_] >= '0' && t_[p_] <= '9') ++p_;
    } else {
      return err(RenderErrc::kBadJson, "bad number");
    }
    const size_t int_end = p_;
    bool is_float = false;
    if (p_ < t_.size() && t_[p_] == '.') {
      is_float = true;
      ++p_;
      const size_t f = p_;
      while (p_ < t_.size() && t_[p_] >= '0' && t_[p_] <= '9') ++p_;
      if (p_ == f) return err(RenderErrc::kBadJson, "bad number");
    }
    if (p_ < t_.size() && (t_[p_] == 'e' || t_[p_] == 'E')) {
      is_float = true;
      ++p_;
      if (p_ < t_.size() && (t_[p_] == '+' || t_[p_] == '-')) ++p_;
      const size_t f = p_;
      while (p_ < t_.size() && t_[p_] >= '0' && t_[p_] <= '9') ++p_;
      if (p_ == f) return err(RenderErrc::kBadJson, "bad number");
    }
    if (!is_float) {
      std::string_view digits = t_.substr(neg ? start + 1 : start, int_end - (neg ? start + 1 : start));
      // Python 3.11+ refuses int strings longer than 4300 digits.
      if (digits.size() > 4300) return err(RenderErrc::kUnsupported, "integer too long");
      out.kind = JVal::Kind::kInt;
      out.s = (neg && digits != "0") ? "-" + std::string(digits) : std::string(digits);
      return std::nullopt;
    }
    const std::string_view lex = t_.substr(start, p_ - start);
    double d = 0;
    auto [ptr, ec] = std::from_chars(lex.data(), lex.data() + lex.size(), d);
    if (ec != std::errc() || ptr != lex.data() + lex.size())
      return err(RenderErrc::kUnsupported, "float out of double range");
    out.kind = JVal::Kind::kFloat;
    out.d = d;
    return std::nullopt;
  }

  std::string_view t_;
  size_t p_ = 0;
  size_t max_depth_;
};

RenderResult<JVal> parse_json(std::string_view text, const Limits& limits) {
  if (text.size() > limits.max_request_bytes) return err(RenderErrc::kLimit, "JSON larger than the limit");
  if (!simdjson::validate_utf8(text.data(), text.size())) return err(RenderErrc::kBadJson, "not UTF-8");
  JVal v;
  Parser p(text, limits.max_depth);
  if (auto e = p.parse(v)) return *e;
  return v;
}

// ---------------------------------------------------------------------------------------------
// Python json.dumps(ensure_ascii=False) with the default ", " / ": " separators.

void dump_string(std::string& o, std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  o += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      case '\b': o += "\\b"; break;
      case '\f': o += "\\f"; break;
      default:
        if (c < 0x20) {
          o += "\\u00";
          o += kHex[c >> 4];
          o += kHex[c & 15];
        } else {
          o += ch;
        }
    }
  }
  o += '"';
}

// Python float.__repr__: the shortest round-trip digits, fixed notation when the decimal
// exponent is in (-4, 16], else d.ddde+XX.
void dump_float(std::string& o, double d) {
  if (std::isinf(d)) { o += d < 0 ? "-Infinity" : "Infinity"; return; }
  if (std::isnan(d)) { o += "NaN"; return; }
  if (std::signbit(d)) o += '-';
  d = std::fabs(d);
  if (d == 0) { o += "0.0"; return; }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));
  const size_t epos = sci.find('e');
  std::string digits;
  for (const char c : sci.substr(0, epos))
    if (c != '.') digits += c;
  int exp10 = 0;
  std::from_chars(sci.data() + epos + 1 + (sci[epos + 1] == '+' ? 1 : 0), sci.data() + sci.size(), exp10);
  const int decpt = exp10 + 1;
  const int nd = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      o += "0.";
      o.append(static_cast<size_t>(-decpt), '0');
      o += digits;
    } else if (decpt >= nd) {
      o += digits;
      o.append(static_cast<size_t>(decpt - nd), '0');
      o += ".0";
    } else {
      o += digits.substr(0, static_cast<size_t>(decpt));
      o += '.';
      o += digits.substr(static_cast<size_t>(decpt));
    }
    return;
  }
  o += digits[0];
  if (nd > 1) {
    o += '.';
    o += digits.substr(1);
  }
  o += 'e';
  const int e = decpt - 1;
  o += e < 0 ? '-' : '+';
  const int ae = e < 0 ? -e : e;
  if (ae < 10) o += '0';
  o += std::to_string(ae);
}

void dump(std::string& o, const JVal& v) {
  switch (v.kind) {
    case JVal::Kind::kNull: o += "null"; return;
    case JVal::Kind::kBool: o += v.b ? "true" : "false"; return;
    case JVal::Kind::kInt: o += v.s; return;
    case JVal::Kind::kFloat: dump_float(o, v.d); return;
    case JVal::Kind::kString: dump_string(o, v.s); return;
    case JVal::Kind::kArray:
      o += '[';
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) o += ", ";
        dump(o, v.items[i]);
      }
      o += ']';
      return;
    case JVal::Kind::kObject:
      o += '{';
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) o += ", ";
        dump_string(o, v.keys[i]);
        o += ": ";
        dump(o, v.items[i]);
      }
      o += '}';
      return;
  }
}

bool truthy(const JVal* v) {
  if (!v) return false;
  switch (v->kind) {
    case JVal::Kind::kNull: return false;
    case JVal::Kind::kBool: return v->b;
    case JVal::Kind::kInt: return v->s != "0";
    case JVal::Kind::kFloat: return v->d != 0;
    case JVal::Kind::kString: return !v->s.empty();
    case JVal::Kind::kArray:
    case JVal::Kind::kObject: return !v->items.empty();
  }
  return false;
}

bool is_null(const JVal* v) { return !v || v->kind == JVal::Kind::kNull; }

// ---------------------------------------------------------------------------------------------
// The encoder.

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kUserStart = "<｜User｜>";
constexpr std::string_view kAssistantStart = "<｜Assistant｜>";
constexpr std::string_view kDsml = "｜DSML｜";

struct ToolCall {
  std::string name;
  JVal args;  // an object
};

struct Msg {
  std::string role;
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  std::string tools_block;  // the inserted system message's rendered tools
};

std::string tools_block(const std::vector<std::string>& schemas) {
  const std::string d(kDsml);
  std::string o;
  o += "## Tools\n";
  o += "You have access to a set of tools you can use to answer the user's question.\n";
  o += "You can invoke functions by writing a \"<" + d +
       "function_calls>\" block like the following as part of your reply to the user:\n";
  o += "<" + d + "function_calls>\n";
  o += "<" + d + "invoke name=\"$FUNCTION_NAME\">\n";
  o += "<" + d + "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + d +
       "parameter>\n";
  o += "...\n";
  o += "</" + d + "invoke>\n";
  o += "<" + d + "invoke name=\"$FUNCTION_NAME2\">\n";
  o += "...\n";
  o += "</" + d + "invoke>\n";
  o += "</" + d + "function_calls>\n";
  o += "String and scalar parameters should be specified as is without any escaping or quotes, "
       "while lists and objects should use JSON format. The \"string\" attribute should be set to "
       "\"true\" for string type parameters and \"false\" for other types (numbers, booleans, "
       "arrays, objects).\n";
  o += "If the thinking_mode is enabled, then after function results you should strongly "
       "consider outputting a thinking block. Here is an example:\n";
  o += "<" + d + "function_calls>\n";
  o += "...\n";
  o += "</" + d + "function_calls>\n";
  o += "<function_results>\n";
  o += "...\n";
  o += "</function_results>\n";
  o += std::string(kThinkStart) + "...thinking about results" + std::string(kThinkEnd) + "\n";
  o += "Here are the functions available in JSONSchema format:\n";
  o += "<functions>\n";
  for (size_t i = 0; i < schemas.size(); ++i) {
    if (i) o += '\n';
    o += schemas[i];
  }
  o += "\n</functions>\n";
  return o;
}

// The pydantic model_dump() of one request tool's `function` (FunctionDefinition: name,
// description, parameters; absent ones None), as json.dumps writes it.
RenderResult<std::string> tool_schema(const JVal& tool) {
  if (tool.kind != JVal::Kind::kObject) return err(RenderErrc::kBadRequest, "a tool is not an object");
  const JVal* type = tool.get("type");
  if (type && !(type->kind == JVal::Kind::kString && type->s == "function"))
    return err(RenderErrc::kBadRequest, "tool type is not \"function\"");
  const JVal* fn = tool.get("function");
  if (!fn || fn->kind != JVal::Kind::kObject) return err(RenderErrc::kBadRequest, "tool without a function object");
  const JVal* name = fn->get("name");
  if (!name || name->kind != JVal::Kind::kString) return err(RenderErrc::kBadRequest, "tool function without a name");
  const JVal* desc = fn->get("description");
  if (!is_null(desc) && desc->kind != JVal::Kind::kString)
    return err(RenderErrc::kBadRequest, "tool description is not a string");
  const JVal* params = fn->get("parameters");
  if (!is_null(params) && params->kind != JVal::Kind::kObject)
    return err(RenderErrc::kBadRequest, "tool parameters are not an object");
  std::string o = "{\"name\": ";
  dump_string(o, name->s);
  o += ", \"description\": ";
  if (is_null(desc)) o += "null"; else dump_string(o, desc->s);
  o += ", \"parameters\": ";
  if (is_null(params)) o += "null"; else dump(o, *params);
  // Other keys (strict, defer_loading, ...) are declared fields in some vLLM versions (dumped as
  // null when absent, or dropped) and pydantic extras in others: not rendered locally.
  for (const std::string& k : fn->keys)
    if (k != "name" && k != "description" && k != "parameters")
      return err(RenderErrc::kUnsupported, "tool function fields beyond name/description/parameters");
  o += '}';
  return o;
}

// Text content of a message after vLLM's parsing: null/missing -> "", a string as is.
RenderResult<std::string> text_content(const JVal* c) {
  if (is_null(c)) return std::string();
  if (c->kind == JVal::Kind::kString) return c->s;
  if (c->kind == JVal::Kind::kArray)
    return err(RenderErrc::kUnsupported, "content-part arrays are not rendered locally");
  return err(RenderErrc::kBadRequest, "message content is not a string");
}

RenderResult<Msg> parse_message(const JVal& m, const Limits& limits) {
  if (m.kind != JVal::Kind::kObject) return err(RenderErrc::kBadRequest, "a message is not an object");
  Msg out;
  const JVal* role = m.get("role");
  if (!role || role->kind != JVal::Kind::kString) return err(RenderErrc::kBadRequest, "message without a role");
  out.role = role->s;
  if (m.get("tools") || m.get("response_format"))
    return err(RenderErrc::kUnsupported, "per-message tools/response_format are not rendered locally");
  auto content = text_content(m.get("content"));
  if (!content) return content.error();
  out.content = std::move(*content);
  for (const char* key : {"reasoning", "reasoning_content"}) {
    const JVal* r = m.get(key);
    if (is_null(r)) continue;
    if (r->kind != JVal::Kind::kString) return err(RenderErrc::kBadRequest, "reasoning is not a string");
    if (out.reasoning.empty()) out.reasoning = r->s;  // msg.get("reasoning") or msg.get("reasoning_content")
  }
  if (out.role != "assistant") return out;
  const JVal* calls = m.get("tool_calls");
  if (is_null(calls)) return out;
  if (calls->kind != JVal::Kind::kArray) return err(RenderErrc::kBadRequest, "tool_calls is not an array");
  for (const JVal& call : calls->items) {
    const JVal* fn = call.get("function");
    if (!fn || fn->kind != JVal::Kind::kObject) return err(RenderErrc::kBadRequest, "tool call without a function");
    const JVal* name = fn->get("name");
    if (!name || name->kind != JVal::Kind::kString) return err(RenderErrc::kBadRequest, "tool call without a name");
    ToolCall tc;
    tc.name = name->s;
    const JVal* args = fn->get("arguments");
    if (is_null(args)) return err(RenderErrc::kBadRequest, "tool call without arguments");
    if (args->kind == JVal::Kind::kString) {
      if (args->s.empty()) {
        tc.args.kind = JVal::Kind::kObject;  // vLLM: "" -> {}
      } else {
        auto parsed = parse_json(args->s, limits);
        if (!parsed) {
          RenderError e = parsed.error();
          if (e.code == RenderErrc::kBadJson) e.code = RenderErrc::kBadRequest;
          e.message = "tool call arguments: " + e.message;
          return e;
        }
        tc.args = std::move(*parsed);
      }
    } else {
      tc.args = *args;
    }
    if (tc.args.kind != JVal::Kind::kObject)
      return err(RenderErrc::kInvalid, "tool call arguments are not a JSON object");
    out.tool_calls.push_back(std::move(tc));
  }
  return out;
}

std::string render_tool_calls(const std::vector<ToolCall>& calls) {
  const std::string d(kDsml);
  std::string o = "\n\n<" + d + "function_calls>\n";
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i) o += '\n';
    o += "<" + d + "invoke name=\"" + calls[i].name + "\">\n";
    const JVal& a = calls[i].args;
    for (size_t k = 0; k < a.keys.size(); ++k) {
      if (k) o += '\n';
      const JVal& v = a.items[k];
      const bool is_str = v.kind == JVal::Kind::kString;
      o += "<" + d + "parameter name=\"" + a.keys[k] + "\" string=\"" + (is_str ? "true" : "false") + "\">";
      if (is_str) o += v.s; else dump(o, v);
      o += "</" + d + "parameter>";
    }
    o += "\n</" + d + "invoke>";
  }
  o += "\n</" + d + "function_calls>";
  return o;
}

int find_last_user_index(const std::vector<Msg>& msgs) {
  for (int i = static_cast<int>(msgs.size()) - 1; i >= 0; --i)
    if (msgs[static_cast<size_t>(i)].role == "user" || msgs[static_cast<size_t>(i)].role == "developer") return i;
  return -1;
}

std::optional<RenderError> render_message(size_t index, const std::vector<Msg>& msgs, bool thinking,
                                          int last_user, std::string& prompt) {
  const Msg& m = msgs[index];
  const int idx = static_cast<int>(index);
  auto user_turn_end = [&] { prompt += (idx == last_user && thinking) ? kThinkStart : kThinkEnd; };
  if (m.role == "system") {
    prompt += m.content;
    if (!m.tools_block.empty()) {
      prompt += "\n\n";
      prompt += m.tools_block;
    }
  } else if (m.role == "developer") {
    if (m.content.empty()) return err(RenderErrc::kInvalid, "developer message without content");
    prompt += kUserStart;
    prompt += "\n\n# The user's message is: ";
    prompt += m.content;
    prompt += kAssistantStart;
    user_turn_end();
  } else if (m.role == "user") {
    prompt += kUserStart;
    prompt += m.content;
    prompt += kAssistantStart;
    user_turn_end();
  } else if (m.role == "tool") {
    int prev = idx - 1;
    // Python: messages[-1] is the last message.
    auto at = [&](int i) -> const Msg& { return msgs[i >= 0 ? static_cast<size_t>(i) : msgs.size() - 1]; };
    while (prev >= 0 && at(prev).role == "tool") --prev;
    const Msg& am = at(prev);
    if (!(idx == 0 || (prev >= 0 && am.role == "assistant")))
      return err(RenderErrc::kInvalid, "tool message not preceded by an assistant message");
    const size_t order = static_cast<size_t>(idx - prev);
    if (am.role != "assistant" || am.tool_calls.size() < order)
      return err(RenderErrc::kInvalid, "tool message without a matching tool call");
    if (order == 1) prompt += "\n\n<function_results>";
    prompt += "\n<result>";
    prompt += m.content;
    prompt += "</result>";
    if (order == am.tool_calls.size()) {
      prompt += "\n</function_results>\n\n";
      prompt += (idx >= last_user && thinking) ? kThinkStart : kThinkEnd;
    }
  } else if (m.role == "assistant") {
    if (thinking && idx > last_user) {
      if (m.reasoning.empty() && m.tool_calls.empty())
        return err(RenderErrc::kInvalid,
                   "thinking mode: assistant message after the last user message without reasoning or tool calls");
      prompt += m.reasoning;
      prompt += kThinkEnd;
    }
    prompt += m.content;
    if (!m.tool_calls.empty()) prompt += render_tool_calls(m.tool_calls);
    prompt += kEos;
  } else {
    return err(RenderErrc::kInvalid, "unknown message role");
  }
  return std::nullopt;
}

}  // namespace

RenderResult<std::string> python_json_dumps(std::string_view json, const Limits& limits) {
  auto v = parse_json(json, limits);
  if (!v) return v.error();
  std::string o;
  dump(o, *v);
  return o;
}

RenderResult<std::string> encode(std::string_view request_json, const Options& options) {
  const Limits& limits = options.limits;
  auto parsed = parse_json(request_json, limits);
  if (!parsed) return parsed.error();
  const JVal& req = *parsed;
  if (req.kind != JVal::Kind::kObject) return err(RenderErrc::kBadRequest, "the request is not an object");
  const JVal* messages = req.get("messages");
  if (!messages || messages->kind != JVal::Kind::kArray)
    return err(RenderErrc::kBadRequest, "the request has no messages array");
  if (messages->items.size() > limits.max_messages) return err(RenderErrc::kLimit, "too many messages");

  bool thinking = false;
  if (const JVal* kw = req.get("chat_template_kwargs"); !is_null(kw)) {
    if (kw->kind != JVal::Kind::kObject) return err(RenderErrc::kBadRequest, "chat_template_kwargs is not an object");
    thinking = truthy(kw->get("thinking"));
  }

  std::vector<Msg> msgs;
  msgs.reserve(messages->items.size() + 1);
  bool has_tools = false;
  if (const JVal* tools = req.get("tools"); !is_null(tools)) {
    if (tools->kind != JVal::Kind::kArray) return err(RenderErrc::kBadRequest, "tools is not an array");
    if (!tools->items.empty()) {
      std::vector<std::string> schemas;
      for (const JVal& t : tools->items) {
        auto s = tool_schema(t);
        if (!s) return s.error();
        schemas.push_back(std::move(*s));
      }
      Msg sys;
      sys.role = "system";
      sys.tools_block = tools_block(schemas);
      msgs.push_back(std::move(sys));
      has_tools = true;
    }
  }
  for (const JVal& m : messages->items) {
    auto msg = parse_message(m, limits);
    if (!msg) return msg.error();
    msgs.push_back(std::move(*msg));
  }

  const int last_user = find_last_user_index(msgs);
  if (thinking && !has_tools) {
    // drop_thinking_messages() drops non-user/system/tool/assistant messages before the last user
    // message, after which encode_messages() indexes past the shortened list and fails.
    for (int i = 0; i < last_user; ++i) {
      const std::string& r = msgs[static_cast<size_t>(i)].role;
      if (r != "user" && r != "system" && r != "tool" && r != "assistant")
        return err(RenderErrc::kInvalid, "thinking mode drops a message before the last user message");
    }
  }

  std::string prompt;
  if (options.add_default_bos_token) prompt += kBos;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (auto e = render_message(i, msgs, thinking, last_user, prompt)) return *e;
    if (prompt.size() > limits.max_output_bytes) return err(RenderErrc::kLimit, "prompt larger than the limit");
  }
  return prompt;
}

}  // namespace ramjet::render::deepseek_v32
