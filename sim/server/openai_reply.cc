// sim/server/openai_reply (see openai_reply.h).
#include "sim/server/openai_reply.h"

#include <boost/json.hpp>

namespace ramjet::sim {

namespace json = boost::json;

namespace {

std::string event(const json::object& o) { return "data: " + json::serialize(o) + "\n\n"; }

}  // namespace

json::object OpenAiReply::head() const {
  const std::string_view object = !s_.chat ? "text_completion" : "chat.completion.chunk";
  return json::object{{"id", s_.id}, {"object", object}, {"created", s_.created}, {"model", s_.model}};
}

json::object OpenAiReply::running_usage(const TokenUsage& u) const {
  // Chat sets completion_tokens_details (None without a reasoning parser); completions do not.
  json::object o{{"prompt_tokens", u.prompt}, {"total_tokens", u.prompt + u.completion},
                 {"completion_tokens", u.completion}};
  if (s_.chat) o["completion_tokens_details"] = nullptr;
  return o;
}

std::string OpenAiReply::role_chunk(uint32_t prompt_tokens) const {
  json::object c = head();
  c["choices"] = json::array{json::object{{"index", 0},
                                          {"delta", json::object{{"role", "assistant"}, {"content", ""}}},
                                          {"logprobs", nullptr},
                                          {"finish_reason", nullptr}}};
  if (s_.continuous_usage) c["usage"] = running_usage(TokenUsage{prompt_tokens, 0, 0, 0});
  c["prompt_token_ids"] = nullptr;  // set (to None) on the first chunk only
  c["prompt_text"] = nullptr;
  return event(c);
}

std::string OpenAiReply::text_chunk(std::string_view text, const TokenUsage& usage,
                                    std::optional<std::string_view> finish) const {
  json::object choice{{"index", 0}};
  if (s_.chat) choice["delta"] = json::object{{"content", text}};
  else choice["text"] = text;
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish ? json::value(*finish) : json::value(nullptr);
  // Chat sets stop_reason on the finishing chunk only; completions on every chunk.
  if (finish || !s_.chat) choice["stop_reason"] = nullptr;
  if (!s_.chat) choice["prompt_token_ids"] = nullptr;
  choice["token_ids"] = nullptr;
  json::object c = head();
  c["choices"] = json::array{std::move(choice)};
  if (s_.continuous_usage) c["usage"] = running_usage(usage);
  if (finish && !s_.include_usage) c["system_fingerprint"] = s_.fingerprint;  // else on the usage chunk
  return event(c);
}

std::string OpenAiReply::usage_chunk(const TokenUsage& u) const {
  // Dumped with exclude_none: no completion_tokens_details, no multimodal_tokens, and on
  // completions no created_cache_tokens (it never sets one).
  json::object usage{{"prompt_tokens", u.prompt}, {"total_tokens", u.prompt + u.completion},
                     {"completion_tokens", u.completion}};
  if (s_.details) {
    json::object d{{"cached_tokens", u.cached}};
    if (s_.chat) d["created_cache_tokens"] = u.created;
    usage["prompt_tokens_details"] = std::move(d);
  }
  json::object c = head();
  c["choices"] = json::array{};
  c["usage"] = std::move(usage);
  c["system_fingerprint"] = s_.fingerprint;
  return event(c);
}

std::string OpenAiReply::full(std::string_view text, std::string_view finish, const TokenUsage& u,
                              const json::object* kv) const {
  json::object choice{{"index", 0}};
  if (s_.chat) {
    // ChatMessage: tool_calls is dropped from the dump when empty.
    choice["message"] = json::object{{"role", "assistant"}, {"content", text},   {"refusal", nullptr},
                                     {"annotations", nullptr}, {"audio", nullptr}, {"function_call", nullptr},
                                     {"reasoning", nullptr}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish;
  choice["stop_reason"] = nullptr;
  choice["token_ids"] = nullptr;
  if (!s_.chat) {
    choice["prompt_logprobs"] = nullptr;
    choice["prompt_token_ids"] = nullptr;
  }
  choice["routed_experts"] = nullptr;

  json::value details = nullptr;
  if (s_.details) {
    details = json::object{{"cached_tokens", u.cached},
                           {"created_cache_tokens", s_.chat ? json::value(u.created) : json::value(nullptr)},
                           {"multimodal_tokens", nullptr}};
  }
  json::object o{{"id", s_.id},
                 {"object", s_.chat ? "chat.completion" : "text_completion"},
                 {"created", s_.created},
                 {"model", s_.model},
                 {"choices", json::array{std::move(choice)}},
                 {"service_tier", nullptr},
                 {"system_fingerprint", s_.fingerprint},
                 {"usage", json::object{{"prompt_tokens", u.prompt},
                                        {"total_tokens", u.prompt + u.completion},
                                        {"completion_tokens", u.completion},
                                        {"prompt_tokens_details", std::move(details)},
                                        {"completion_tokens_details", nullptr}}}};
  if (s_.chat) {
    o["prompt_logprobs"] = nullptr;
    o["prompt_token_ids"] = nullptr;
    o["prompt_text"] = nullptr;
  }
  o["kv_transfer_params"] = kv ? json::value(*kv) : json::value(nullptr);
  o["ec_transfer_params"] = nullptr;
  o["metrics"] = nullptr;
  return json::serialize(o);
}

}  // namespace ramjet::sim
