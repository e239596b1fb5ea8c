// sim/server/validation (see validation.h).
#include "sim/server/validation.h"

#include <boost/json.hpp>

#include <cctype>
#include <cmath>
#include <optional>
#include <vector>

#include "sim/server/python_json.h"

namespace ramjet::sim {

namespace json = boost::json;

namespace {

// --- json.loads -------------------------------------------------------------------------------
// CPython's C scanner (Modules/_json.c, Python < 3.13: no trailing-comma messages) over the
// decoded text: the first error's message and position. Positions are byte offsets here and
// become character offsets at the end.
class PyScanner {
 public:
  explicit PyScanner(std::string_view s) : s_(s) {}

  // decode(): whitespace, one value, whitespace, end.
  bool parse() {
    size_t i = skip_ws(0);
    if (!value(i, 0)) return false;
    i = skip_ws(i);
    if (i != s_.size()) return fail("Extra data", i);
    return true;
  }
  const char* message() const { return msg_; }
  size_t byte_pos() const { return pos_; }

 private:
  static bool ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
  size_t skip_ws(size_t i) const {
    while (i < s_.size() && ws(s_[i])) ++i;
    return i;
  }
  bool fail(const char* msg, size_t pos) {
    msg_ = msg;
    pos_ = pos;
    return false;
  }
  bool digit(size_t i) const { return i < s_.size() && s_[i] >= '0' && s_[i] <= '9'; }
  bool literal(size_t i, std::string_view word) const { return s_.substr(i, word.size()) == word; }

  // scan_once: a value at i (no whitespace skipped); a miss is StopIteration(i), which
  // raw_decode reports as "Expecting value" at i however deep it was raised.
  bool value(size_t& i, int depth) {
    if (depth > 5000) return fail("Expecting value", i);  // (Python: RecursionError; never mind)
    if (i >= s_.size()) return fail("Expecting value", i);
    const char c = s_[i];
    if (c == '"') return string(i);
    if (c == '{') return object(i, depth + 1);
    if (c == '[') return array(i, depth + 1);
    for (std::string_view w : {"null", "true", "false", "NaN", "Infinity", "-Infinity"}) {
      if (literal(i, w)) {
        i += w.size();
        return true;
      }
    }
    return number(i);
  }

  bool number(size_t& i) {
    const size_t start = i;
    size_t j = i;
    if (j < s_.size() && s_[j] == '-') ++j;
    if (j < s_.size() && s_[j] >= '1' && s_[j] <= '9') {
      while (digit(j)) ++j;
    } else if (j < s_.size() && s_[j] == '0') {
      ++j;
    } else {
      return fail("Expecting value", start);
    }
    if (j + 1 < s_.size() && s_[j] == '.' && digit(j + 1)) {
      j += 2;
      while (digit(j)) ++j;
    }
    if (j + 1 < s_.size() && (s_[j] == 'e' || s_[j] == 'E')) {
      const size_t e = j++;
      if (j + 1 < s_.size() && (s_[j] == '-' || s_[j] == '+')) ++j;
      while (digit(j)) ++j;
      if (!(s_[j - 1] >= '0' && s_[j - 1] <= '9')) j = e;  // no exponent digits: backtrack
    }
    i = j;
    return true;
  }

  // scanstring: i at the opening quote.
  bool string(size_t& i) {
    const size_t begin = i;
    size_t next = i + 1;
    for (;;) {
      char c = 0;
      for (; next < s_.size(); ++next) {
        c = s_[next];
        if (c == '"' || c == '\\') break;
        if (static_cast<unsigned char>(c) <= 0x1f) return fail("Invalid control character at", next);
      }
      if (next >= s_.size()) return fail("Unterminated string starting at", begin);
      ++next;
      if (c == '"') {
        i = next;
        return true;
      }
      if (next == s_.size()) return fail("Unterminated string starting at", begin);
      c = s_[next];
      if (c != 'u') {
        if (std::string_view("\"\\/bfnrt").find(c) == std::string_view::npos) return fail("Invalid \\escape", next - 1);
        ++next;
        continue;
      }
      // \uXXXX: four hex digits and something after them, else an error at the 'u' (a
      // following low surrogate's \uXXXX is checked alike, as an escape of its own)
      if (next + 5 >= s_.size()) return fail("Invalid \\uXXXX escape", next);
      for (size_t k = 1; k <= 4; ++k) {
        if (!std::isxdigit(static_cast<unsigned char>(s_[next + k]))) return fail("Invalid \\uXXXX escape", next);
      }
      next += 5;
    }
  }

  bool object(size_t& i, int depth) {
    size_t idx = skip_ws(i + 1);
    if (idx >= s_.size() || s_[idx] != '}') {
      for (;;) {
        if (idx >= s_.size() || s_[idx] != '"') return fail("Expecting property name enclosed in double quotes", idx);
        if (!string(idx)) return false;
        idx = skip_ws(idx);
        if (idx >= s_.size() || s_[idx] != ':') return fail("Expecting ':' delimiter", idx);
        idx = skip_ws(idx + 1);
        if (!value(idx, depth)) return false;
        idx = skip_ws(idx);
        if (idx < s_.size() && s_[idx] == '}') break;
        if (idx >= s_.size() || s_[idx] != ',') return fail("Expecting ',' delimiter", idx);
        idx = skip_ws(idx + 1);
      }
    }
    i = idx + 1;
    return true;
  }

  bool array(size_t& i, int depth) {
    size_t idx = skip_ws(i + 1);
    if (idx >= s_.size() || s_[idx] != ']') {
      for (;;) {
        if (!value(idx, depth)) return false;
        idx = skip_ws(idx);
        if (idx < s_.size() && s_[idx] == ']') break;
        if (idx >= s_.size() || s_[idx] != ',') return fail("Expecting ',' delimiter", idx);
        idx = skip_ws(idx + 1);
      }
    }
    i = idx + 1;
    return true;
  }

  std::string_view s_;
  const char* msg_ = "";
  size_t pos_ = 0;
};

// bytes.decode("utf-8", "surrogatepass"): well-formed UTF-8, encoded surrogates allowed.
bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    const uint32_t min = n == 2 ? 0x80 : n == 3 ? 0x800 : n == 4 ? 0x10000 : 0;
    if (cp < min || cp > 0x10ffff) return false;
    i += n;
  }
  return true;
}

size_t chars_before(std::string_view s, size_t byte_pos) {
  size_t n = 0;
  for (size_t i = 0; i < byte_pos && i < s.size(); ++i) n += (static_cast<unsigned char>(s[i]) & 0xc0) != 0x80;
  return n;
}

// --- pydantic errors ----------------------------------------------------------------------------
struct FieldError {
  std::string type;
  std::string loc;
  std::string msg;
  std::string input;
  std::string ctx_repr{};  // Python repr of the ctx dict, "" for none
};

// _summarize_error_input, as the string the error dict holds.
std::string summarize(const json::value* v) {
  if (v == nullptr || v->is_null()) return "None";
  if (v->is_array()) return "<list of " + std::to_string(v->as_array().size()) + " items>";
  if (v->is_object()) return "<dict of " + std::to_string(v->as_object().size()) + " items>";
  std::string text = python_str(*v);
  if (text.size() > 200) text = text.substr(0, 200) + "...[truncated]";  // (bytes, not characters)
  return text;
}

// Python's repr of a str.
std::string repr(std::string_view s) {
  const std::string in_list = python_str(json::value(json::array{json::string(s)}));
  return in_list.substr(1, in_list.size() - 2);  // "['…']" without the brackets
}

std::string format_error(const FieldError& e) {
  std::string text = "{'type': " + repr(e.type) + ", 'loc': " + repr(e.loc) + ", 'msg': " + repr(e.msg) +
                     ", 'input': " + repr(e.input);
  if (!e.ctx_repr.empty()) text += ", 'ctx': " + e.ctx_repr;
  text += "}";
  if (text.size() > 1000) text = text.substr(0, 1000) + "...[truncated]";
  return text;
}

std::string rejection_body(const std::vector<FieldError>& errors) {
  std::string message = std::to_string(errors.size()) + (errors.size() == 1 ? " validation error:\n" : " validation errors:\n");
  for (size_t i = 0; i < errors.size() && i < 10; ++i) message += "  " + format_error(errors[i]) + "\n";
  if (errors.size() > 10) message += "  ...and " + std::to_string(errors.size() - 10) + " more errors\n";
  while (!message.empty() && message.back() == '\n') message.pop_back();
  json::object err{{"message", message}, {"type", "Bad Request"}, {"param", errors.front().loc}, {"code", 400}};
  return json::serialize(json::object{{"error", std::move(err)}});
}

enum class Kind { kStr, kInt, kBool, kList, kDict, kAny, kSalt /* str, 1..1024 characters */ };

struct Field {
  std::string_view name;
  Kind kind;
  bool required;
};

// The top-level fields the simulator reads, in each request model's declaration order.
std::vector<Field> fields_of(BodyApi api) {
  switch (api) {
    case BodyApi::kChat:
      return {{"messages", Kind::kList, true}, {"model", Kind::kStr, false}, {"max_tokens", Kind::kInt, false},
              {"max_completion_tokens", Kind::kInt, false}, {"stream", Kind::kBool, false},
              {"kv_transfer_params", Kind::kDict, false}};
    case BodyApi::kCompletions:
      return {{"model", Kind::kStr, false}, {"max_tokens", Kind::kInt, false}, {"stream", Kind::kBool, false},
              {"kv_transfer_params", Kind::kDict, false}};
    case BodyApi::kResponses:
      return {{"background", Kind::kBool, false}, {"input", Kind::kAny, true},
              {"max_output_tokens", Kind::kInt, false}, {"model", Kind::kStr, false}, {"stream", Kind::kBool, false}};
    case BodyApi::kMessages:
      return {{"model", Kind::kStr, true}, {"messages", Kind::kList, true}, {"max_tokens", Kind::kInt, true},
              {"stream", Kind::kBool, false}, {"cache_salt", Kind::kSalt, false}};
  }
  return {};
}

std::string lower_trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Pydantic's lax validation of one field: the coerced value, or the error.
std::optional<FieldError> coerce(Kind kind, const std::string& loc, json::value& v) {
  auto error = [&](std::string type, std::string msg) {
    return FieldError{std::move(type), loc, std::move(msg), summarize(&v)};
  };
  switch (kind) {
    case Kind::kAny: return std::nullopt;
    case Kind::kStr:
      if (!v.is_string()) return error("string_type", "Input should be a valid string");
      return std::nullopt;
    case Kind::kList:
      if (!v.is_array()) return error("list_type", "Input should be a valid list");
      return std::nullopt;
    case Kind::kDict:
      if (!v.is_object()) return error("dict_type", "Input should be a valid dictionary");
      return std::nullopt;
    case Kind::kSalt: {
      if (!v.is_string()) return error("string_type", "Input should be a valid string");
      const size_t n = chars_before(v.as_string(), v.as_string().size());
      if (n < 1) {
        auto e = error("string_too_short", "String should have at least 1 character");
        e.ctx_repr = "{'min_length': 1}";
        return e;
      }
      if (n > 1024) {
        auto e = error("string_too_long", "String should have at most 1024 characters");
        e.ctx_repr = "{'max_length': 1024}";
        return e;
      }
      return std::nullopt;
    }
    case Kind::kInt: {
      if (v.is_int64() || v.is_uint64()) return std::nullopt;
      if (v.is_bool()) {
        v = v.as_bool() ? 1 : 0;
        return std::nullopt;
      }
      if (v.is_double()) {
        const double d = v.as_double();
        if (!std::isfinite(d)) return error("finite_number", "Input should be a finite number");
        if (d != std::floor(d)) return error("int_from_float", "Input should be a valid integer, got a number with a fractional part");
        v = static_cast<int64_t>(d);
        return std::nullopt;
      }
      if (v.is_string()) {
        std::string t = lower_trimmed(v.as_string());
        size_t k = t.empty() || (t[0] != '-' && t[0] != '+') ? 0 : 1;
        const bool digits = k < t.size() && t.size() - k <= 18 &&
                            t.find_first_not_of("0123456789", k) == std::string::npos;
        if (!digits) return error("int_parsing", "Input should be a valid integer, unable to parse string as an integer");
        v = std::stoll(t);
        return std::nullopt;
      }
      return error("int_type", "Input should be a valid integer");
    }
    case Kind::kBool: {
      if (v.is_bool()) return std::nullopt;
      if (v.is_int64() || v.is_uint64() || v.is_double()) {
        const double d = v.to_number<double>();
        if (d != 0 && d != 1) return error("bool_parsing", "Input should be a valid boolean, unable to interpret input");
        v = d == 1;
        return std::nullopt;
      }
      if (v.is_string()) {
        const std::string t = lower_trimmed(v.as_string());
        for (std::string_view yes : {"1", "on", "t", "true", "y", "yes"}) {
          if (t == yes) {
            v = true;
            return std::nullopt;
          }
        }
        for (std::string_view no : {"0", "off", "f", "false", "n", "no"}) {
          if (t == no) {
            v = false;
            return std::nullopt;
          }
        }
        return error("bool_parsing", "Input should be a valid boolean, unable to interpret input");
      }
      return error("bool_type", "Input should be a valid boolean");
    }
  }
  return std::nullopt;
}

// AnthropicMessagesRequest's field validators (a ValueError becomes a value_error).
std::optional<FieldError> messages_validator(std::string_view name, const json::value& v) {
  std::string reason;
  if (name == "model" && v.as_string().empty()) reason = "Model is required";
  if (name == "max_tokens" && v.is_int64() && v.as_int64() <= 0) reason = "max_tokens must be positive";
  if (reason.empty()) return std::nullopt;
  return FieldError{"value_error", "body." + std::string(name), "Value error, " + reason, summarize(&v),
                    "{'error': ValueError(" + repr(reason) + ")}"};
}

BodyRejection reject(const std::vector<FieldError>& errors) { return BodyRejection{400, rejection_body(errors)}; }

// A VLLMValidationError raised by a model's "before" validator: vLLM's own 400 (str(error) names
// the parameter), ahead of any field error.
BodyRejection vllm_rejection(std::string message, std::string_view param) {
  message += " (parameter=" + std::string(param) + ")";
  json::object err{{"message", message}, {"type", "BadRequestError"}, {"param", param}, {"code", 400}};
  return BodyRejection{400, json::serialize(json::object{{"error", std::move(err)}})};
}

// The request models' "before" validators the simulator shares: validate_cache_salt (chat,
// completions, responses) and validate_stream_options (chat, completions).
std::optional<BodyRejection> before_validators(BodyApi api, const json::object& o) {
  auto get = [&](std::string_view k) -> const json::value* {
    auto it = o.find(k);
    return it == o.end() ? nullptr : &it->value();
  };
  if (api != BodyApi::kMessages) {
    if (const json::value* salt = get("cache_salt"); salt && !salt->is_null()) {
      if (!salt->is_string() || salt->as_string().empty())
        return vllm_rejection("Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt");
      const std::string_view s = salt->as_string();
      if (chars_before(s, s.size()) > 128 || s.find_first_of(std::string_view("@/\\\0", 4)) != std::string_view::npos) {
        return vllm_rejection("Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', "
                              "'\\\\', or NUL.",
                              "cache_salt");
      }
    }
  }
  if ((api == BodyApi::kChat || api == BodyApi::kCompletions) && python_truthy(get("stream_options")) && !python_truthy(get("stream")))
    return vllm_rejection("Stream options can only be defined when `stream=True`.", "stream_options");
  return std::nullopt;
}

}  // namespace

std::string python_json_error(std::string_view text, size_t& pos) {
  PyScanner scanner(text);
  if (scanner.parse()) return "";
  pos = chars_before(text, scanner.byte_pos());
  return scanner.message();
}

Result<json::object, BodyRejection> validate_body(BodyApi api, std::string_view body) {
  // Starlette reads the body; FastAPI parses it only when there is one.
  if (body.empty()) return reject({FieldError{"missing", "body", "Field required", "None"}});
  if (body.substr(0, 3) == "\xef\xbb\xbf") body.remove_prefix(3);  // json.loads(bytes): utf-8-sig
  if (!valid_utf8(body)) return BodyRejection{400, R"({"detail":"There was an error parsing the body"})"};
  size_t pos = 0;
  if (std::string err = python_json_error(body, pos); !err.empty()) {
    return reject({FieldError{"json_invalid", "body." + std::to_string(pos), "JSON decode error", "<dict of 0 items>",
                              "{'error': " + repr(err) + "}"}});
  }
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) {
    // Python accepted it (NaN, Infinity, a depth boost refuses): the simulator cannot read it.
    return reject({FieldError{"json_invalid", "body.0", "JSON decode error", "<dict of 0 items>",
                              "{'error': 'Expecting value'}"}});
  }
  if (v.is_null()) return reject({FieldError{"missing", "body", "Field required", "None"}});
  if (!v.is_object()) {
    return reject({FieldError{"model_attributes_type", "body",
                              "Input should be a valid dictionary or object to extract fields from", summarize(&v)}});
  }
  json::object& o = v.as_object();
  if (auto r = before_validators(api, o)) return *r;
  std::vector<FieldError> errors;
  // Pydantic reports the data its "before" validators returned: ResponsesRequest.check_tool_usage
  // has added tool_choice ("none") to a body without tools.
  std::string whole = summarize(&v);
  if (api == BodyApi::kResponses && !o.contains("tool_choice")) {
    auto t = o.find("tools");
    if (t == o.end() || !t->value().is_array() || t->value().as_array().empty())
      whole = "<dict of " + std::to_string(o.size() + 1) + " items>";
  }
  for (const Field& f : fields_of(api)) {
    const std::string loc = "body." + std::string(f.name);
    auto it = o.find(f.name);
    if (it == o.end()) {
      if (f.required) errors.push_back(FieldError{"missing", loc, "Field required", whole});
      continue;
    }
    if (it->value().is_null()) {
      // Optional fields take None; a required one does not (a type error of its kind).
      if (!f.required) continue;
    }
    if (auto e = coerce(f.kind, loc, it->value())) {
      errors.push_back(std::move(*e));
      continue;
    }
    if (api == BodyApi::kMessages) {
      if (auto e = messages_validator(f.name, it->value())) errors.push_back(std::move(*e));
    }
  }
  if (!errors.empty()) return reject(errors);
  return std::move(o);
}

}  // namespace ramjet::sim
