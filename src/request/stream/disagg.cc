// Prefill/decode disaggregation (RJ_UPSTREAM_ROLE): which engines of a request's model pool take
// which leg, whether a request goes in two legs (its decode engine would compute more than
// RJ_DISAGG_MIN_UNCACHED_TOKENS of its prompt, a prefill engine is in service and not at
// RJ_DISAGG_PREFILL_MAX_INFLIGHT), and the prefill leg itself: vLLM's wire contract
// (disagg_legs.h, docs/sim.md §8.4). The decode leg is the ordinary dispatch (forward.cc) with the
// prefill answer's transfer parameters in its body.
//
// The prefill leg is placed by the router among the pool's prefill engines (their own cache and
// load: a cached prefix on a prefill engine is still a shorter prefill), holds a load reservation
// there while it runs, and is read whole (one token; not streamed). A client that leaves closes
// its connection (vLLM aborts the request and frees its blocks) and no decode leg starts. A leg
// that fails before any answer (connect, timeout, dropped, 5xx, an answer without parameters) is
// tried once more on another prefill engine, then the request is served whole by its decode engine
// (or, with RJ_DISAGG_PREFILL_FAILURE=error, answered with the failure). A 4xx answer is the
// request's own: it goes to the client as it came, and nothing is retried. A prefill leg that did
// answer is never run again.
#include <boost/asio/write.hpp>
#include <boost/beast/core/read_size.hpp>

#include "common/log.h"
#include "net/http.h"
#include "request/route/reservation.h"
#include "request/stream/disagg_legs.h"
#include "request/stream/proxy.h"
#include "request/stream/session.h"

namespace ramjet::request {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

enum LegOutcome : size_t { kLegOk, kLegFailed, kLegNoParams, kLegRefused, kLegClientGone };

bool disaggregable(Endpoint e) {
  return e == Endpoint::kChat || e == Endpoint::kCompletions || e == Endpoint::kResponses || e == Endpoint::kMessages;
}

}  // namespace

const upstream::EngineSet* Proxy::role_pools(Session& s, const upstream::EngineSet* pool) {
  s.decode_set = {};
  s.prefill_set = {};
  s.kv_params.clear();
  s.kv_params_sent = false;
  if (!disaggregable(s.prep.endpoint)) return pool;
  bool decode_in_service = false, any_prefill = false;
  for (size_t i = 0; i < fleet_.size(); ++i) {
    if (pool != nullptr && !pool->has(i)) continue;
    const std::shared_ptr<const net::Member> m = fleet_.member(i);
    if (!m) continue;
    if (m->role != config::EngineRole::kPrefill) {
      s.decode_set.add(i);
      decode_in_service = decode_in_service || fleet_.at(i).healthy();
    }
    if (m->role != config::EngineRole::kDecode) s.prefill_set.add(i);
    any_prefill = any_prefill || m->role == config::EngineRole::kPrefill;
  }
  // A pool without a prefill engine is not disaggregated (its `both` engines serve whole).
  if (!any_prefill) s.prefill_set = {};
  return decode_in_service ? &s.decode_set : pool;
}

uint64_t Proxy::uncached_estimate(const Session& s, const route::Routed& r, size_t d) const {
  const PreparedRequest& p = s.prep;
  // Prompt tokens per body byte, as learned from the engines' usage (four bytes a token until then).
  double per_byte = config_.exact.budget != nullptr ? config_.exact.budget->tokens_per_byte() : 0;
  if (per_byte <= 0) per_byte = 0.25;
  const uint64_t prompt = !p.exact.tokens.empty() ? p.exact.tokens.size()
                                                  : static_cast<uint64_t>(static_cast<double>(p.body.size()) * per_byte);
  uint64_t cached = 0;
  if (d < r.exact_tokens.size() && !(d < r.exact_stamps.size() && r.exact_stamps[d].estimated)) {
    cached = uint64_t{r.exact_tokens[d]} + (d < r.exact_provisional.size() ? r.exact_provisional[d] : 0);
  } else {
    // The fingerprint overlap: leading chunks of the canonical prompt the engine holds (or a
    // single-flight leader is prefilling there).
    for (const route::CandidateTerms& c : r.decision.ranked) {
      if (c.ordinal != d) continue;
      const uint64_t chunks = std::max(c.overlap, c.single_flight);
      cached = static_cast<uint64_t>(static_cast<double>(chunks * config_.prepare.fingerprints.chunk_bytes) * per_byte);
    }
  }
  return prompt > cached ? prompt - cached : 0;
}

asio::awaitable<bool> Proxy::disaggregate(Session& s, Exchange& x, const route::Routed& routed) {
  const ProxyConfig::DisaggConfig& cfg = config_.disagg;
  const route::CandidateTerms* d = routed.decision.first_dispatch();
  if (d == nullptr || !disaggregable(x.endpoint) || s.prefill_set.empty()) co_return true;
  x.uncached_tokens = uncached_estimate(s, routed, d->ordinal);
  if (!s.decode_set.has(d->ordinal)) {  // placed on an engine that prefills: it serves the request whole
    x.disagg = DisaggChoice::kNoDecode;
    metrics_.disagg_choices[static_cast<size_t>(x.disagg)].inc();
    co_return true;
  }
  size_t in_service = 0, busy = 0;
  for (size_t i = 0; i < fleet_.size(); ++i) {
    if (!s.prefill_set.has(i) || !fleet_.at(i).healthy()) continue;
    ++in_service;
    if (cfg.prefill_max_inflight > 0 && fleet_.at(i).inflight() >= int64_t{cfg.prefill_max_inflight}) ++busy;
  }
  DisaggChoice choice = DisaggChoice::kRemote;
  if (cfg.min_uncached_tokens > 0 && x.uncached_tokens <= cfg.min_uncached_tokens) {
    choice = DisaggChoice::kCached;
  } else if (in_service == 0) {
    choice = DisaggChoice::kNoPrefill;
  } else if (busy == in_service) {
    choice = DisaggChoice::kPrefillBusy;
  }
  if (choice == DisaggChoice::kRemote) {
    // (the prefill engine loads the adapter too)
    router_.decide(s.prep, &s.prefill_set, nullptr, s.adapter(), s.prefill_routed);
    x.prefill_routed = &s.prefill_routed;
    const route::Decision& pd = s.prefill_routed.decision;
    const std::vector<route::CandidateTerms> order = pd.dispatch_order();
    const int64_t began = clock_.now_ns();
    int tries = 0;
    for (size_t k = 0; k < order.size() && tries < 2; ++k) {
      if (!pd.fail_open && !fleet_.at(order[k].ordinal).healthy()) continue;
      ++tries;
      // A fence of this engine moves the leg on only where something can follow it: another
      // prefill engine (one more try), or the request served whole.
      bool another = false;
      for (size_t j = k + 1; j < order.size() && tries < 2 && !another; ++j) {
        another = pd.fail_open || fleet_.at(order[j].ordinal).healthy();
      }
      const LegResult r = co_await prefill_leg(s, x, order[k], cfg.fallback_aggregate || another);
      if (r == LegResult::kOk) {
        x.prefill_upstream = order[k].ordinal;
        x.prefill_ns = std::max<int64_t>(1, clock_.now_ns() - began);
        metrics_.prefill_leg_seconds.observe(static_cast<double>(x.prefill_ns) / 1e9);
        break;
      }
      if (r == LegResult::kClientGone) {
        x.result = "client_disconnect";
        metrics_.client_disconnects[ep_index(x.endpoint)].inc();
        metrics_.count_request(x.endpoint, x.stream_kind, 499);
        s.close_after = true;
        co_return false;
      }
      if (r == LegResult::kAnswered) {
        x.disagg = DisaggChoice::kRemote;
        metrics_.disagg_choices[static_cast<size_t>(x.disagg)].inc();
        co_return false;
      }
    }
    settle_first_failure(x);  // one failed leg is its engine's (two alike: the request's, settled there)
    if (!x.prefill_upstream) {
      x.prefill_ns = std::max<int64_t>(1, clock_.now_ns() - began);
      if (!cfg.fallback_aggregate) {
        x.disagg = DisaggChoice::kRemote;
        metrics_.disagg_choices[static_cast<size_t>(x.disagg)].inc();
        const bool timeout = x.last_error == UpstreamError::kTimeout;
        co_await send_error(s, x, timeout ? 504 : 502,
                            "the prefill leg failed on every prefill engine tried (RJ_DISAGG_PREFILL_FAILURE=error)",
                            timeout ? "upstream_timeout" : "upstream_error");
        co_return false;
      }
      choice = DisaggChoice::kFallback;
    }
  }
  x.disagg = choice;
  metrics_.disagg_choices[static_cast<size_t>(choice)].inc();
  co_return true;
}

void Proxy::leg_failed(Exchange& x, size_t u, upstream::Failure failure, Blame how) {
  if (!x.first_failure) {  // held: the next prefill engine's leg says whose fault it was
    x.first_failure = SentFailure{u, failure, how};
    return;
  }
  if (x.first_failure->how == how) {  // two engines failed it alike: the request's, no engine's
    metrics_.blamed[ep_index(x.endpoint)][static_cast<size_t>(how)].inc();
    x.first_failure.reset();
    return;
  }
  settle_first_failure(x);
  fleet_.on_failure(u, failure);
}

asio::awaitable<Proxy::LegResult> Proxy::prefill_leg(Session& s, Exchange& x, const route::CandidateTerms& c,
                                                     bool movable) {
  const size_t u = c.ordinal;
  const size_t ep = ep_index(x.endpoint);
  upstream::Engine& engine = fleet_.at(u);
  ClientWatch& watch = *s.watch;
  route::LoadReservation reservation(engine, c.request_load_units);
  const std::shared_ptr<const net::Member> member = fleet_.member(u);
  auto outcome = [&](LegOutcome o, LegResult r) {
    metrics_.prefill_legs[o].inc();
    return r;
  };
  if (!member) co_return outcome(kLegFailed, LegResult::kFailed);
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (watch.gone) co_return outcome(kLegClientGone, LegResult::kClientGone);
    net::ConnectionPtr conn =
        attempt == 0 ? pools_.at(s.thread, u).take(clock_.coarse_now_ms(), member->incarnation) : nullptr;
    if (!conn) {
      conn = co_await connect_engine(s, x, u, *member);
      if (!conn) co_return watch.gone ? outcome(kLegClientGone, LegResult::kClientGone) : outcome(kLegFailed, LegResult::kFailed);
    }
    watch.upstream = conn.get();
    HeadResult h = HeadResult::kOk;
    bool write_failed = false;  // the engine stopped taking the leg: its connection is not reused
    s.leg_answer.clear();
    {
      set_waiting(s, u);  // a fence of u closes the connection and says so
      struct NotWaiting {
        Proxy& p;
        Session& s;
        ~NotWaiting() { p.set_waiting(s, Session::kNotWaiting); }
      } not_waiting{*this, s};
      s.engine_fenced = false;
      s.engine_unresponsive = false;
      s.fence_moves = movable;
      // The answer is one token, due about when a first token is: a failing probe of an engine
      // that has not answered past this moves the leg on, where it can move (RJ_UPSTREAM_FIRST_BYTE_TIMEOUT_MS
      // otherwise).
      s.unresponsive_after = movable ? std::chrono::steady_clock::now() + first_byte_budget(s.prep.body.size())
                                     : std::chrono::steady_clock::time_point::max();
      x.body_started = false;
      x.first_byte_deadline = first_byte_deadline();
      const bool priority = config_.admission.engine_priority && x.endpoint != Endpoint::kMessages;
      const std::optional<int64_t> value =
          priority ? std::optional<int64_t>(s.cls == AdmissionClass::kBatch ? 1 : 0) : std::nullopt;
      const size_t body_size = edited_body_size(s, BodyEdit::kPrefillLeg, value);
      build_request_head(s, member->url, member->dp_rank, body_size);
      OutBuffers& out = s.out_buffers;
      out.clear();
      out.add(s.out);
      add_edited_body(s);
      boost::system::error_code ec, write_ec;
      out.send_now(conn->stream, write_ec);
      net::ResponseParser& parser = s.parser.emplace(s.res);
      parser.body_limit(kMaxPrefillAnswerBytes);
      parser.header_limit(256 * 1024);
      if (!out.empty() && !write_ec) {
        arm_upstream(*conn, x);
        write_ec = std::get<0>(co_await asio::async_write(conn->stream, out.rest(), net::awaited));
      }
      // An engine may answer before it read the whole request (413, 400) and close: read it.
      write_failed = static_cast<bool>(write_ec);
      if (write_ec && !closed_early(write_ec)) ec = write_ec;
      // The whole answer: its head, then its body (one token, its usage and the parameters).
      while (!ec) {
        const size_t before = conn->buffer.size();
        parse_buffered(*conn, parser, ec);
        for (size_t i = 0; i < parser.piece_count(); ++i) s.leg_answer.append(parser.piece(i));
        parser.clear_pieces();
        if (ec || parser.is_done()) break;
        if (parser.is_header_done()) x.body_started = true;
        if (conn->buffer.size() > 0 && conn->buffer.size() < before) continue;  // (a full piece list)
        arm_upstream(*conn, x);
        const auto [read_ec, n] =
            co_await conn->stream.async_read_some(conn->buffer.prepare(beast::read_size(conn->buffer, kReadMax)), net::awaited);
        ec = read_ec;
        if (ec) {
          parser.read_error(ec);
          if (!ec && !parser.is_done()) ec = http::error::partial_message;
          if (!ec) {  // a close-delimited body ended
            for (size_t i = 0; i < parser.piece_count(); ++i) s.leg_answer.append(parser.piece(i));
            parser.clear_pieces();
          }
          break;
        }
        conn->buffer.commit(n);
      }
      if (ec) h = head_failure(s, *conn, ec);
    }
    watch.upstream = nullptr;
    if (h == HeadResult::kStale && attempt == 0) {  // closed by the engine while idle
      metrics_.stale_retries[ep].inc();
      continue;
    }
    switch (h) {
      case HeadResult::kOk: break;
      case HeadResult::kClientGone: co_return outcome(kLegClientGone, LegResult::kClientGone);
      case HeadResult::kFenced:
        metrics_.upstream_errors[ep][static_cast<size_t>(UpstreamError::kFenced)].inc();
        co_return outcome(kLegFailed, LegResult::kFailed);
      case HeadResult::kUnresponsive:  // its probe failed while the leg waited: the next one takes it
        x.last_error = UpstreamError::kUnresponsive;
        metrics_.upstream_errors[ep][static_cast<size_t>(x.last_error)].inc();
        co_return outcome(kLegFailed, LegResult::kFailed);
      case HeadResult::kTls:
        tls_refused(x, u, *member);
        co_return outcome(kLegFailed, LegResult::kFailed);
      case HeadResult::kTimeout:
        x.last_error = UpstreamError::kTimeout;
        metrics_.timeouts[ep][static_cast<size_t>(Timeout::kFirstByte)].inc();
        fleet_.on_failure(u, upstream::Failure::kTimeout);
        co_return outcome(kLegFailed, LegResult::kFailed);
      default:
        x.last_error = UpstreamError::kProtocol;
        metrics_.upstream_errors[ep][static_cast<size_t>(x.last_error)].inc();
        leg_failed(x, u, h == HeadResult::kBadResponse ? upstream::Failure::kBadResponse : upstream::Failure::kDropped,
                   h == HeadResult::kBadResponse ? Blame::kBadResponse : Blame::kDropped);
        co_return outcome(kLegFailed, LegResult::kFailed);
    }
    const unsigned status = s.res.status;
    metrics_.count_upstream_response(u, status);
    const bool reusable = s.parser->keep_alive() && s.parser->is_done() && !write_failed;
    if (reusable) conn->deadline.disarm();
    if (status == 502 || status == 503) {  // held like dispatch's: two engines alike blame the request
      leg_failed(x, u, upstream::Failure::kStatus5xx, status == 502 ? Blame::kStatus502 : Blame::kStatus503);
    } else {
      fleet_.on_response(u, status);
    }
    if (status >= 400 && status < 500 && status != 408 && status != 429) {
      // The request's own fault (vLLM's validation): the client gets it as the engine wrote it.
      std::string_view type = "application/json";
      if (const std::optional<std::string_view> t = s.res.fields.find("Content-Type")) type = *t;
      const std::string content_type(type);
      co_await send_local(s, x, status, content_type, s.leg_answer);
      x.result = "complete";  // (the engine's answer, relayed whole)
      x.upstream = u;
      if (reusable) pools_.at(s.thread, u).put(std::move(conn), clock_.coarse_now_ms());
      co_return outcome(kLegRefused, LegResult::kAnswered);
    }
    if (status != 200) {
      x.last_error = UpstreamError::kRetryableStatus;
      metrics_.upstream_errors[ep][static_cast<size_t>(x.last_error)].inc();
      co_return outcome(kLegFailed, LegResult::kFailed);
    }
    TransferParams params = transfer_params(s.leg_answer);
    if (reusable) pools_.at(s.thread, u).put(std::move(conn), clock_.coarse_now_ms());
    if (params.error != ParamsError::kNone) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        spdlog::warn("disaggregation: a prefill engine (ordinal {}) answered without usable kv_transfer_params ({}); "
                     "is it started with a KV connector (--kv-transfer-config)? Counted in "
                     "ramjet_disagg_prefill_legs_total{{outcome=\"no_params\"}}", u, label(params.error));
      }
      x.last_error = UpstreamError::kProtocol;
      // An engine that keeps answering without them is misconfigured: its outlier record says so
      // (ejected after RJ_OUTLIER_CONSECUTIVE_FAILURES), rather than every request paying its prefill.
      fleet_.on_failure(u, upstream::Failure::kBadResponse);
      co_return outcome(kLegNoParams, LegResult::kFailed);
    }
    s.kv_params = std::move(params.json);
    router_.observe(u, s.prep);  // the prefill engine holds the prompt's prefix now
    co_return outcome(kLegOk, LegResult::kOk);
  }
  co_return outcome(kLegFailed, LegResult::kFailed);
}

}  // namespace ramjet::request
