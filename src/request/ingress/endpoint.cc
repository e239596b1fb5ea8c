#include "request/ingress/endpoint.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "common/bytes.h"
#include "common/log.h"

namespace ramjet::request {

namespace {

std::string_view path_of(std::string_view target) {
  const auto q = target.find('?');
  return q == std::string_view::npos ? target : target.substr(0, q);
}

// A fixed path of the table and the methods it is served with.
struct Fixed {
  std::string_view path;
  Endpoint endpoint;
  bool post;  // POST; otherwise GET and HEAD
};
constexpr std::array<Fixed, 6> kFixed = {{
    {"/v1/chat/completions", Endpoint::kChat, true},
    {"/v1/completions", Endpoint::kCompletions, true},
    {"/v1/responses", Endpoint::kResponses, true},
    {"/v1/messages", Endpoint::kMessages, true},
    {"/v1/models", Endpoint::kModels, false},
    {"/health", Endpoint::kHealth, false},
}};

bool is_tokenize_path(std::string_view path) { return path == "/tokenize" || path == "/detokenize"; }

// Origin-form, with no dot segment and no percent-encoded '.', '/' or '\': an engine's router
// sees the same path we matched.
bool plain_path(std::string_view path) {
  if (path.empty() || path.front() != '/') return false;
  if (path.find('\\') != std::string_view::npos) return false;
  for (size_t i = 0; i + 2 < path.size(); ++i) {
    if (path[i] != '%') continue;
    const char a = path[i + 1];
    const char b = static_cast<char>(std::tolower(static_cast<unsigned char>(path[i + 2])));
    if ((a == '2' && (b == 'e' || b == 'f')) || (a == '5' && b == 'c')) return false;
  }
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view seg = path.substr(start, end - start);
    if (seg == "." || seg == "..") return false;
    start = end + 1;
  }
  return true;
}

bool passthrough(std::string_view path, const ServedPaths& served) {
  if (served.passthrough.empty() || !plain_path(path)) return false;
  return std::any_of(served.passthrough.begin(), served.passthrough.end(), [&](const std::string& p) {
    if (!p.empty() && p.back() == '*') return path.substr(0, p.size() - 1) == std::string_view(p).substr(0, p.size() - 1);
    return path == p;
  });
}

}  // namespace

std::string_view endpoint_label(Endpoint e) {
  switch (e) {
    case Endpoint::kChat: return "chat";
    case Endpoint::kCompletions: return "completions";
    case Endpoint::kResponses: return "responses";
    case Endpoint::kMessages: return "messages";
    case Endpoint::kModels: return "models";
    case Endpoint::kHealth: return "health";
    case Endpoint::kOther: return "other";
    case Endpoint::kUnknown: return "unknown";
  }
  return "unknown";
}

Endpoint classify(std::string_view method, std::string_view target, const ServedPaths& served) {
  const std::string_view path = path_of(target);
  const bool post = same(method, "POST");
  const bool get = same(method, "GET") || same(method, "HEAD");
  for (const Fixed& f : kFixed) {
    if (!same(path, f.path)) continue;
    if (f.post ? post : get) return f.endpoint;
    // A browser's CORS preflight: the engine's CORS policy answers it.
    if (same(method, "OPTIONS") && f.endpoint != Endpoint::kHealth) return Endpoint::kOther;
    return passthrough(path, served) ? Endpoint::kOther : Endpoint::kUnknown;
  }
  if (served.tokenize && is_tokenize_path(path) && (post || same(method, "OPTIONS"))) return Endpoint::kOther;
  return passthrough(path, served) ? Endpoint::kOther : Endpoint::kUnknown;
}

std::string_view allowed_methods(std::string_view target, const ServedPaths& served) {
  const std::string_view path = path_of(target);
  for (const Fixed& f : kFixed) {
    if (path == f.path) return f.post ? "POST" : "GET, HEAD";
  }
  if (served.tokenize && is_tokenize_path(path)) return "POST";
  return "";
}

std::string error_json(std::string_view message, std::string_view type, int status, std::string_view param) {
  std::string out = R"({"error":{"message":")";
  out += log::json_escape(message);
  out += R"(","type":")";
  out += log::json_escape(type);
  if (param.empty()) {
    out += R"(","param":null,"code":)";
  } else {
    out += R"(","param":")";
    out += log::json_escape(param);
    out += R"(","code":)";
  }
  out += std::to_string(status);
  out += "}}";
  return out;
}

std::string anthropic_error_json(std::string_view message, int status) {
  std::string_view type = "api_error";
  switch (status) {
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503:
    case 529: type = "overloaded_error"; break;
    case 504: type = "timeout_error"; break;
    default:
      if (status >= 400 && status < 500) type = "invalid_request_error";
      break;
  }
  std::string out = R"({"type":"error","error":{"type":")";
  out += type;
  out += R"(","message":")";
  out += log::json_escape(message);
  out += R"("}})";
  return out;
}

}  // namespace ramjet::request
