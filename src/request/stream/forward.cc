// The upstream side of the data plane: prepare, route, and dispatch with one retry before the
// first response byte. A failure after the request was sent (the engine closed the connection,
// answered garbage, or answered 502/503) moves the request to another engine once; if it fails
// the same way there too, the request is to blame and no engine is, and the client is told so.
// A request still waiting for its first byte when its engine is fenced moves on as well. The
// response relay is in relay.cc.
//
// Heads are serialised here into the session's reused buffer and written together with the
// body bytes in one gather write (tried synchronously first: the sockets are non-blocking).
#include <algorithm>
#include <charconv>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>

#include <openssl/err.h>

#include "common/log.h"
#include "net/http.h"
#include "request/prepare/canonical.h"
#include "request/route/reservation.h"
#include "request/stream/proxy.h"
#include "request/stream/owned_body.h"
#include "request/stream/rank_header.h"
#include "request/stream/session.h"

namespace ramjet::request {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

StreamKind stream_kind_of(const PreparedRequest& p) {
  if (!p.stream) return StreamKind::kUnknown;
  return *p.stream ? StreamKind::kTrue : StreamKind::kFalse;
}


bool is_session_header(const net::HeadFields& fields, size_t i) {
  return fields.id(i) == http::field::unknown && beast::iequals(fields.name(i), "X-Session-ID");
}

// X-Session-ID: exactly one field of 1..256 bytes names the session; several, an empty or a
// longer one is invalid (ignored, counted). Without one, the body's user field (prepare) stands.
void read_session_header(const net::HeadFields& fields, SessionId& session) {
  std::optional<std::string_view> value;
  bool several = false;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (!is_session_header(fields, i)) continue;
    several = several || value.has_value();
    value = fields.value(i);
  }
  if (!value) return;
  if (several || value->empty() || value->size() > kMaxSessionBytes) {
    session.source = SessionSource::kInvalid;
    session.value.clear();
    return;
  }
  session.source = SessionSource::kHeader;
  session.value.assign(*value);
}

// A client's API key (Authorization, x-api-key): ramjet's own business when it checks keys.
bool client_credential(const net::HeadFields& fields, size_t i) {
  const http::field id = fields.id(i);
  return id == http::field::authorization ||
         (id == http::field::unknown && beast::iequals(fields.name(i), "x-api-key"));
}

}  // namespace

// Prepares the exchange's body (parse, shims, facts) into s.prep and counts it. The body's lease
// holds it twice (its bytes, and the copies of escaped strings its parse may make, at most its
// size again); a parse whose document grows past 2 MiB holds that too, in RJ_MAX_BUFFERED_BYTES,
// while it runs.
void Proxy::prepare_exchange(Session& s, Exchange& x) {
  PreparedRequest& prep = s.prep;
  uint64_t refused_bytes = 0;  // a refused body's (prep.body may not hold it)
  if (is_inference(x.endpoint)) {
    struct Lease final : ParseMemory {
      BodyBudget::Lease& lease;
      BodyBudget& budget;
      uint64_t body;
      Lease(BodyBudget::Lease& l, BodyBudget& b, uint64_t n) : lease(l), budget(b), body(n) {}
      bool grow_to(uint64_t parse_bytes) override { return lease.grow_to(budget, 2 * body + parse_bytes); }
    } memory(s.body_lease, budget_, s.body.size());
    const uint64_t held = s.body_lease.bytes();
    const uint64_t size = s.body.size();
    // The previous request's fingerprint chain lends its storage to this one's.
    prep = prepare(x.endpoint, std::move(s.body), config_.prepare, &memory, std::move(prep.fingerprints.chain));
    s.body_lease.shrink_to(held);
    if (prep.parse_refused != ParseRefusal::kNone) refused_bytes = size;  // (answered 413 / 503 by forward())
    if (prep.malformed_json) metrics_.malformed_json[ep_index(x.endpoint)].inc();
    if (prep.shims.max_tokens_stripped) metrics_.shim_rewrites[0].inc();
    if (prep.shims.max_completion_tokens_stripped) metrics_.shim_rewrites[1].inc();
    if (prep.shims.contents_flattened) metrics_.shim_rewrites[2].inc(prep.shims.contents_flattened);
    if (prep.shims.reasoning_effort_dropped) metrics_.shim_rewrites[3].inc();
  } else {
    prep = PreparedRequest{};
    prep.endpoint = x.endpoint;
    prep.body = std::move(s.body);
  }
  x.stream_kind = stream_kind_of(prep);
  metrics_.request_body_bytes.inc(refused_bytes > 0 ? refused_bytes : prep.body.size());
  s.owned.reset();
  s.owned_for = request::BodyEdit::kNone;
}

// The upstream request head for engine `u`: hop-by-hop headers, inbound X-Ramjet-Upstream,
// X-Session-ID (ramjet's own routing input, as the reference strips it), X-Data-Parallel-Rank and
// Expect are not forwarded; Host, Content-Length and (for a vLLM slot that is one data-parallel
// rank) X-Data-Parallel-Rank are set here. With client API keys on, the
// client's Authorization and x-api-key stay here too, and RJ_UPSTREAM_TOKEN (if any) goes instead.
size_t Proxy::build_request_head(Session& s, const config::UpstreamUrl& url, std::optional<uint32_t> header_rank,
                                 size_t body_size) {
  const net::RequestHead& req = s.req;
  net::HeadBuffer& out = s.out;
  out.clear();
  out.append(req.method_string);
  out.push_back(' ');
  out.append(url.base_path);
  out.append(req.target);
  out.append(" HTTP/1.1\r\n");
  const net::HopByHop hop(req.fields, kRouteHeader);
  size_t fields = 1;  // Host
  const bool own_keys = config_.api_keys != nullptr;
  for (size_t i = 0; i < req.fields.size(); ++i) {
    if (hop.drop(req.fields, i) || req.fields.id(i) == http::field::expect || is_session_header(req.fields, i) ||
        is_rank_header(req.fields, i)) {
      continue;
    }
    if (own_keys && client_credential(req.fields, i)) continue;
    net::append_field(out, req.fields.name(i), req.fields.value(i));
    ++fields;
  }
  out.append("Host: ");
  url.append_host_header(out);
  out.append("\r\n");
  fields += append_rank_header(out, header_rank);  // (a client's was dropped above)
  if (own_keys && s.authenticated && !config_.upstream_authorization.empty()) {
    net::append_field(out, "Authorization", config_.upstream_authorization);
    ++fields;
  }
  if (body_size != 0 || req.method == http::verb::post || req.method == http::verb::put ||
      req.method == http::verb::patch) {
    out.append("Content-Length: ");
    net::append_decimal(out, body_size);
    out.append("\r\n");
    ++fields;
  }
  out.append("\r\n");
  return fields;
}

// Whether the head forwarded to the engines stays within what they accept. Skipped when the
// client-side limit already guarantees it (the forwarded head is the client's, less hop-by-hop
// fields, plus a base path, Host and Content-Length).
bool Proxy::upstream_head_fits(Session& s) {
  // Host, Content-Length, X-Data-Parallel-Rank, Authorization
  const size_t added = config_.upstream_authorization.empty() ? 3 : 4;
  const bool count_ok = s.req.fields.size() + added <= config_.upstream_max_header_count;
  const size_t extra = max_host_header_ + 32 + config_.upstream_authorization.size();  // + rank, RJ_UPSTREAM_TOKEN
  if (count_ok && config_.max_header_bytes + extra + 1024 <= config_.upstream_max_header_bytes) return true;
  // Host "" and no base path; a body longer by an SGLang rank member has a Content-Length as long.
  const size_t fields = build_request_head(s, config::UpstreamUrl{}, 0u, s.prep.body.size() + 32);
  const uint64_t bytes = s.out.size() + max_host_header_ + 10;  // (a rank of up to 10 digits)
  return fields <= config_.upstream_max_header_count && bytes <= config_.upstream_max_header_bytes;
}

// Prepare, route, then the candidates in decision order: each gets the request until one
// answers, with at most one retry after a failure past the point where the request was sent.
asio::awaitable<void> Proxy::forward(Session& s, Exchange& x) {
  metrics_.inflight.add(1);
  struct Inflight {
    metrics::Gauge& g;
    ~Inflight() { g.sub(1); }
  } inflight{metrics_.inflight};

  // Parse once: only inference endpoints are parsed, and only here.
  prepare_exchange(s, x);
  // The body's allocation goes back to the session for the next request.
  struct GiveBack {
    Session& s;
    ~GiveBack() { s.body = std::move(s.prep.body); }
  } give_back{s};

  if (s.prep.parse_refused == ParseRefusal::kTooDense) {
    metrics_.rejections[static_cast<size_t>(Rejection::kJsonTooDense)].inc();
    co_await send_error(s, x, 413, "request body too large: too many JSON values for its size", "invalid_request_error");
    co_return;
  }
  if (s.prep.parse_refused == ParseRefusal::kMemory) {
    metrics_.rejections[static_cast<size_t>(Rejection::kBufferFull)].inc();
    co_await send_error(s, x, 503, kBusyMessage, "server_busy", kRetryAfter);
    co_return;
  }

  if (!upstream_head_fits(s)) {  // the engines would refuse it (a dropped connection or a 400)
    metrics_.rejections[static_cast<size_t>(Rejection::kUpstreamHeaderTooLarge)].inc();
    co_await send_error(s, x, 431, "request header fields too large for the engines (RJ_UPSTREAM_MAX_HEADER_BYTES, "
                        "RJ_UPSTREAM_MAX_HEADER_COUNT)", "invalid_request_error");
    co_return;
  }

  s.pools.reset();
  s.pool = {};
  if (config_.models != nullptr) {
    if (x.endpoint == Endpoint::kModels && co_await answer_models(s, x)) co_return;
    if (is_inference(x.endpoint)) {
      if (const std::optional<Rejection> why = pick_pool(s)) {
        co_await refuse_model(s, x, *why);
        co_return;
      }
    }
  }
  if (is_inference(x.endpoint)) {
    // A LoRA adapter's or a salted request's prompt is cached apart from everyone else's (vLLM
    // hashes both into its blocks): its fingerprints credit its own namespace's history only.
    const std::string_view adapter = s.adapter();
    if (!adapter.empty() || !s.prep.cache_salt.empty()) [[unlikely]] {
      request::namespace_fingerprints(s.prep.fingerprints, adapter, s.prep.cache_salt);
    }
  }
  read_session_header(s.req.fields, s.prep.session);
  // The waiting room: a request whose pool has no engine with room waits; once admitted, it is
  // placed among the engines with room. Whatever ends the request frees its room for the next.
  struct Freed {
    Session& s;
    const ProxyConfig::AdmissionConfig& config;
    Admission* room;
    ~Freed() {
      if (room == nullptr) return;
      s.admission.release();  // (answered without a dispatch: its place was never counted)
      if (!s.share_client.empty()) {  // its client's share of the pool is free again
        config.shares->remove(s.share_pool, s.share_client);
        s.share_client.clear();
      }
      unwatch_client(*s.watch);  // the room watched the client from admission on
      room->notify();
    }
  } freed{s, config_.admission, nullptr};
  const upstream::EngineSet* candidates = s.pool.engines;
  admission_class(s);
  x.batch = s.cls == AdmissionClass::kBatch;
  if (config_.admission.room != nullptr && is_inference(x.endpoint)) {
    freed.room = config_.admission.room;
    if (!co_await admit(s, x)) co_return;
    if (!s.room.empty()) candidates = &s.room;
  }
  // Prefill/decode disaggregation: the request is placed among the engines that decode; its
  // prefill leg (if any) among those that prefill, below.
  const bool disagg = config_.disagg.enabled && is_inference(x.endpoint);
  if (disagg) candidates = role_pools(s, candidates);
  if (config_.exact.enabled && x.endpoint != Endpoint::kModels) co_await fetch_exact_tokens(s);
  // A LoRA adapter request prefers engines where its adapter is active (route/adapter_board.h).
  router_.decide(s.prep, candidates, s.pool.rotation, s.adapter(), s.routed);
  const route::Routed& routed = s.routed;
  x.prep = &s.prep;
  // Observers hear how the exchange ended however it ends, while the body is still in s.prep.
  struct Finished {
    Proxy& p;
    Exchange& x;
    ~Finished() {
      if (x.end_ns == 0) x.end_ns = p.clock_.now_ns();  // (a complete relay set it: settle_relay)
      p.notify<kFinished>(&ExchangeObserver::finished, x);
    }
  } finished{*this, x};
  decided(x, routed);

  // The candidates, in the decision's order (in this frame: a nested coroutine per request costs
  // more than these lines).
  const route::Decision& d = routed.decision;
  // (Every candidate eligible, the usual case: the order is the ranking itself, no copy.)
  std::vector<route::CandidateTerms> filtered;
  const bool all_eligible = !d.fail_open && std::all_of(d.ranked.begin(), d.ranked.end(),
                                                         [](const route::CandidateTerms& c) { return c.eligible; });
  if (!all_eligible) filtered = d.dispatch_order();
  const std::span<const route::CandidateTerms> order =
      all_eligible ? std::span<const route::CandidateTerms>(d.ranked.data(), d.ranked.size()) : filtered;
  x.incarnations.clear();
  for (const route::CandidateTerms& c : order) x.incarnations.push_back(fleet_.roster().incarnation(c.ordinal));
  if (order.empty()) {
    x.result = "no_upstream";
    co_await send_error(s, x, 503, "upstream unavailable", "no_healthy_upstream");
    co_return;
  }
  ClientWatch& watch = *s.watch;
  if (!watch.active) watch_client(s.watch);  // (the waiting room watches already)
  struct StopWatch {
    ClientWatch& w;
    ~StopWatch() { unwatch_client(w); }
  } stop_watch{watch};
  if (disagg && !co_await disaggregate(s, x, routed)) co_return;
  for (size_t k = 0; k < order.size() && !watch.gone; ++k) {
    // Fenced or ejected since the decision (fail-open dispatches go to unhealthy ones anyway).
    if (!d.fail_open && !fleet_.at(order[k].ordinal).healthy()) continue;
    if (co_await dispatch(s, x, routed, order, k) == Step::kDone) co_return;
  }
  if (watch.gone) {
    x.result = "client_disconnect";
    metrics_.client_disconnects[ep_index(x.endpoint)].inc();
    metrics_.count_request(x.endpoint, x.stream_kind, 499);
    s.close_after = true;
    co_return;
  }
  settle_first_failure(x);  // no engine was left for the retry: the failure stays the engine's
  const bool timeout = x.last_error == UpstreamError::kTimeout;
  co_await send_error(s, x, timeout ? 504 : 502, "upstream unavailable", timeout ? "upstream_timeout" : "upstream_error");
}

std::optional<Rejection> Proxy::pick_pool(Session& s) {
  const PreparedRequest& prep = s.prep;
  if (prep.model_field == ModelField::kBad) return Rejection::kBadModel;
  s.pools = config_.models->pools();
  s.pool = s.pools->pick(prep.model_field == ModelField::kName ? std::optional<std::string_view>(prep.model)
                                                              : std::nullopt);
  switch (s.pool.verdict) {
    case upstream::ModelPools::Verdict::kAmbiguous:
      return Rejection::kModelRequired;
    case upstream::ModelPools::Verdict::kUnknown:
      return Rejection::kUnknownModel;
    case upstream::ModelPools::Verdict::kServed:
      config_.models->count_request(s.pool.model->label);
      break;
    case upstream::ModelPools::Verdict::kUnlisted:
    case upstream::ModelPools::Verdict::kAny:
      break;
  }
  return std::nullopt;
}

namespace {
// A client's first-token target for the waiting room's order (request/admission/fair_queue.h).
constexpr std::string_view kTtftTargetHeader = "X-TTFT-Target-Ms";
}  // namespace

uint64_t Proxy::engine_room(size_t i, int64_t now_ms, uint32_t extra) const {
  const auto& a = config_.admission;
  const upstream::Engine& e = fleet_.at(i);
  if (!e.member() || !e.healthy()) return 0;
  if (a.engine_max_waiting > 0) {  // the engine's own queue, freshly read (stale: saturated)
    const std::optional<int64_t> waiting = a.engine_load ? a.engine_load->waiting(i, now_ms) : std::nullopt;
    if (!waiting || *waiting >= int64_t{a.engine_max_waiting}) return 0;
  }
  if (a.engine_max_kv_usage > 0) {  // its KV cache, freshly read (stale or unreported: saturated)
    const std::optional<double> kv = a.engine_load ? a.engine_load->kv_usage(i, now_ms) : std::nullopt;
    if (!kv || *kv >= a.engine_max_kv_usage) return 0;
  }
  if (a.engine_max_inflight == 0) return uint64_t{1} << 20;
  const int64_t cap = int64_t{a.engine_max_inflight} + extra;
  const int64_t in = e.inflight();
  return in < cap ? static_cast<uint64_t>(cap - in) : 0;
}

uint64_t Proxy::pool_room(const upstream::EngineSet* pool, upstream::EngineSet* with_room, uint32_t extra) const {
  const int64_t now = config_.admission.engine_load ? config_.admission.engine_load->now_ms() : 0;
  uint64_t free = 0;
  for (size_t i = 0; i < fleet_.size(); ++i) {
    if (pool != nullptr && !pool->has(i)) continue;
    const uint64_t room = engine_room(i, now, extra);
    free += room;
    if (room > 0 && with_room != nullptr) with_room->add(i);
  }
  return free;
}

bool Proxy::parked_pool_coming(const upstream::EngineSet* pool) const {
  upstream::EngineParking* parking = config_.parking;
  if (parking == nullptr) return false;
  parking->want(pool);  // scale from zero: wake one of them now (one that failed to, after its cooldown)
  for (size_t i = 0; i < fleet_.size(); ++i)
    if ((pool == nullptr || pool->has(i)) && parking->coming(i)) return true;
  return false;
}

void Proxy::admission_class(Session& s) {
  const auto& a = config_.admission;
  const bool batch_key =
      !s.key_name.empty() && std::find(a.batch_keys.begin(), a.batch_keys.end(), s.key_name) != a.batch_keys.end();
  s.cls = batch_key ? AdmissionClass::kBatch : AdmissionClass::kInteractive;
  if (a.priority_header.empty()) return;
  // The operator lets clients say which class they are (interactive is the default; a batch key
  // stays batch). What is not followed is counted.
  const std::optional<std::string_view> said = s.req.fields.find(a.priority_header);
  if (!said) return;
  if (boost::beast::iequals(*said, "batch")) {
    s.cls = AdmissionClass::kBatch;
  } else if (!boost::beast::iequals(*said, "interactive")) {
    metrics_.priority_ignored[1].inc();
  } else if (batch_key) {
    metrics_.priority_ignored[0].inc();
  }
}

asio::awaitable<bool> Proxy::admit(Session& s, Exchange& x) {
  const auto& a = config_.admission;
  s.room = {};
  const upstream::EngineSet* pool = s.pool.engines;
  // No engine of the pool in service: nothing to wait for (the router fails open, or 503) —
  // unless one is parked and coming back: the idle drain wakes it now and the request waits.
  // (Burst slots need every engine in service counted: the pool's regular slots are shared out.)
  const bool burst = a.engine_burst > 0 && a.engine_max_inflight > 0 && a.shares != nullptr;
  uint64_t in_service = 0;
  for (size_t i = 0; i < fleet_.size() && (burst || in_service == 0); ++i)
    in_service += (pool == nullptr || pool->has(i)) && fleet_.at(i).healthy();
  const bool any = in_service > 0;
  const bool waking = !any && parked_pool_coming(pool);
  if (!any && !waking) co_return true;
  Admission::Request r;
  r.pool = s.pool.model != nullptr ? s.pool.model->base : std::string();  // (an adapter waits with its model)
  r.cls = s.cls;
  if (!s.key_name.empty()) {
    r.client = "key:" + s.key_name;
    r.label = s.key_name;
  } else {
    boost::system::error_code ec;
    const auto peer = s.client.socket().remote_endpoint(ec);
    r.client = ec ? std::string("?") : "addr:" + peer.address().to_string();
  }
  // A TTFT target (X-TTFT-Target-Ms: 1 .. 3,600,000) orders the client's own waiting requests.
  if (const std::optional<std::string_view> v = s.req.fields.find(kTtftTargetHeader)) {
    uint64_t ms = 0;
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), ms);
    if (ec != std::errc() || end != v->data() + v->size() || ms == 0 || ms > 3600000) {
      metrics_.rejections[static_cast<size_t>(Rejection::kBadRequest)].inc();
      co_await send_error(s, x, 400, "X-TTFT-Target-Ms must be a whole number of milliseconds from 1 to 3600000",
                          "invalid_request_error");
      co_return false;
    }
    r.deadline_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now().time_since_epoch()).count() + static_cast<int64_t>(ms);
  }
  // Tokens, roughly: four body bytes a prompt token, plus the output asked for (or 256).
  r.cost = s.prep.body.size() / 4 + s.prep.max_output_tokens.value_or(256);
  r.bytes = s.prep.body.size();
  auto room = [this, pools = s.pools, pool] { return pool_room(pool, nullptr); };
  // Burst slots for a client under its fair share of the pool's regular slots.
  const std::string share_pool = r.pool, share_client = r.client;
  if (burst) {
    // Held from here to the request's end (Freed), waiting or not.
    s.share_pool = share_pool;
    s.share_client = share_client;
    if (a.shares->enter(share_pool, share_client, in_service * a.engine_max_inflight))
      r.burst = [this, pools = s.pools, pool, b = a.engine_burst] { return pool_room(pool, nullptr, b); };
  }
  watch_client(s.watch);
  auto op = a.room->admit(std::move(r), std::move(room), s.watch->gone, s.admission);
  const AdmissionOutcome outcome = co_await std::move(op);
  switch (outcome) {
    case AdmissionOutcome::kImmediate:
    case AdmissionOutcome::kAdmitted:
    case AdmissionOutcome::kBurst: {
      if (outcome == AdmissionOutcome::kAdmitted) {
        x.queued_ns = s.admission.waited_ns();
        x.waited_for_wake = waking;
      }
      pool_room(pool, &s.room, outcome == AdmissionOutcome::kBurst ? a.engine_burst : 0);
      co_return true;
    }
    case AdmissionOutcome::kClientGone:
      x.result = "client_disconnect";
      metrics_.client_disconnects[ep_index(x.endpoint)].inc();
      metrics_.count_request(x.endpoint, x.stream_kind, 499);
      s.close_after = true;
      co_return false;
    default: {
      x.result = "overloaded";
      metrics_.rejections[static_cast<size_t>(Rejection::kOverloaded)].inc();
      const std::string retry = "Retry-After: " + std::to_string(a.room->retry_after_s());
      co_await send_error(s, x, 429,
                          outcome == AdmissionOutcome::kShedFull
                              ? "the engines are saturated and ramjet's waiting room is full: retry later"
                          : waking ? "no engine of this model woke up (idle parking) for as long as ramjet lets a "
                                     "request wait: retry later"
                                   : "the engines stayed saturated for as long as ramjet lets a request wait: retry later",
                          "rate_limit_exceeded", retry);
      co_return false;
    }
  }
}

asio::awaitable<void> Proxy::refuse_model(Session& s, Exchange& x, Rejection why) {
  metrics_.rejections[static_cast<size_t>(why)].inc();
  if (why == Rejection::kUnknownModel) {
    // As vLLM words it; the name is the client's own, echoed to it alone (never logged).
    const std::string message = "The model `" + s.prep.model + "` does not exist.";
    const std::string body = x.endpoint == Endpoint::kMessages ? anthropic_error_json(message, 404)
                                                               : error_json(message, "NotFoundError", 404, "model");
    co_await send_local(s, x, 404, "application/json", body);
    co_return;
  }
  co_await send_error(s, x, 400,
                      why == Rejection::kBadModel ? "model must be a non-empty string of at most 1024 bytes"
                                                  : "model is required: the engines behind this server serve several models",
                      "BadRequestError");
}

asio::awaitable<bool> Proxy::answer_models(Session& s, Exchange& x) {
  std::optional<std::string> body = config_.models->pools()->models_json();
  if (!body) co_return false;
  if (auto rewritten = rewrite_models_context(*body, config_.advertise_ctx_margin)) body = std::move(*rewritten);
  co_await send_local(s, x, 200, "application/json", *body);
  co_return true;
}

void Proxy::decided(Exchange& x, const route::Routed& routed) {
  x.routed = &routed;
  notify<kDecided>(&ExchangeObserver::decided, x);
}

bool Proxy::more_candidates(const route::Decision& d, std::span<const route::CandidateTerms> order,
                            size_t k) const {
  for (size_t j = k + 1; j < order.size(); ++j) {
    if (d.fail_open || fleet_.at(order[j].ordinal).healthy()) return true;
  }
  return false;
}

// One candidate: reserve its load, get a connection (a pooled one that turns out stale is
// replaced by a fresh one once), send, read the head, then relay. kNext: try the next candidate.
asio::awaitable<Proxy::Step> Proxy::dispatch(Session& s, Exchange& x, const route::Routed& routed,
                                             std::span<const route::CandidateTerms> order, size_t k) {
  const route::CandidateTerms& c = order[k];
  const size_t u = c.ordinal;
  const size_t ep = ep_index(x.endpoint);
  const route::Decision& d = routed.decision;
  upstream::Engine& engine = fleet_.at(u);
  ClientWatch& watch = *s.watch;
  if (d.fail_open) metrics_.fail_open_dispatches[u].inc();
  route::LoadReservation reservation(engine, c.request_load_units);
  s.admission.release();  // the engine's in-flight count holds the request now
  // The engine in slot u now. It cannot leave the slot while this reservation holds it
  // (upstream/membership.h vacates only idle slots), but it may have left since the decision
  // (and another engine taken the slot): then it is not dispatched to.
  const std::shared_ptr<const net::Member> member = fleet_.member(u);
  if (!member || (k < x.incarnations.size() && member->incarnation != x.incarnations[k])) {
    x.last_error = UpstreamError::kConnect;  // not the engine the decision chose: another candidate
    co_return Step::kNext;
  }
  x.upstream = u;
  x.units = c.request_load_units;
  x.engine_done = false;
  x.dispatch_ns = clock_.now_ns();
  notify<kDispatched>(&ExchangeObserver::dispatched, x, u);
  // However this attempt ends short of a complete response, observers hear of it.
  struct AttemptEnd {
    Proxy& p;
    Exchange& x;
    size_t u;
    ~AttemptEnd() {
      if (!x.engine_done) p.notify<kFailed>(&ExchangeObserver::failed, x, u);
    }
  } attempt_end{*this, x, u};
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (watch.gone) co_return Step::kNext;
    // A decode leg's transfer parameters are single use (start_exchange): a connection the
    // engine closed would cost the prefill, where the pool's question costs a system call.
    net::ConnectionPtr conn =
        attempt == 0 ? pools_.at(s.thread, u).take(x.dispatch_ns / 1'000'000, member->incarnation,
                                                   /*ask=*/!s.kv_params.empty())
                     : nullptr;
    if (!conn) {
      conn = co_await connect_engine(s, x, u, *member);
      if (!conn) co_return Step::kNext;
    }
    watch.upstream = conn.get();
    // Write the request and read the response head, under the first-byte deadline (in this frame:
    // a nested coroutine per request costs more than these lines). Listed as waiting on u
    // meanwhile: a fence of u closes the connection and says so.
    HeadResult h = HeadResult::kOk;
    {
      set_waiting(s, u);
      struct NotWaiting {
        Proxy& p;
        Session& s;
        ~NotWaiting() { p.set_waiting(s, Session::kNotWaiting); }
      } not_waiting{*this, s};
      boost::system::error_code ec, write_ec;
      start_exchange(s, x, *conn, *member, write_ec);
      // A failing probe moves a long wait only for a streamed response (a stream:false head comes
      // after the whole generation) and only where another engine can take it; a fence moves any
      // wait, again only where another engine can take it (the last one waits for
      // RJ_UPSTREAM_FIRST_BYTE_TIMEOUT_MS, not a 502: an engine hung for a while may still answer).
      const bool movable = more_candidates(d, order, k);
      s.fence_moves = movable;
      if (s.prep.stream.value_or(false) && movable)
        s.unresponsive_after = std::chrono::steady_clock::now() + first_byte_budget(s.prep.body.size());
      if (!s.out_buffers.empty() && !write_ec) {
        arm_upstream(*conn, x);  // an engine that stops reading the body counts as silent
        write_ec = std::get<0>(co_await asio::async_write(conn->stream, s.out_buffers.rest(), net::awaited));
      }
      // An engine may answer before it has read the whole request (413, 400) and close: its
      // answer is still read and relayed, but the connection is not reused (the request was cut).
      x.request_cut = static_cast<bool>(write_ec);
      if (write_ec && !closed_early(write_ec)) ec = write_ec;
      net::ResponseParser& head_parser = *s.parser;
      while (!ec) {
        parse_buffered(*conn, head_parser, ec);
        if (ec || head_parser.is_header_done()) break;
        arm_upstream(*conn, x);
        auto [read_ec, n] =
            co_await conn->stream.async_read_some(conn->buffer.prepare(beast::read_size(conn->buffer, kReadMax)), net::awaited);
        ec = read_ec;
        if (ec) {
          head_parser.read_error(ec);
          if (!ec) ec = http::error::partial_message;  // the head cannot end at EOF
          break;
        }
        conn->buffer.commit(n);
      }
      if (ec) {
        // No answer: the write says what happened, unless the read found a TLS alert (a TLS 1.3
        // engine refusing our client certificate resets the write of a large request).
        const bool tls_alert = conn->stream.tls_error(ec);
        h = head_failure(s, *conn, write_ec && !tls_alert ? write_ec : ec);
      }
    }
    if (h == HeadResult::kStale && attempt == 0) {  // closed by the engine while idle
      metrics_.stale_retries[ep].inc();
      continue;
    }
    if (h != HeadResult::kOk) {
      watch.upstream = nullptr;
      switch (h) {
        case HeadResult::kClientGone: co_return Step::kNext;
        case HeadResult::kFenced:
          metrics_.upstream_errors[ep][static_cast<size_t>(UpstreamError::kFenced)].inc();
          co_return Step::kNext;
        case HeadResult::kUnresponsive:  // nothing reached the client: the next engine gets it
          x.last_error = UpstreamError::kUnresponsive;
          metrics_.upstream_errors[ep][static_cast<size_t>(x.last_error)].inc();
          co_return Step::kNext;
        case HeadResult::kTls:
          tls_refused(x, u, *member);
          co_return Step::kNext;
        case HeadResult::kTimeout:
          x.result = "upstream_timeout";
          metrics_.timeouts[ep][static_cast<size_t>(Timeout::kFirstByte)].inc();
          settle_first_failure(x);
          fleet_.on_failure(u, upstream::Failure::kTimeout);
          co_await send_error(s, x, 504, "the engine sent no response within RJ_UPSTREAM_FIRST_BYTE_TIMEOUT_MS",
                              "upstream_timeout");
          co_return Step::kDone;
        default: co_return co_await on_sent_failure(s, x, u, h, more_candidates(d, order, k));
      }
    }

    const unsigned status = s.res.status;
    metrics_.count_upstream_response(u, status);
    x.head_ns = clock_.now_ns();
    const bool retryable = status == 502 || status == 503;
    const Blame how = status == 502 ? Blame::kStatus502 : Blame::kStatus503;
    if (retryable && !x.first_failure && more_candidates(d, order, k)) {
      watch.upstream = nullptr;
      x.last_error = UpstreamError::kRetryableStatus;
      metrics_.upstream_errors[ep][static_cast<size_t>(x.last_error)].inc();
      x.first_failure = SentFailure{u, upstream::Failure::kStatus5xx, how};
      co_return Step::kNext;  // conn closes with its scope; the next candidate gets the request
    }
    if (retryable && x.first_failure && x.first_failure->how == how) {
      // Two engines answered this request the same way: it is the request's, not theirs. The
      // last answer passes through as it is.
      metrics_.blamed[ep][static_cast<size_t>(how)].inc();
      x.first_failure.reset();
    } else {
      settle_first_failure(x);  // another engine did better: the first failure was its engine's
      fleet_.on_response(u, status);
    }

    net::ResponseParser& parser = *s.parser;
    Attempt a{*conn, parser, engine, watch, s.prep, reservation};
    const RelayResult r = x.endpoint == Endpoint::kModels && status == 200 ? co_await relay_models(s, x, a)
                                                                           : co_await relay_body(s, x, a);
    if (const ErrorEnding e = settle_relay(s, x, a, r); e.status != 0) {
      co_await end_with_error(s, x, e.status, e.message, e.type);
    }
    if (r == RelayResult::kComplete && parser.keep_alive() && parser.is_done() && !x.request_cut) {
      conn->deadline.disarm();
      pools_.at(s.thread, u).put(std::move(conn), x.end_ns / 1'000'000);  // (settle_relay's time)
    }
    co_return Step::kDone;
  }
  co_return Step::kNext;
}

// Starts an exchange on `conn` (engine u): arms the first-byte deadline, serialises the head and
// writes what the socket takes now; the rest (if any) stays in s.out_buffers. A fresh parser
// waits for the response head.
void Proxy::start_exchange(Session& s, Exchange& x, net::UpstreamConnection& conn, const net::Member& member,
                           boost::system::error_code& write_ec) {
  s.engine_fenced = false;
  s.engine_unresponsive = false;
  s.fence_moves = true;  // dispatch() says whether another engine could take it
  s.unresponsive_after = std::chrono::steady_clock::time_point::max();  // dispatch() sets it
  x.body_started = false;
  x.first_byte_deadline = first_byte_deadline();
  const request::BodyEdit edit = body_edit(x, member);
  const bool sglang = member.engine == config::EngineKind::kSglang;
  std::optional<int64_t> value;
  if (edit == request::BodyEdit::kSglangRank && member.dp_rank) value = *member.dp_rank;
  if (edit == request::BodyEdit::kVllmPriority) value = s.cls == AdmissionClass::kBatch ? 1 : 0;
  if (edit == request::BodyEdit::kDecodeLeg && config_.admission.engine_priority && x.endpoint != Endpoint::kMessages)
    value = s.cls == AdmissionClass::kBatch ? 1 : 0;
  // A retried decode leg: the transfer parameters went out once (single use: the producer frees
  // its blocks once a decode engine pulled or refused them), so this attempt is served whole.
  if (edit == request::BodyEdit::kDecodeLeg && s.kv_params_sent) x.prefill_routed = nullptr;
  const size_t body_size =
      edit != request::BodyEdit::kNone ? edited_body_size(s, edit, value) : s.prep.body.size();
  if (edit == request::BodyEdit::kDecodeLeg && !s.kv_params.empty()) {
    s.kv_params.clear();  // (its copy is in s.owned_member, which this attempt sends)
    s.kv_params_sent = true;
  }
  build_request_head(s, member.url, sglang ? std::nullopt : member.dp_rank, body_size);
  OutBuffers& out = s.out_buffers;
  out.clear();
  out.add(s.out);
  if (edit != request::BodyEdit::kNone) {
    add_edited_body(s);
  } else {
    out.add(s.prep.body);
  }
  out.send_now(conn.stream, write_ec);
  net::ResponseParser& parser = s.parser.emplace(s.res);
  parser.body_limit(boost::none);
  parser.header_limit(256 * 1024);
  if (s.req.method == http::verb::head) parser.skip(true);
}

request::BodyEdit Proxy::body_edit(const Exchange& x, const net::Member& member) const {
  if (member.engine == config::EngineKind::kSglang) return request::BodyEdit::kSglangRank;
  // A disaggregated fleet's decode leg, or a request it serves whole: ramjet's transfer parameters
  // (or none) instead of the client's.
  if (config_.disagg.enabled && is_inference(x.endpoint)) return request::BodyEdit::kDecodeLeg;
  // (vLLM reads "priority" on these three; its Messages endpoint has none.)
  const bool priority_api =
      x.endpoint == Endpoint::kChat || x.endpoint == Endpoint::kCompletions || x.endpoint == Endpoint::kResponses;
  if (config_.admission.engine_priority && priority_api) return request::BodyEdit::kVllmPriority;
  return request::BodyEdit::kNone;
}

size_t Proxy::edited_body_size(Session& s, request::BodyEdit edit, std::optional<int64_t> value) {
  const bool leg = edit == request::BodyEdit::kPrefillLeg || edit == request::BodyEdit::kDecodeLeg;
  if (!s.owned || s.owned_for != edit) {
    s.owned = find_owned_members(s.prep.body, request::owned_names(edit, leg && value.has_value()),
                                 config_.prepare.limits.max_json_depth);
    s.owned_for = edit;
  }
  if (leg) {
    s.owned_member = edit == request::BodyEdit::kPrefillLeg ? prefill_leg_members(s.prep.endpoint, value)
                                                            : decode_leg_members(s.kv_params, value);
    if (!s.owned->object) s.owned_member.clear();
    if (!s.owned_member.empty() && s.owned->members_left) s.owned_member.push_back(',');
  } else {
    owned_member(s.owned_member, edit, value, *s.owned);
  }
  return request::edited_body_size(s.prep.body, *s.owned, s.owned_member);
}

void Proxy::add_edited_body(Session& s) {
  OutBuffers& out = s.out_buffers;
  const OwnedMembers& f = *s.owned;
  if (1 + edited_body_pieces(f) <= OutBuffers::kMax) {  // the head, then the pieces
    edited_body(s.prep.body, f, s.owned_member, [&](std::string_view piece) { out.add(piece); });
    return;
  }
  // A client that sent the owned members between many others: one copy instead.
  s.owned_body.clear();
  edited_body(s.prep.body, f, s.owned_member, [&](std::string_view piece) { s.owned_body.append(piece); });
  out.add(s.owned_body);
}

// What a failed head exchange means. `ec` is the read's error (or the write's, when the engine
// sent no answer to a request it stopped taking).
Proxy::HeadResult Proxy::head_failure(Session& s, const net::UpstreamConnection& conn,
                                      const boost::system::error_code& ec) const {
  if (s.watch->gone) return HeadResult::kClientGone;
  if (s.engine_fenced) return HeadResult::kFenced;
  if (s.engine_unresponsive) return HeadResult::kUnresponsive;
  if (conn.deadline.expired()) return HeadResult::kTimeout;
  const bool closed = closed_early(ec);
  if (closed && conn.reused && !s.parser->got_some()) return HeadResult::kStale;
  // (A fresh connection only: a pooled one was past its handshake and served before.)
  if (conn.stream.tls_error(ec) && !conn.reused && !s.parser->got_some()) {
    return HeadResult::kTls;
  }
  return closed ? HeadResult::kDropped : HeadResult::kBadResponse;
}

// The request was sent and the engine closed the connection or answered with something that is
// not HTTP. The first such failure is held and the request retried on another engine; the second
// decides: the same failure again blames the request (no engine counts it), another one blames
// both engines.
asio::awaitable<Proxy::Step> Proxy::on_sent_failure(Session& s, Exchange& x, size_t u, HeadResult why, bool more) {
  const bool garbled = why == HeadResult::kBadResponse;
  const Blame how = garbled ? Blame::kBadResponse : Blame::kDropped;
  const upstream::Failure failure = garbled ? upstream::Failure::kBadResponse : upstream::Failure::kDropped;
  const size_t ep = ep_index(x.endpoint);
  x.last_error = UpstreamError::kProtocol;
  metrics_.upstream_errors[ep][static_cast<size_t>(x.last_error)].inc();
  if (!x.first_failure) {
    x.first_failure = SentFailure{u, failure, how};
    if (more) co_return Step::kNext;
    settle_first_failure(x);  // nowhere to retry: it stays the engine's
    co_await send_error(s, x, 502, garbled ? "the engine's response was not valid HTTP"
                                           : "the engine closed the connection without a response",
                        "upstream_error");
    co_return Step::kDone;
  }
  if (x.first_failure->how == how) {
    metrics_.blamed[ep][static_cast<size_t>(how)].inc();
    x.first_failure.reset();
    x.result = "request_rejected";
    co_await send_error(s, x, 502,
                        garbled ? "two engines answered this request with bytes that are not HTTP; the request itself "
                                  "is the likely cause (no engine was taken out of service)"
                                : "two engines closed the connection on this request without answering; the request "
                                  "itself (a header or body they refuse) is the likely cause (no engine was taken out "
                                  "of service)",
                        "upstream_rejected_request");
    co_return Step::kDone;
  }
  settle_first_failure(x);
  fleet_.on_failure(u, failure);
  co_await send_error(s, x, 502, "upstream unavailable", "upstream_error");
  co_return Step::kDone;
}

void Proxy::tls_refused(Exchange& x, size_t u, const net::Member& member) {
  // Like a failed handshake: nothing in the request caused it.
  ERR_clear_error();
  net::UpstreamTls::instance().target(member.url.host, member.url.port).count_failure(net::TlsFailure::kHandshake);
  x.last_error = UpstreamError::kConnect;
  metrics_.upstream_errors[ep_index(x.endpoint)][static_cast<size_t>(x.last_error)].inc();
  fleet_.fence(u, upstream::FenceReason::kTls);
}

void Proxy::connect_failed(Exchange& x, size_t u, net::ConnectFailure cf) {
  x.last_error = cf == net::ConnectFailure::kTimeout ? UpstreamError::kTimeout : UpstreamError::kConnect;
  metrics_.upstream_errors[ep_index(x.endpoint)][static_cast<size_t>(x.last_error)].inc();
  // Nothing a request holds can make a connection (or a TLS handshake) fail: the engine is
  // fenced at once.
  fleet_.fence(u, cf == net::ConnectFailure::kTimeout ? upstream::FenceReason::kTimeout
                  : cf == net::ConnectFailure::kTls   ? upstream::FenceReason::kTls
                                                      : upstream::FenceReason::kConnect);
}

asio::awaitable<net::ConnectionPtr> Proxy::connect_engine(Session& s, Exchange& x, size_t u, const net::Member& member) {
  ClientWatch& watch = *s.watch;
  net::ConnectFailure cf = net::ConnectFailure::kNone;
  net::ConnectionPtr conn = co_await net::connect(member.url, config_.connect_timeout, cf, &watch.upstream);
  watch.upstream = nullptr;
  if (conn) {
    conn->incarnation = member.incarnation;
  } else if (!watch.gone) {
    connect_failed(x, u, cf);
  }
  co_return conn;
}

std::chrono::steady_clock::time_point Proxy::first_byte_deadline() const {
  // (Armed as any deadline is, from the coarse clock: net::Deadline.)
  return config_.first_byte_timeout.count() > 0 ? net::Deadline::coarse_now() + config_.first_byte_timeout
                                                : std::chrono::steady_clock::time_point::max();
}

void Proxy::settle_first_failure(Exchange& x) {
  if (!x.first_failure) return;
  fleet_.on_failure(x.first_failure->engine, x.first_failure->failure);
  x.first_failure.reset();
}

void Proxy::set_waiting(Session& s, size_t engine) {
  if (s.waiting == engine) return;
  if (s.waiting != Session::kNotWaiting) Session::unlink<&Session::wait_links>(waiting_[s.thread][s.waiting], s);
  s.waiting = engine;
  if (engine != Session::kNotWaiting) Session::push<&Session::wait_links>(waiting_[s.thread][engine], s);
}

// Called by the fleet (any thread) when an engine is known not to answer (Fleet's fence
// listener): every request still waiting for its first byte that another engine could take moves
// on (nothing has reached its client yet); one with no engine left waits on under its first-byte
// deadline. Streams already relaying are left to the idle timeout.
void Proxy::on_engine_fenced(size_t u) {
  for (size_t t = 0; t < io_.size(); ++t) {
    asio::post(io_.at(t), [this, t, u] {
      for (Session* s = waiting_[t][u]; s != nullptr; s = s->wait_links.next) {
        if (!s->fence_moves) continue;
        s->engine_fenced = true;
        if (s->watch->upstream) {
          boost::system::error_code ignored;
          s->watch->upstream->stream.close(ignored);  // completions are posted: the list holds
        }
      }
    });
  }
}

// Called by the fleet (any thread) when a probe of engine u failed but the engine stays in
// service (it served moments ago: busy, or just hung). A request that has waited for u's first
// byte past its own budget moves on; the others wait on (the next failing probe looks again).
void Proxy::on_engine_unresponsive(size_t u) {
  for (size_t t = 0; t < io_.size(); ++t) {
    asio::post(io_.at(t), [this, t, u] {
      const auto now = std::chrono::steady_clock::now();
      for (Session* s = waiting_[t][u]; s != nullptr; s = s->wait_links.next) {
        if (now < s->unresponsive_after || s->engine_unresponsive) continue;
        s->engine_unresponsive = true;
        if (s->watch->upstream) {
          boost::system::error_code ignored;
          s->watch->upstream->stream.close(ignored);  // completions are posted: the list holds
        }
      }
    });
  }
}

std::chrono::milliseconds Proxy::first_byte_budget(uint64_t body_bytes) const {
  using std::chrono::milliseconds;
  milliseconds b{1000};
  if (config_.exact.budget != nullptr) b = std::max(b, 4 * config_.exact.budget->expected_prefill(body_bytes));
  if (config_.first_byte_timeout.count() > 0) b = std::min(b, config_.first_byte_timeout);
  return b;
}

}  // namespace ramjet::request
