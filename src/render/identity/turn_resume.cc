// render::turn_resume (see turn_resume.h).
//
// Why the fast path gives the full path's ids. take() proved body = P + A + R, where P is the
// turn's body up to the end of its last message (element K of the top-level "messages" array,
// the only key spelling "messages": scan_message_spans) and R the rest of the turn's body. Below,
// "[{}" + (the turn's bytes after message p-1 up to the end of P) + A + "]" parses as one JSON
// array: so A is (',' value)* with whitespace, a valid continuation after an element that ends
// in '}' (every message of a kept turn is an object), and the body is valid JSON whose top-level
// keys are the turn's, byte for byte, with messages = the turn's followed by the values of A.
// (Nesting: the array is one level shallower than the body's messages array; the parse allows
// two levels less than the body parse.) The payload the full path builds is then the turn's with
// those messages appended: local_template_args looks at each message alone
// (model::message_local_failure, checked on the new ones; the turn's passed) and everything else
// it reads is unchanged; as_chat_text_parts rewrites each message alone. The formatter's part is
// qwen3::extend's argument and the encoder's Tokenizer::cut_reach's.
#include "render/identity/turn_resume.h"

#include <memory>
#include <string>
#include <vector>

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parse.hpp>

#include "model/model_profile.h"
#include "render/prompt/session_cache.h"
#include "render/prompt/turn_cache.h"
#include "render/template/message_spans.h"
#include "render/template/vllm_chat.h"

namespace ramjet::render {

namespace json = boost::json;

namespace {

constexpr int kMaxDepth = 126;  // the body parse's 128, less the object and the messages array

TurnKey key_of(const model::ModelProfile& profile, const PromptRenderer& renderer) {
  return TurnKey{renderer.tokenizer() ? renderer.tokenizer()->serial() : 0, &renderer, &profile};
}

}  // namespace

std::optional<RoutingTokens> resume_routing_turn(const model::ModelProfile& profile, const PromptRenderer& renderer,
                                                 SessionCache& cache, std::string_view body) {
  if (!renderer.native_template() || !renderer.tokenizer()) return std::nullopt;
  TurnCache& turns = cache.turns();
  std::unique_ptr<Turn> t = turns.take(key_of(profile, renderer), body);
  if (!t) return std::nullopt;
  auto decline = [&]() -> std::optional<RoutingTokens> {
    turns.count_resumed(false);
    return std::nullopt;  // the turn goes: the full path keeps the body's own
  };
  const size_t n0 = t->msg_end.size();
  if (n0 == 0 || t->render.kinds.size() != n0) return decline();
  const size_t end = t->msg_end[n0 - 1];
  const std::string_view added = body.substr(end, body.size() - t->rest().size() - end);

  // Messages from p on: the turn's (p..n0-1) and the appended ones, parsed as one array. p starts
  // where a follow-up without a new query renders again; a new query moves it back.
  std::string doc;
  json::monotonic_resource arena;
  std::optional<json::value> parsed;  // emplaced: assigning would copy it out of the arena
  std::vector<const json::value*> msgs;
  size_t p = qwen3::rerender_from(t->render, false);
  if (p == 0) return decline();
  for (;;) {
    doc.assign("[{}");
    doc.append(body.substr(t->msg_end[p - 1], end - t->msg_end[p - 1]));
    doc.append(added);
    doc.push_back(']');
    json::parse_options opt;
    opt.max_depth = kMaxDepth;
    boost::system::error_code ec;
    parsed.emplace(json::parse(doc, ec, &arena, opt));
    if (ec || !parsed->is_array()) return decline();
    json::array& a = parsed->as_array();
    const size_t old = n0 - p;
    if (a.size() < 1 + old || !a[0].is_object() || !a[0].as_object().empty()) return decline();
    for (size_t i = 1 + old; i < a.size(); ++i)
      if (model::message_local_failure(a[i])) return decline();
    as_chat_text_parts(*parsed);
    msgs.clear();
    for (size_t i = 1; i < a.size(); ++i) msgs.push_back(&a[i]);
    auto query = qwen3::any_query(std::span<const json::value* const>(msgs).subspan(old));
    if (!query) return decline();
    const size_t first = qwen3::rerender_from(t->render, *query);
    if (first == 0) return decline();
    if (first >= p) break;
    p = first;  // a new query: the messages since the last one render again
  }
  if (t->render.ends[p - 1] == qwen3::TurnState::kUnknown) return decline();
  const size_t appended = msgs.size() - (n0 - p);
  if (!scan_more_elements(added, end, t->msg_end) || t->msg_end.size() != n0 + appended) return decline();
  if (!renderer.resume_turn(*t, p, msgs)) return decline();
  t->body.resize(end);
  t->body.append(body.substr(end));
  RoutingTokens out;
  out.ids = t->ids;
  out.model = t->model;
  out.cache_salt = t->cache_salt;
  turns.count_resumed(true);
  turns.put(std::move(t));
  return out;
}

void keep_routing_turn(const model::ModelProfile& profile, const PromptRenderer& renderer, SessionCache& cache,
                       std::string_view body, const RoutingTokens& tokens, std::unique_ptr<Turn> turn) {
  if (!turn || turn->render.kinds.empty() || tokens.outcome != ShadowOutcome::kSuccess) return;
  std::optional<MessageSpans> spans = scan_message_spans(body);
  if (!spans || spans->ends.size() != turn->render.kinds.size()) return;
  turn->key = key_of(profile, renderer);
  // Room for a few follow-ups: they append in place (a reallocation would copy the whole turn).
  auto room = [](size_t n) { return n + n / 8 + 1024; };
  turn->body.reserve(room(body.size()));
  turn->body.assign(body);
  turn->text.reserve(room(turn->text.size()));
  turn->ids.reserve(room(turn->ids.size()));
  turn->cuts.reserve(room(turn->cuts.size()));
  turn->render.kinds.reserve(room(turn->render.kinds.size()));
  turn->render.ends.reserve(room(turn->render.ends.size()));
  spans->ends.reserve(room(spans->ends.size()));
  turn->msg_end = std::move(spans->ends);
  turn->model = tokens.model;
  turn->cache_salt = tokens.cache_salt;
  cache.turns().put(std::move(turn));
}

}  // namespace ramjet::render
