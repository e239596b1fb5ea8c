#include "sse.h"

#include <boost/json.hpp>

#include <charconv>

#include "text.h"

namespace ramjet::bench {
namespace {

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

// Position of the value of the first `"key"` followed by ':', or npos.
size_t find_value(std::string_view s, std::string_view quoted_key, size_t from = 0) {
  while (true) {
    size_t k = s.find(quoted_key, from);
    if (k == std::string_view::npos) return k;
    size_t i = skip_ws(s, k + quoted_key.size());
    if (i < s.size() && s[i] == ':') return skip_ws(s, i + 1);
    from = k + 1;
  }
}

// The escaped body of the string literal starting at s[i] == '"', or nullopt-like npos end.
bool string_at(std::string_view s, size_t i, std::string_view& body) {
  if (i >= s.size() || s[i] != '"') return false;
  size_t j = i + 1;
  while (j < s.size()) {
    char c = s[j];
    if (c == '\\') {
      j += 2;
      continue;
    }
    if (c == '"') {
      body = s.substr(i + 1, j - i - 1);
      return true;
    }
    ++j;
  }
  return false;
}

bool int_at(std::string_view s, size_t i, int64_t& v) {
  if (i >= s.size()) return false;
  auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), v);
  return ec == std::errc{} && p != s.data() + i;
}

// The JSON object starting at s[i] == '{' (string-aware brace matching), or empty.
std::string_view object_at(std::string_view s, size_t i) {
  if (i >= s.size() || s[i] != '{') return {};
  int depth = 0;
  bool in_str = false;
  for (size_t j = i; j < s.size(); ++j) {
    char c = s[j];
    if (in_str) {
      if (c == '\\') ++j;
      else if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}') {
      if (--depth == 0) return s.substr(i, j - i + 1);
    }
  }
  return {};
}

}  // namespace

bool parse_usage_object(std::string_view s, Usage& out) {
  std::string_view obj = object_at(s, 0);
  if (obj.empty()) return false;
  int64_t v = 0;
  if (size_t p = find_value(obj, "\"prompt_tokens\""); p != std::string_view::npos && int_at(obj, p, v))
    out.prompt_tokens = v;
  if (size_t p = find_value(obj, "\"completion_tokens\"");
      p != std::string_view::npos && int_at(obj, p, v))
    out.completion_tokens = v;
  if (size_t p = find_value(obj, "\"cached_tokens\""); p != std::string_view::npos && int_at(obj, p, v))
    out.cached_tokens = v;
  return true;
}

ChunkInfo scan_chunk(std::string_view d) {
  ChunkInfo info;
  while (!d.empty() && (d.back() == ' ' || d.back() == '\r' || d.back() == '\n')) d.remove_suffix(1);
  if (d == "[DONE]") {
    info.done = true;
    return info;
  }
  const size_t choices = find_value(d, "\"choices\"");
  if (size_t u = find_value(d, "\"usage\""); u != std::string_view::npos && u < d.size() && d[u] == '{')
    info.has_usage = parse_usage_object(d.substr(u), info.usage);
  if (choices == std::string_view::npos) {
    std::string_view object;
    size_t o = find_value(d, "\"object\"");
    if (find_value(d, "\"error\"") != std::string_view::npos ||
        (o != std::string_view::npos && string_at(d, o, object) && object == "error"))
      info.error = true;
    return info;
  }
  std::string_view body;
  if (size_t c = find_value(d, "\"content\"", choices); c != std::string_view::npos &&
                                                       string_at(d, c, body)) {
    info.content = body;
    info.has_token = !body.empty();
  }
  if (!info.has_token) {
    std::string_view r;
    size_t c = find_value(d, "\"reasoning_content\"", choices);
    if (c == std::string_view::npos) c = find_value(d, "\"reasoning\"", choices);
    if (c != std::string_view::npos && string_at(d, c, r)) info.has_token = !r.empty();
  }
  if (size_t f = find_value(d, "\"finish_reason\"", choices);
      f != std::string_view::npos && f < d.size() && d[f] == '"')
    info.finished = true;
  return info;
}

void StreamAccount::on_event(std::string_view data, double t) {
  ChunkInfo c = scan_chunk(data);
  if (c.done) {
    done_ = true;
    return;
  }
  if (c.error) error_ = true;
  if (c.has_token) {
    ++content_chunks_;
    if (first_token_t_ < 0) first_token_t_ = t;
    last_token_t_ = t;
  }
  if (collect_ && !c.content.empty()) append_json_unescaped(content_, c.content);
  if (c.finished) finished_ = true;
  if (c.has_usage) usage_ = c.usage;
}

void StreamAccount::on_json_body(std::string_view body, double t) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(body, ec);
  if (ec || !v.is_object()) {
    error_ = true;
    return;
  }
  const auto& o = v.as_object();
  const auto* choices = o.if_contains("choices");
  if (!choices || !choices->is_array()) {
    error_ = true;
    return;
  }
  done_ = true;
  if (!choices->as_array().empty() && choices->as_array()[0].is_object()) {
    const auto& ch = choices->as_array()[0].as_object();
    if (const auto* fr = ch.if_contains("finish_reason"); fr && fr->is_string()) finished_ = true;
    if (const auto* m = ch.if_contains("message"); m && m->is_object()) {
      if (const auto* c = m->as_object().if_contains("content"); c && c->is_string()) {
        if (!c->as_string().empty()) {
          content_chunks_ = 1;
          first_token_t_ = last_token_t_ = t;
        }
        if (collect_) content_.append(c->as_string().data(), c->as_string().size());
      }
    }
  }
  if (const auto* u = o.if_contains("usage"); u && u->is_object()) {
    const auto& uo = u->as_object();
    auto num = [](const boost::json::value* x, int64_t& out) {
      if (x && x->is_int64()) out = x->as_int64();
      else if (x && x->is_uint64()) out = static_cast<int64_t>(x->as_uint64());
    };
    num(uo.if_contains("prompt_tokens"), usage_.prompt_tokens);
    num(uo.if_contains("completion_tokens"), usage_.completion_tokens);
    if (const auto* d = uo.if_contains("prompt_tokens_details"); d && d->is_object())
      num(d->as_object().if_contains("cached_tokens"), usage_.cached_tokens);
  }
}

uint32_t StreamAccount::output_tokens() const {
  if (usage_.completion_tokens >= 0) return static_cast<uint32_t>(usage_.completion_tokens);
  return content_chunks_;
}

double StreamAccount::tpot() const {
  uint32_t n = output_tokens();
  if (n < 2 || first_token_t_ < 0) return -1;
  return (last_token_t_ - first_token_t_) / static_cast<double>(n - 1);
}

}  // namespace ramjet::bench
