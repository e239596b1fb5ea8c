#include "request/stream/exact_tokens.h"

#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "net/client.h"
#include "render/tokenize_payload.h"
#include "request/stream/proxy.h"
#include "request/stream/session.h"
#include "upstream/fleet.h"

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
      if (type == nullptr || !type->is_string() || type->as_string() != "text") return false;
    }
  }
  return true;
}

}  // namespace

std::optional<TokenizeCall> tokenize_call(Endpoint endpoint, std::string_view body) {
  if (endpoint != Endpoint::kChat && endpoint != Endpoint::kCompletions) return std::nullopt;
  json::parse_options opt;
  opt.max_depth = 128;
  boost::system::error_code ec;
  json::value v = json::parse(body, ec, {}, opt);
  if (ec || !v.is_object()) return std::nullopt;
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
  if (endpoint == Endpoint::kChat) {
    const json::value* messages = req.if_contains("messages");
    if (messages == nullptr || !messages->is_array() || !text_only(messages->as_array())) return std::nullopt;
    out["messages"] = *messages;
    copy("add_generation_prompt", json::kind::bool_);
    copy("continue_final_message", json::kind::bool_);
    copy("add_special_tokens", json::kind::bool_);
    copy("chat_template", json::kind::string);
    copy("tools", json::kind::array);
    // vLLM's chat endpoint hands reasoning_effort to the template, and sets enable_thinking from
    // it unless the caller did: /tokenize only takes chat_template_kwargs, so they go there.
    json::object kwargs;
    if (const json::value* k = req.if_contains("chat_template_kwargs"); k && k->is_object()) kwargs = k->as_object();
    if (const json::value* effort = req.if_contains("reasoning_effort"); effort && effort->is_string()) {
      if (!kwargs.contains("reasoning_effort")) kwargs["reasoning_effort"] = *effort;
      if (!kwargs.contains("enable_thinking")) kwargs["enable_thinking"] = effort->as_string() != "none";
    }
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

boost::asio::awaitable<void> Proxy::fetch_exact_tokens(Session& s) {
  ExactInput& e = s.prep.exact;
  const ExactTokensConfig& c = config_.exact;
  const uint64_t size = s.prep.body.size();
  if (!s.prep.json_object || size < c.min_bytes || size > c.max_bytes) {
    e.status = ExactTokens::kIneligible;
    co_return;
  }
  auto call = tokenize_call(s.prep.endpoint, s.prep.body);
  if (!call) {
    e.status = ExactTokens::kIneligible;
    co_return;
  }
  e.model = std::move(call->model);
  e.cache_salt = std::move(call->cache_salt);
  // A healthy engine, in turn: any of them renders the same tokens (one model, one template).
  const size_t n = fleet_.size();
  const size_t start = tokenize_turn_.fetch_add(1, std::memory_order_relaxed);
  const upstream::Engine* engine = nullptr;
  for (size_t k = 0; k < n && engine == nullptr; ++k) {
    const upstream::Engine& candidate = fleet_.at((start + k) % n);
    if (candidate.healthy()) engine = &candidate;
  }
  if (engine == nullptr) {
    e.status = ExactTokens::kNoEngine;
    co_return;
  }
  net::GetFailure failure = net::GetFailure::kNone;
  net::SimpleResponse r = co_await net::simple_post(engine->url(), "/tokenize", std::move(call->payload), c.bearer,
                                                    c.timeout, c.max_response, failure);
  if (failure == net::GetFailure::kTimeout) {
    e.status = ExactTokens::kTimeout;
    co_return;
  }
  auto ids = failure == net::GetFailure::kNone && r.status == 200 ? render::decode_tokenize_response(r.body) : std::nullopt;
  if (!ids) {
    e.status = ExactTokens::kFailed;
    co_return;
  }
  e.tokens = std::move(*ids);
  e.status = ExactTokens::kTokenized;
}

}  // namespace ramjet::request
