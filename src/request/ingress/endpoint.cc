#include "request/ingress/endpoint.h"

#include "common/log.h"

namespace ramjet::request {

std::string_view endpoint_label(Endpoint e) {
  switch (e) {
    case Endpoint::kChat: return "chat";
    case Endpoint::kCompletions: return "completions";
    case Endpoint::kResponses: return "responses";
    case Endpoint::kMessages: return "messages";
    case Endpoint::kModels: return "models";
    case Endpoint::kHealth: return "health";
    case Endpoint::kOther: return "other";
  }
  return "other";
}

Endpoint classify(std::string_view method, std::string_view target) {
  auto q = target.find('?');
  std::string_view path = q == std::string_view::npos ? target : target.substr(0, q);
  if (method == "POST") {
    if (path == "/v1/chat/completions") return Endpoint::kChat;
    if (path == "/v1/completions") return Endpoint::kCompletions;
    if (path == "/v1/responses") return Endpoint::kResponses;
    if (path == "/v1/messages") return Endpoint::kMessages;
  } else if (method == "GET" || method == "HEAD") {
    if (path == "/v1/models") return Endpoint::kModels;
    if (path == "/health") return Endpoint::kHealth;
  }
  return Endpoint::kOther;
}

std::string error_json(std::string_view message, std::string_view type, int status) {
  std::string out = R"({"error":{"message":")";
  out += log::json_escape(message);
  out += R"(","type":")";
  out += log::json_escape(type);
  out += R"(","param":null,"code":)";
  out += std::to_string(status);
  out += "}}";
  return out;
}

}  // namespace ramjet::request
