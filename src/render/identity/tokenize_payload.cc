// render::tokenize_payload (see tokenize_payload.h).
#include "render/identity/tokenize_payload.h"

#include <algorithm>
#include <memory>

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "model/model_profile.h"
#include "render/identity/turn_resume.h"
#include "render/prompt/session_cache.h"
#include "render/prompt/turn_cache.h"
#include "render/template/vllm_chat.h"

namespace ramjet::render {

namespace json = boost::json;

std::string_view to_string(ShadowOutcome o) {
  switch (o) {
    case ShadowOutcome::kSuccess: return "success";
    case ShadowOutcome::kTimeout: return "timeout";
    case ShadowOutcome::kConnectError: return "connect_error";
    case ShadowOutcome::kHttpError: return "http_error";
    case ShadowOutcome::kResponseTooLarge: return "response_too_large";
    case ShadowOutcome::kDecodeError: return "decode_error";
    case ShadowOutcome::kParityMatch: return "parity_match";
    case ShadowOutcome::kParityMismatch: return "parity_mismatch";
    case ShadowOutcome::kUnsupported: return "unsupported_request";
    case ShadowOutcome::kRenderError: return "render_error";
    case ShadowOutcome::kEncodeError: return "encode_error";
    case ShadowOutcome::kRemoteUnavailable: return "remote_authority_unavailable";
    case ShadowOutcome::kUnattested: return "unattested";
  }
  return "unknown";
}

std::optional<TokenizePayload> build_tokenize_payload(const model::ModelProfile& profile, bool chat,
                                                      std::string_view body) {
  boost::system::error_code ec;
  json::parse_options opt;
  opt.max_depth = 128;  // as deep as chat_template's own request parse allows
  json::value v = json::parse(body, ec, {}, opt);
  if (ec || !v.is_object()) return std::nullopt;
  return build_tokenize_payload(profile, chat, v.as_object());
}

namespace {

// `movable`: the same object as `req` when the caller does not use it again — its messages and
// tools are moved out instead of copied. `with_json`: also serialise the payload (the /tokenize body).
std::optional<TokenizePayload> build(const model::ModelProfile& profile, bool chat, const json::object& req,
                                     json::object* movable, bool with_json) {
  TokenizePayload p;
  p.chat = chat;
  json::object out(req.storage());  // the request's own storage: its messages move, not copy
  if (const json::value* m = req.if_contains("model"); m && m->is_string()) out["model"] = *m;
  auto flag = [&](std::string_view key) -> std::optional<bool> {
    const json::value* f = req.if_contains(key);
    if (f && f->is_bool()) return f->as_bool();
    return std::nullopt;
  };
  if (chat) {
    const json::value* messages = req.if_contains("messages");
    if (!messages || !messages->is_array()) return std::nullopt;
    const json::value* tools = req.if_contains("tools");
    const bool has_tools = tools != nullptr && !tools->is_null();
    // The profile reads the messages and kwargs first: they may be moved below.
    auto args = model::local_template_args(profile, req);
    if (movable != nullptr) {
      out["messages"] = std::move(movable->at("messages"));
      if (has_tools) out["tools"] = std::move(movable->at("tools"));
    } else {
      out["messages"] = *messages;
      if (has_tools) out["tools"] = *tools;
    }
    as_chat_text_parts(out["messages"]);
    const bool cont = flag("continue_final_message").value_or(false);
    out["add_generation_prompt"] = flag("add_generation_prompt").value_or(!cont);
    if (cont) {
      out["continue_final_message"] = true;
      p.local_refusal = ShadowOutcome::kUnsupported;  // vLLM's tail trimming is not reproduced
    }
    if (auto a = flag("add_special_tokens")) {
      out["add_special_tokens"] = *a;
      if (*a) p.local_refusal = ShadowOutcome::kUnsupported;
    }
    json::object kwargs;
    if (args.ok()) {
      kwargs = std::move(args.value());
    } else {
      // Not rendered locally; the engine is still asked with what its chat path gives the
      // template for this request.
      kwargs = vllm_template_kwargs(req);
      p.multimodal = args.error() == model::LocalFailure::Multimodal;
      p.local_refusal = args.error() == model::LocalFailure::BadRequest ? ShadowOutcome::kDecodeError
                                                                         : ShadowOutcome::kUnsupported;
    }
    // Documents reach the template as a kwarg (over the request's own: /tokenize has no documents
    // field); a per-request template is passed on. Neither is reproduced locally, nor is prompt
    // truncation.
    if (const json::value* d = req.if_contains("documents"); d && !d->is_null()) {
      kwargs["documents"] = *d;
      p.local_refusal = ShadowOutcome::kUnsupported;
    }
    if (const json::value* t = req.if_contains("chat_template"); t && !t->is_null()) {
      out["chat_template"] = *t;
      p.local_refusal = ShadowOutcome::kUnsupported;
    }
    if (const json::value* t = req.if_contains("truncate_prompt_tokens"); t && !t->is_null())
      p.local_refusal = ShadowOutcome::kUnsupported;
    if (!kwargs.empty()) out["chat_template_kwargs"] = std::move(kwargs);
  } else {
    const json::value* prompt = req.if_contains("prompt");
    if (!prompt || !prompt->is_string()) return std::nullopt;
    p.prompt = std::string(prompt->as_string());
    p.add_special_tokens = flag("add_special_tokens").value_or(true);
    out["prompt"] = *prompt;
    out["add_special_tokens"] = p.add_special_tokens;
  }
  out["return_token_strs"] = false;
  if (with_json) p.json = json::serialize(out);
  // Built in place with the request's storage: assigning would copy it all into the default
  // storage p.request was made with (Boost.JSON keeps the target's storage on assignment).
  std::destroy_at(&p.request);
  std::construct_at(&p.request, std::move(out));
  return p;
}

}  // namespace

std::optional<TokenizePayload> build_tokenize_payload(const model::ModelProfile& profile, bool chat,
                                                      const json::object& req) {
  return build(profile, chat, req, nullptr, true);
}

std::optional<TokenizePayload> build_tokenize_payload(const model::ModelProfile& profile, PromptApi api,
                                                      const json::object& req) {
  if (api == PromptApi::kChat || api == PromptApi::kCompletions)
    return build_tokenize_payload(profile, api == PromptApi::kChat, req);
  auto chat = to_chat_request(api, req);
  if (!chat.ok()) {
    TokenizePayload refused;
    refused.local_refusal = chat.error().kind == ConversionError::kBadRequest ? ShadowOutcome::kDecodeError
                                                                               : ShadowOutcome::kUnsupported;
    return refused;
  }
  return build(profile, true, chat.value(), &chat.value(), true);
}

std::optional<TokenizePayload> build_local_payload(const model::ModelProfile& profile, PromptApi api,
                                                   json::object&& req) {
  if (api == PromptApi::kCompletions) return build(profile, false, req, &req, false);
  if (api == PromptApi::kChat) return build(profile, true, req, &req, false);
  auto chat = to_chat_request(api, std::move(req));
  if (!chat.ok()) {
    TokenizePayload refused;
    refused.local_refusal = chat.error().kind == ConversionError::kBadRequest ? ShadowOutcome::kDecodeError
                                                                               : ShadowOutcome::kUnsupported;
    return refused;
  }
  return build(profile, true, chat.value(), &chat.value(), false);
}

Result<std::vector<uint32_t>, PromptError> render_payload(const PromptRenderer& renderer,
                                                          const TokenizePayload& payload, SessionCache* cache) {
  if (!payload.chat) return renderer.text(payload.prompt, payload.add_special_tokens);
  auto rendered = renderer.chat_parsed(payload.request, cache, payload.json);
  if (!rendered) return rendered.error();
  return std::move(rendered->ids);
}

namespace {

ShadowOutcome outcome_of(PromptErrc kind) {
  return kind == PromptErrc::kDecode   ? ShadowOutcome::kDecodeError
         : kind == PromptErrc::kEncode ? ShadowOutcome::kEncodeError
                                       : ShadowOutcome::kRenderError;
}

}  // namespace

LocalRender render_local(const PromptRenderer& renderer, const TokenizePayload& p, SessionCache* cache) {
  LocalRender r;
  if (p.local_refusal) {
    r.outcome = *p.local_refusal;
    return r;
  }
  auto ids = render_payload(renderer, p, cache);
  if (!ids) {
    r.outcome = outcome_of(ids.error().kind);
    return r;
  }
  r.ids = std::move(ids.value());
  return r;
}

RoutingTokens render_routing_body(const model::ModelProfile& profile, const PromptRenderer& renderer,
                                  SessionCache* cache, PromptApi api, std::string_view body) {
  // A follow-up that extends a kept turn byte for byte: only its new messages (turn_resume.h).
  const bool turns = cache != nullptr && api == PromptApi::kChat && renderer.native_template();
  if (turns) {
    if (std::optional<RoutingTokens> resumed = resume_routing_turn(profile, renderer, *cache, body))
      return std::move(*resumed);
  }
  RoutingTokens out;
  // An arena about the size the parsed body takes (about twice its bytes), kept by the thread
  // (a render pool worker) between requests so a request's parse touches warm memory instead of
  // fresh pages; past it the arena takes more blocks from the heap. Everything parsed and built
  // from it goes at the end of this function. At most 8 MiB stays per thread.
  thread_local std::vector<unsigned char> warm;
  thread_local bool warm_in_use = false;  // a nested call (none today) gets an arena of its own
  const bool mine = !warm_in_use;
  const size_t want = std::min<size_t>(body.size() * 2 + 4096, 8u << 20);
  if (mine && warm.size() < want) warm.resize(want);
  json::monotonic_resource arena = mine ? json::monotonic_resource(warm.data(), warm.size())
                                        : json::monotonic_resource(want);
  warm_in_use = true;
  struct Release {
    bool mine;
    ~Release() {
      if (mine) warm_in_use = false;
    }
  } release{mine};
  json::parse_options opt;
  opt.max_depth = 128;  // as build_tokenize_payload's own parse
  boost::system::error_code ec;
  json::value v = json::parse(body, ec, &arena, opt);
  if (ec || !v.is_object()) {
    out.outcome = ShadowOutcome::kDecodeError;
    return out;
  }
  const json::object& req = v.as_object();
  if (const json::value* m = req.if_contains("model"); m && m->is_string()) out.model = m->as_string();
  // Every API's cache_salt salts the engine's blocks (vLLM 0.32 passes a Messages request's on).
  if (const json::value* s = req.if_contains("cache_salt"); s && s->is_string()) out.cache_salt = s->as_string();
  std::optional<TokenizePayload> payload = build_local_payload(profile, api, std::move(v.as_object()));
  if (!payload) {
    out.outcome = ShadowOutcome::kDecodeError;
    return out;
  }
  if (payload->multimodal) {  // the engine's tokens depend on the media: not reproduced here
    out.outcome = ShadowOutcome::kUnsupported;
    return out;
  }
  if (turns && !payload->local_refusal) {
    // render_local, keeping what the next turn needs.
    auto turn = std::make_unique<Turn>();
    auto rendered = renderer.chat_parsed(payload->request, cache, {}, turn.get());
    if (!rendered) {
      out.outcome = outcome_of(rendered.error().kind);
      return out;
    }
    out.ids = rendered->ids;
    turn->ids = std::move(rendered->ids);
    turn->text = std::move(rendered->text);
    keep_routing_turn(profile, renderer, *cache, body, out, std::move(turn));
    return out;
  }
  LocalRender r = render_local(renderer, *payload, cache);
  out.outcome = r.outcome;
  out.ids = std::move(r.ids);
  return out;
}

std::optional<std::vector<uint32_t>> decode_tokenize_response(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const json::value* count = v.as_object().if_contains("count");
  const json::value* tokens = v.as_object().if_contains("tokens");
  if (!count || !tokens || !tokens->is_array()) return std::nullopt;
  std::vector<uint32_t> ids;
  ids.reserve(tokens->as_array().size());
  for (const auto& t : tokens->as_array()) {
    if (t.is_uint64() && t.as_uint64() <= UINT32_MAX) ids.push_back(static_cast<uint32_t>(t.as_uint64()));
    else if (t.is_int64() && t.as_int64() >= 0 && t.as_int64() <= UINT32_MAX) ids.push_back(static_cast<uint32_t>(t.as_int64()));
    else return std::nullopt;
  }
  const bool count_ok = (count->is_uint64() && count->as_uint64() == ids.size()) ||
                        (count->is_int64() && count->as_int64() >= 0 &&
                         static_cast<uint64_t>(count->as_int64()) == ids.size());
  if (!count_ok) return std::nullopt;
  return ids;
}

}  // namespace ramjet::render
