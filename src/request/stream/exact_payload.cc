// request/stream/exact_payload: the /tokenize body for exact routing (exact_tokens.h), a pure
// function of the request body (its own library: the fuzz target links it without the proxy).
#include <boost/json.hpp>
#include <openssl/sha.h>

#include "render/template/vllm_chat.h"
#include "request/stream/exact_tokens.h"

namespace ramjet::request {

namespace json = boost::json;

namespace {

bool text_only(const json::array& messages) {
  for (const json::value& m : messages) {
    const json::object* o = m.if_object();
    if (o == nullptr) return false;
    const json::value* content = o->if_contains("content");
    if (content == nullptr || !content->is_array()) continue;
    for (const json::value& part : content->as_array()) {
      const json::object* p = part.if_object();
      const json::value* type = p ? p->if_contains("type") : nullptr;
      if (type == nullptr || !type->is_string()) return false;
      const std::string_view t = type->as_string();
      if (t != "text" && t != "input_text" && t != "output_text") return false;
    }
  }
  return true;
}

}  // namespace

std::optional<render::PromptApi> prompt_api(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kChat: return render::PromptApi::kChat;
    case Endpoint::kCompletions: return render::PromptApi::kCompletions;
    case Endpoint::kResponses: return render::PromptApi::kResponses;
    case Endpoint::kMessages: return render::PromptApi::kMessages;
    default: return std::nullopt;
  }
}

std::optional<TokenizeCall> tokenize_call(Endpoint endpoint, std::string_view body) {
  const std::optional<render::PromptApi> api = prompt_api(endpoint);
  if (!api) return std::nullopt;
  json::parse_options opt;
  opt.max_depth = 128;
  boost::system::error_code ec;
  json::value v = json::parse(body, ec, {}, opt);
  if (ec || !v.is_object()) return std::nullopt;
  if (*api == render::PromptApi::kResponses || *api == render::PromptApi::kMessages) {
    auto chat = render::to_chat_request(*api, std::move(v.as_object()));
    if (!chat.ok()) return std::nullopt;
    v = std::move(chat.value());
  }
  const json::object& req = v.as_object();
  TokenizeCall call;
  json::object out;
  if (const json::value* m = req.if_contains("model"); m && m->is_string()) {
    call.model = m->as_string();
    out["model"] = *m;
  }
  if (const json::value* s = req.if_contains("cache_salt"); s && s->is_string()) call.cache_salt = s->as_string();
  auto copy = [&](std::string_view key, json::kind kind) {
    if (const json::value* x = req.if_contains(key); x && x->kind() == kind) out[key] = *x;
  };
  if (*api != render::PromptApi::kCompletions) {
    const json::value* messages = req.if_contains("messages");
    if (messages == nullptr || !messages->is_array() || !text_only(messages->as_array())) return std::nullopt;
    out["messages"] = *messages;
    render::as_chat_text_parts(out["messages"]);
    copy("add_generation_prompt", json::kind::bool_);
    copy("continue_final_message", json::kind::bool_);
    copy("add_special_tokens", json::kind::bool_);
    copy("chat_template", json::kind::string);
    copy("tools", json::kind::array);
    // What vLLM's chat endpoint gives the template (documents, reasoning_effort and the
    // enable_thinking derived from it, over the request's kwargs): /tokenize takes only
    // chat_template_kwargs, so they go there.
    json::object kwargs = render::vllm_template_kwargs(req);
    if (!kwargs.empty()) out["chat_template_kwargs"] = std::move(kwargs);
  } else {
    const json::value* prompt = req.if_contains("prompt");
    if (prompt == nullptr || !prompt->is_string()) return std::nullopt;
    out["prompt"] = *prompt;
    copy("add_special_tokens", json::kind::bool_);
  }
  out["return_token_strs"] = false;
  call.payload = json::serialize(out);
  return call;
}

bool canary_treatment(std::string_view key, std::string_view session, uint32_t bps) {
  if (bps >= 10000) return true;
  if (bps == 0) return false;
  std::string in(key);
  in.push_back('\0');
  in.append(session);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(in.data()), in.size(), digest);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | digest[i];
  // v / 2^64 < bps / 10000  <=>  v * 10000 < bps * 2^64
  return static_cast<unsigned __int128>(v) * 10000 < static_cast<unsigned __int128>(bps) << 64;
}

}  // namespace ramjet::request
