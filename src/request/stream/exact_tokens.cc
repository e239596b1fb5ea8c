#include "request/stream/exact_tokens.h"

#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/string.hpp>

#include "net/client.h"
#include "render/identity/tokenize_payload.h"
#include "render/service/tokenizer_service.h"
#include "request/stream/proxy.h"
#include "request/stream/session.h"
#include "upstream/fleet.h"

namespace ramjet::request {

boost::asio::awaitable<void> Proxy::fetch_exact_tokens(Session& s) {
  ExactInput& e = s.prep.exact;
  const ExactTokensConfig& c = config_.exact;
  if (c.canary_bps < 10000) {  // the cohort of the request's session (one valid X-Session-ID)
    const SessionId& session = s.prep.session;
    if (session.source != SessionSource::kHeader) e.cohort = ExactCohort::kNoSession;
    else e.cohort = canary_treatment(c.canary_key, session.value, c.canary_bps) ? ExactCohort::kTreatment : ExactCohort::kControl;
  }
  const uint64_t size = s.prep.body.size();
  if (!s.prep.json_object || size < c.min_bytes || size > c.max_bytes) {
    e.status = ExactTokens::kIneligible;
    co_return;
  }
  // Never slower than the fingerprints because of tokenization: the wait is bounded by the
  // request's own budget (request/stream/tokenize_budget.h).
  const std::chrono::milliseconds wait = c.budget != nullptr ? c.budget->budget(size) : c.timeout;
  if (c.local != nullptr) {
    const auto began = std::chrono::steady_clock::now();
    const bool refused = co_await local_exact_tokens(s, wait);
    // A request the profile does not render (unknown kwargs, media, an effort the model lacks)
    // is the engine's to tokenize, in what is left of the budget.
    const auto left = wait - std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began);
    if (!refused) co_return;
    if (left < std::chrono::milliseconds(1)) {
      e.status = ExactTokens::kTimeout;
      co_return;
    }
    co_await remote_exact_tokens(s, left);
    co_return;
  }
  co_await remote_exact_tokens(s, wait);
}

boost::asio::awaitable<void> Proxy::remote_exact_tokens(Session& s, std::chrono::milliseconds wait) {
  ExactInput& e = s.prep.exact;
  const ExactTokensConfig& c = config_.exact;
  auto call = tokenize_call(s.prep.endpoint, s.prep.body);
  if (!call) {
    e.status = ExactTokens::kIneligible;
    co_return;
  }
  e.model = std::move(call->model);
  e.cache_salt = std::move(call->cache_salt);
  // A healthy engine of the model's pool, in turn: any of them renders the same tokens (one
  // model, one template).
  const size_t n = fleet_.size();
  const size_t start = tokenize_turn_.fetch_add(1, std::memory_order_relaxed);
  std::shared_ptr<const net::Member> engine;
  for (size_t k = 0; k < n && engine == nullptr; ++k) {
    const size_t i = (start + k) % n;
    if (fleet_.at(i).healthy() && (s.pool.engines == nullptr || s.pool.engines->has(i))) engine = fleet_.member(i);
  }
  if (engine == nullptr) {
    e.status = ExactTokens::kNoEngine;
    co_return;
  }
  net::GetFailure failure = net::GetFailure::kNone;
  net::SimpleResponse r = co_await net::simple_post(engine->url, "/tokenize", std::move(call->payload), c.bearer,
                                                    wait, c.max_response, failure);
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

boost::asio::awaitable<bool> Proxy::local_exact_tokens(Session& s, std::chrono::milliseconds wait) {
  ExactInput& e = s.prep.exact;
  const ExactTokensConfig& c = config_.exact;
  const Endpoint endpoint = s.prep.endpoint;
  const std::optional<render::PromptApi> api = prompt_api(endpoint);
  if (!api) {
    e.status = ExactTokens::kIneligible;
    co_return false;
  }
  // Local tokens are the engines' tokens only for engines one model folder attested: one healthy
  // engine of the model's pool that it did not (a model or version roll in progress, or engines
  // of one name that render differently) sends the request to the fingerprints.
  std::optional<size_t> model;
  bool any = false;
  for (size_t i = 0; i < fleet_.size(); ++i) {
    if (!fleet_.at(i).healthy() || (s.pool.engines != nullptr && !s.pool.engines->has(i))) continue;
    any = true;
    const std::optional<size_t> by = c.local->attesting_model(i);
    if (!by || (model && *model != *by)) {
      e.status = ExactTokens::kUnattested;
      co_return false;
    }
    model = by;
  }
  if (!any) {
    e.status = ExactTokens::kNoEngine;
    co_return false;
  }
  // The awaitable is made first, then awaited: no temporary lives inside the co_await expression
  // (GCC 12 destroys such temporaries twice).
  auto op = c.local->render_for_routing(*model, *api, s.prep.body, std::chrono::steady_clock::now() + wait);
  auto r = co_await std::move(op);
  if (!r.ok()) {
    switch (r.error()) {
      case render::PoolRefusal::kDeadline: e.status = ExactTokens::kTimeout; break;
      case render::PoolRefusal::kQueueFull: e.status = ExactTokens::kBusy; break;
      default: e.status = ExactTokens::kFailed; break;
    }
    co_return false;
  }
  render::TokenizerService::RoutingRender& out = r.value();
  if (out.outcome == render::ShadowOutcome::kUnsupported) co_return true;  // the engine renders it
  if (out.outcome != render::ShadowOutcome::kSuccess) {
    e.status = out.outcome == render::ShadowOutcome::kDecodeError ? ExactTokens::kIneligible : ExactTokens::kFailed;
    co_return false;
  }
  e.model = std::move(out.model);
  e.cache_salt = std::move(out.cache_salt);
  e.tokens = std::move(out.ids);
  e.status = ExactTokens::kTokenized;
  co_return false;
}

}  // namespace ramjet::request
