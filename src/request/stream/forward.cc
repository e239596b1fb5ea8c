// The upstream side of the data plane: prepare, route, dispatch with retry before the first
// response byte, relay chunk by chunk, usage accounting, and cancellation on client disconnect.
//
// Heads are serialised here into the session's reused buffer and written together with the
// body bytes in one gather write (tried synchronously first: the sockets are non-blocking);
// responses are parsed with Beast's parser, and their body bytes are relayed straight from the
// upstream connection's read buffer, without a copy.
#include <charconv>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/error.hpp>

#include "common/log.h"
#include "net/http.h"
#include "observe/decision_log.h"
#include "observe/journal.h"
#include "request/route/reservation.h"
#include "request/stream/proxy.h"
#include "request/stream/session.h"
#include "request/usage/usage.h"

namespace ramjet::request {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kReadMax = 64 * 1024;
constexpr std::string_view kRouteHeader = "X-Ramjet-Upstream";

StreamKind stream_kind_of(const PreparedRequest& p) {
  if (!p.stream) return StreamKind::kUnknown;
  return *p.stream ? StreamKind::kTrue : StreamKind::kFalse;
}

bool response_has_body(http::verb method, unsigned status) {
  return method != http::verb::head && status >= 200 && status != 204 && status != 304;
}

size_t finish_index(std::string_view bucket) {
  if (bucket == "stop") return 0;
  if (bucket == "length") return 1;
  if (bucket == "tool_calls") return 2;
  if (bucket == "cancelled") return 3;
  return 4;
}

size_t cache_index(std::string_view outcome) {
  if (outcome == "full") return 0;
  if (outcome == "partial") return 1;
  if (outcome == "cold") return 2;
  return 3;
}

// Parses what the connection's buffer holds, without I/O: the head, or body pieces (views into
// the buffer, valid until the next read) until the buffer is drained, the piece list is full or
// the message is complete.
void parse_buffered(net::UpstreamConnection& conn, net::ResponseParser& p, boost::system::error_code& ec) {
  if (p.is_done() || conn.buffer.size() == 0) return;
  size_t used = p.put(conn.buffer.data(), ec);
  conn.buffer.consume(used);
  if (ec == http::error::need_more || ec == http::error::need_buffer) ec = {};
}

// After a read from the engine failed with `ec`: end of stream completes a close-delimited
// body and is end_of_stream before any byte, as Beast's read operations report it.
void on_read_error(net::ResponseParser& p, boost::system::error_code& ec) {
  if (ec != asio::error::eof) return;
  ec = {};
  if (p.got_some()) {
    p.put_eof(ec);
  } else {
    ec = http::error::end_of_stream;
  }
}

// Response head fields as relayed: hop-by-hop headers (and those named in Connection) and any
// X-Ramjet-Upstream removed, then X-Ramjet-Upstream: <ordinal>.
void append_response_fields(net::HeadBuffer& out, const net::HeadFields& fields, std::string_view ordinal) {
  const net::HopByHop hop(fields, kRouteHeader);
  for (size_t i = 0; i < fields.size(); ++i) {
    if (!hop.drop(fields, i)) net::append_field(out, fields.name(i), fields.value(i));
  }
  net::append_field(out, kRouteHeader, ordinal);
}

}  // namespace

void start_client_read(const std::shared_ptr<ClientWatch>& w) {
  if (w->reading || w->has_result || w->client == nullptr) return;
  w->reading = true;
  w->client->async_read_some(
      w->buffer->prepare(beast::read_size(*w->buffer, kReadMax)),
      [w](boost::system::error_code ec, size_t n) {
        w->reading = false;
        if (w->client == nullptr) return;  // the connection is gone
        if (!ec) w->buffer->commit(n);
        w->has_result = true;
        w->result = ec;
        // A FIN or reset while forwarding: stop the engine now. Bytes mean the client is alive.
        if (w->active && ec && ec != asio::error::operation_aborted) {
          w->gone = true;
          if (w->upstream) {
            boost::system::error_code ignored;
            w->upstream->socket.close(ignored);
          }
        }
        if (w->waiter) {  // resume the connection loop
          ClientWatch::Waiter waiter = std::move(*w->waiter);
          w->waiter.reset();
          waiter();
        }
      });
}

void watch_client(const std::shared_ptr<ClientWatch>& w) {
  w->active = true;
  w->gone = false;
  // Bytes already buffered (a pipelined request) mean the client is alive: nothing to watch.
  if (w->buffer->size() == 0) start_client_read(w);
}

void unwatch_client(ClientWatch& w) {
  w.active = false;
  w.upstream = nullptr;
}

// Prepares the exchange's body (parse, shims, facts) into s.prep and counts it.
void Proxy::prepare_exchange(Session& s, Exchange& x) {
  PreparedRequest& prep = s.prep;
  if (is_inference(x.endpoint)) {
    prep = prepare(x.endpoint, std::move(s.body), config_.prepare);
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
  metrics_.request_body_bytes.inc(prep.body.size());
}

// The upstream request head for engine `u`: hop-by-hop headers, inbound X-Ramjet-Upstream and
// Expect are not forwarded; Host and Content-Length are set here.
void Proxy::build_request_head(Session& s, size_t u) {
  const net::RequestHead& req = s.req;
  net::HeadBuffer& out = s.out;
  out.clear();
  out.append(req.method_string);
  out.push_back(' ');
  out.append(fleet_.at(u).url().base_path);
  out.append(req.target);
  out.append(" HTTP/1.1\r\n");
  const net::HopByHop hop(req.fields, kRouteHeader);
  for (size_t i = 0; i < req.fields.size(); ++i) {
    if (hop.drop(req.fields, i) || req.fields.id(i) == http::field::expect) continue;
    net::append_field(out, req.fields.name(i), req.fields.value(i));
  }
  net::append_field(out, "Host", host_headers_[u]);
  if (!s.prep.body.empty() || req.method == http::verb::post || req.method == http::verb::put ||
      req.method == http::verb::patch) {
    out.append("Content-Length: ");
    net::append_decimal(out, s.prep.body.size());
    out.append("\r\n");
  }
  out.append("\r\n");
}

// Decides the client response's framing and serialises its head into s.out. Returns whether
// the response has a body; sets *chunked.
bool Proxy::build_response_head(Session& s, Exchange& x, const upstream::Engine& engine, bool* chunked) {
  const net::ResponseHead& up = s.res;
  const unsigned version = s.req.version;
  const bool has_body = response_has_body(s.req.method, up.status);
  const auto length = s.parser->content_length();
  *chunked = false;
  if (!length && has_body) {
    if (version >= 11) {
      *chunked = true;
    } else {
      s.close_after = true;  // HTTP/1.0: the body ends when the connection does
    }
  }
  x.status = up.status;
  net::HeadBuffer& out = s.out;
  out.clear();
  net::append_status_line(out, version, up.status, up.reason);
  append_response_fields(out, up.fields, engine.label());
  if (length) {
    out.append("Content-Length: ");
    net::append_decimal(out, *length);
    out.append("\r\n");
  } else if (*chunked) {
    out.append("Transfer-Encoding: chunked\r\n");
  }
  net::append_connection(out, version, x.keep_alive && !draining_ && !s.close_after);
  out.append("\r\n");
  return has_body;
}

// Usage accounting at the end of a complete 200 response on an inference endpoint.
void Proxy::finish_usage(Session& s, Exchange& x) {
  UsageAccumulator& usage = *s.usage;
  usage.finish();
  const Usage& u = usage.usage();
  metrics_.usage_parse_failures.inc(usage.parse_failures());
  if (u.prompt_tokens) metrics_.prompt_tokens.inc(*u.prompt_tokens);
  if (u.cached_tokens) metrics_.cached_prompt_tokens.inc(*u.cached_tokens);
  if (u.completion_tokens) metrics_.completion_tokens.inc(*u.completion_tokens);
  if (!u.finish_reason.empty()) {
    metrics_.finish_reasons[ep_index(x.endpoint)][finish_index(finish_bucket(u.finish_reason))].inc();
  }
  metrics_.cache_requests[ep_index(x.endpoint)][cache_index(cache_outcome(u))].inc();
  if (x.first_token_ns && u.completion_tokens && *u.completion_tokens > 8) {
    double decode_s = static_cast<double>(clock_.now_ns() - x.first_token_ns) / 1e9;
    if (decode_s > 0.5) metrics_.decode_rate.observe(static_cast<double>(*u.completion_tokens - 1) / decode_s);
  }
  metrics_.observe_usage(x.endpoint, u, x.start_ns, x.first_token_ns, clock_.now_ns());
}

// Feeds one relayed batch of body pieces to usage accounting; records the first-token time.
void Proxy::account_pieces(Session& s, Exchange& x) {
  const net::ResponseParser& p = *s.parser;
  for (size_t i = 0; i < p.piece_count(); ++i) {
    if (s.usage->feed(p.pieces()[i]) && x.first_token_ns == 0) {
      x.first_token_ns = clock_.now_ns();
      metrics_.ttft.observe(static_cast<double>(x.first_token_ns - x.start_ns) / 1e9);
    }
  }
}

namespace {

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void Proxy::journal_start(Session& s, const route::Routed& routed, uint64_t seq) {
  const route::RouteConfig& rc = router_.config();
  journal_->start(observe::JournalStart{
      .seq = seq,
      .unix_ms = unix_ms_now(),
      .cold = routed.cold,
      .max_output_tokens = s.prep.max_output_tokens,
      .decision = routed.decision,
      .config = rc,
      .request = routed.request,
      .policy = router_.policy().name(),
      .phase_aware_load = config_.phase_aware_load,
      .single_flight = router_.single_flight().config().enabled,
  });
}

void Proxy::journal_finish(Session& s, const Exchange& x, uint64_t seq, std::string_view result,
                           std::optional<size_t> upstream, uint32_t units) {
  const int64_t now = clock_.now_ns();
  auto ms_since_start = [&](int64_t at) -> std::optional<double> {
    if (at == 0) return std::nullopt;
    return static_cast<double>(at - x.start_ns) / 1e6;
  };
  observe::JournalFinish f;
  f.seq = seq;
  f.unix_ms = unix_ms_now();
  f.result = result;
  f.upstream = upstream;
  f.request_load_units = units;
  f.status = x.status;
  f.duration_ms = static_cast<double>(now - x.start_ns) / 1e6;
  f.first_byte_ms = ms_since_start(x.head_ns);
  f.ttft_ms = ms_since_start(x.first_token_ns);
  f.response_bytes = x.response_bytes;
  if (x.accounted && s.usage) {
    const Usage& u = s.usage->usage();
    f.prompt_tokens = u.prompt_tokens;
    f.cached_tokens = u.cached_tokens;
    f.completion_tokens = u.completion_tokens;
  }
  journal_->finish(f);
}

// One coroutine for dispatch and relay (its frame stays small; per-exchange state lives in the
// session): Asio recycles coroutine frames only when they are under ~1 KB.
asio::awaitable<void> Proxy::forward(Session& s, Exchange& x) {
  metrics_.inflight.add(1);
  struct Inflight {
    observe::Gauge& g;
    ~Inflight() { g.sub(1); }
  } inflight{metrics_.inflight};

  // Parse once: only inference endpoints are parsed, and only here.
  prepare_exchange(s, x);
  // The body's allocation goes back to the session for the next request.
  struct GiveBack {
    Session& s;
    ~GiveBack() { s.body = std::move(s.prep.body); }
  } give_back{s};

  const route::Routed routed = router_.decide(s.prep);
  const route::Decision& d = routed.decision;
  // The journal's finish record, written however this exchange ends (set as it goes).
  struct JournalEnd {
    Proxy& p;
    Session& s;
    Exchange& x;
    uint64_t seq = 0;
    std::string_view result = "upstream_error";
    std::optional<size_t> upstream;
    uint32_t units = 0;
    ~JournalEnd() {
      if (seq != 0) p.journal_finish(s, x, seq, result, upstream, units);
    }
  } journal_end{*this, s, x, 0, "upstream_error", std::nullopt, 0};
  if (journal_) {
    journal_end.seq = journal_->next_seq();
    journal_start(s, routed, journal_end.seq);
  }
  if (decisions_) decisions_->push(routed, router_.policy().name());
  metrics_.route_decisions[static_cast<size_t>(d.outcome)].inc();
  int64_t was_open = metrics_.route_fail_open.get();
  metrics_.route_fail_open.set(d.fail_open ? 1 : 0);
  if (was_open != (d.fail_open ? 1 : 0)) {
    spdlog::warn(d.fail_open ? "no healthy upstream: failing open" : "healthy upstream again: fail-open ended");
  }
  auto order = d.dispatch_order();
  metrics_.count_route(routed, order.empty() ? nullptr : &order.front(),
                       router_.uses_prefix() && !s.prep.fingerprints.chain.empty());
  if (order.empty()) {
    journal_end.result = "no_upstream";
    co_await send_error(s, x, 503, "upstream unavailable", "no_healthy_upstream");
    co_return;
  }

  ClientWatch& watch = *s.watch;
  watch_client(s.watch);
  struct StopWatch {
    ClientWatch& w;
    ~StopWatch() { unwatch_client(w); }
  } stop_watch{watch};

  OutBuffers& out = s.out_buffers;
  UpstreamError last_error = UpstreamError::kConnect;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t u = order[k].ordinal;
    const bool last = k + 1 == order.size();
    upstream::Engine& engine = fleet_.at(u);
    if (d.fail_open) metrics_.fail_open_dispatches[u].inc();
    route::LoadReservation reservation(engine, order[k].request_load_units);
    journal_end.upstream = u;
    journal_end.units = order[k].request_load_units;
    // A new prefix: concurrent requests with the same leading blocks follow this one here
    // while it prefills (released when this attempt ends, complete or not).
    route::SingleFlight::Lease lead = router_.lead(u, routed, s.prep);
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (watch.gone) break;
      boost::system::error_code ec;
      net::ConnectionPtr conn = pools_.at(s.thread, u).take();
      if (!conn) {
        net::ConnectFailure cf = net::ConnectFailure::kNone;
        conn = co_await net::connect(engine.url(), config_.connect_timeout, cf, &watch.upstream);
        watch.upstream = nullptr;
        if (!conn) {
          if (watch.gone) break;
          last_error = cf == net::ConnectFailure::kTimeout ? UpstreamError::kTimeout : UpstreamError::kConnect;
          metrics_.upstream_errors[ep_index(x.endpoint)][static_cast<size_t>(last_error)].inc();
          fleet_.fence(u, last_error == UpstreamError::kTimeout ? upstream::FenceReason::kTimeout
                                                                : upstream::FenceReason::kConnect);
          break;  // next candidate
        }
      }
      watch.upstream = conn.get();

      build_request_head(s, u);
      out.clear();
      out.add(s.out);
      out.add(s.prep.body);
      if (!out.send_now(conn->socket, ec) && !ec) {
        co_await asio::async_write(conn->socket, out.rest(), asio::redirect_error(asio::use_awaitable, ec));
      }

      net::ResponseParser& parser = s.parser.emplace(s.res);
      parser.body_limit(boost::none);
      parser.header_limit(256 * 1024);
      if (s.req.method == http::verb::head) parser.skip(true);
      while (!ec) {
        parse_buffered(*conn, parser, ec);
        if (ec || parser.is_header_done()) break;
        size_t n = co_await conn->socket.async_read_some(
            conn->buffer.prepare(beast::read_size(conn->buffer, kReadMax)),
            asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
          on_read_error(parser, ec);
          if (!ec) ec = http::error::partial_message;  // the head cannot end at EOF
          break;
        }
        conn->buffer.commit(n);
      }
      if (ec) {
        watch.upstream = nullptr;
        if (watch.gone) break;
        // A pooled connection the engine closed while idle: retry once on a fresh one.
        if (conn->reused && attempt == 0 &&
            (ec == http::error::end_of_stream || ec == asio::error::eof ||
             ec == asio::error::connection_reset || ec == asio::error::broken_pipe)) {
          continue;
        }
        last_error = UpstreamError::kProtocol;
        metrics_.upstream_errors[ep_index(x.endpoint)][static_cast<size_t>(last_error)].inc();
        fleet_.fence(u, upstream::FenceReason::kProtocol);
        break;
      }

      const unsigned status = s.res.status;
      metrics_.count_upstream_response(u, status);
      x.head_ns = clock_.now_ns();
      if ((status == 502 || status == 503) && !last) {
        watch.upstream = nullptr;
        last_error = UpstreamError::kRetryableStatus;
        metrics_.upstream_errors[ep_index(x.endpoint)][static_cast<size_t>(last_error)].inc();
        fleet_.fence(u, upstream::FenceReason::kRetryableStatus);
        break;  // conn closes with its scope; the next candidate gets the request
      }
      fleet_.on_response(u, status);

      RelayResult r = RelayResult::kComplete;
      if (x.endpoint == Endpoint::kModels && status == 200) {
        Attempt a{*conn, parser, engine, watch, s.prep, reservation};
        r = co_await relay_models(s, x, a);
      } else {
        // Relay: the head goes out at once when no body bytes are waiting (an SSE stream still
        // in prefill), otherwise with the first piece of the body, in one write. Then every
        // read from the engine is written to the client before the next read (backpressure);
        // everything already buffered is relayed together (several SSE events often arrive
        // at once), as one chunk when the client response is chunked.
        bool chunked = false;
        const bool has_body = build_response_head(s, x, engine, &chunked);
        const bool account = is_inference(x.endpoint) && status == 200;
        const bool sse = s.res.fields.get(http::field::content_type).find("text/event-stream") !=
                         std::string_view::npos;
        if (account) s.usage.emplace(x.endpoint, sse);
        x.accounted = account;
        // Phase-aware load: once a streaming response generates, the engine is decoding this
        // request, no longer reading its prompt: keep one decode unit until the end.
        const bool shrink_at_first_token = account && sse && config_.phase_aware_load;
        bool head_pending = true;
        if (!has_body || (conn->buffer.size() == 0 && !parser.is_done())) {
          out.clear();
          out.add(s.out);
          if (!out.send_now(s.client, ec) && !ec) {
            co_await asio::async_write(s.client, out.rest(), asio::redirect_error(asio::use_awaitable, ec));
          }
          head_pending = false;
        }
        parser.eager(true);
        while (!ec && has_body) {
          parser.clear_pieces();
          if (!parser.is_done()) {
            parse_buffered(*conn, parser, ec);
            if (!ec && parser.piece_count() == 0 && !parser.is_done()) {
              size_t n = co_await conn->socket.async_read_some(
                  conn->buffer.prepare(beast::read_size(conn->buffer, kReadMax)),
                  asio::redirect_error(asio::use_awaitable, ec));
              if (ec) {
                on_read_error(parser, ec);
              } else {
                conn->buffer.commit(n);
                parse_buffered(*conn, parser, ec);
              }
            }
            if (ec) {
              r = watch.gone ? RelayResult::kClientGone : RelayResult::kUpstreamError;
              break;
            }
            if (parser.piece_count() == 0 && !parser.is_done()) continue;
          }
          const size_t n = parser.piece_bytes();
          if (parser.is_done()) {
            // The engine's work is over: release its load, and after a 200 teach the index
            // (the engine holds the prefix now) and end any single-flight lead, all before the
            // last bytes go out, so the client's next request (which may be decided on another
            // thread the moment those bytes arrive) sees the engine as it now is.
            if (account) router_.observe(u, s.prep);
            reservation.release();
            lead.end();
          }
          out.clear();
          if (head_pending) {
            out.add(s.out);
            head_pending = false;
          }
          if (chunked && n) {  // one chunk carries everything relayed in this write
            char* end = std::to_chars(s.chunk_size, s.chunk_size + sizeof s.chunk_size - 2, n, 16).ptr;
            *end++ = '\r';
            *end++ = '\n';
            out.add(std::string_view(s.chunk_size, static_cast<size_t>(end - s.chunk_size)));
          }
          for (size_t i = 0; i < parser.piece_count(); ++i) out.add(parser.pieces()[i]);
          if (chunked && n) out.add("\r\n");
          if (chunked && parser.is_done()) out.add("0\r\n\r\n");
          if (!out.empty() && !out.send_now(s.client, ec) && !ec) {
            co_await asio::async_write(s.client, out.rest(), asio::redirect_error(asio::use_awaitable, ec));
          }
          // Accounting reads the pieces after they went out (they stay valid until the next
          // read), so parsing SSE events never delays the bytes on their way to the client.
          metrics_.response_body_bytes.inc(n);
          x.response_bytes += n;
          if (n && account) {
            const bool had_token = x.first_token_ns != 0;
            account_pieces(s, x);
            if (!had_token && x.first_token_ns != 0 && shrink_at_first_token) reservation.shrink_to(1);
          }
          if (ec || parser.is_done()) break;
        }
        if (ec && r == RelayResult::kComplete) r = RelayResult::kClientGone;  // a client write failed
        if (r == RelayResult::kComplete && account) {
          finish_usage(s, x);
          if (completion_observer_ && (x.endpoint == Endpoint::kChat || x.endpoint == Endpoint::kCompletions))
            completion_observer_(u, x.endpoint == Endpoint::kChat, s.prep.body);
        }
      }
      watch.upstream = nullptr;
      const double seconds = static_cast<double>(clock_.now_ns() - x.start_ns) / 1e9;
      metrics_.request_duration.observe(seconds);
      switch (r) {
        case RelayResult::kComplete:
          journal_end.result = "complete";
          if (!x.counted) metrics_.count_request(x.endpoint, x.stream_kind, status);
          if (parser.keep_alive() && parser.is_done()) pools_.at(s.thread, u).put(std::move(conn));
          break;
        case RelayResult::kClientGone:
          journal_end.result = "client_disconnect";
          metrics_.client_disconnects[ep_index(x.endpoint)].inc();
          metrics_.count_request(x.endpoint, x.stream_kind, 499);
          s.close_after = true;
          break;
        case RelayResult::kUpstreamError:
          journal_end.result = "upstream_read_error";
          metrics_.upstream_errors[ep_index(x.endpoint)][static_cast<size_t>(UpstreamError::kReadError)].inc();
          metrics_.count_request(x.endpoint, x.stream_kind, status);
          fleet_.fence(u, upstream::FenceReason::kProtocol);
          s.close_after = true;  // the response is truncated: the client must see the connection end
          break;
      }
      co_return;
    }
    if (watch.gone) break;
  }

  if (watch.gone) {
    journal_end.result = "client_disconnect";
    metrics_.client_disconnects[ep_index(x.endpoint)].inc();
    metrics_.count_request(x.endpoint, x.stream_kind, 499);
    s.close_after = true;
    co_return;
  }
  const unsigned status = last_error == UpstreamError::kTimeout ? 504 : 502;
  co_await send_error(s, x, status, "upstream unavailable",
                      last_error == UpstreamError::kTimeout ? "upstream_timeout" : "upstream_error");
}

asio::awaitable<Proxy::RelayResult> Proxy::relay_models(Session& s, Exchange& x, Attempt& a) {
  const net::ResponseHead& up = s.res;
  std::string body;
  boost::system::error_code ec;
  a.parser.eager(true);
  while (!a.parser.is_done()) {
    a.parser.clear_pieces();
    parse_buffered(a.conn, a.parser, ec);
    if (!ec && a.parser.piece_count() == 0 && !a.parser.is_done()) {
      size_t n = co_await a.conn.socket.async_read_some(
          a.conn.buffer.prepare(beast::read_size(a.conn.buffer, kReadMax)),
          asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        on_read_error(a.parser, ec);
      } else {
        a.conn.buffer.commit(n);
        parse_buffered(a.conn, a.parser, ec);
      }
    }
    if (ec) co_return a.watch.gone ? RelayResult::kClientGone : RelayResult::kUpstreamError;
    for (size_t i = 0; i < a.parser.piece_count(); ++i) body.append(a.parser.pieces()[i]);
    if (body.size() > config_.max_models_body) {
      s.close_after = true;
      co_await send_error(s, x, 502, "upstream model list too large", "upstream_error");
      co_return RelayResult::kComplete;
    }
  }
  if (auto rewritten = rewrite_models_context(body, config_.advertise_ctx_margin)) body = std::move(*rewritten);
  if (s.req.method == http::verb::head) body.clear();
  x.status = up.status;
  s.out.clear();
  net::append_status_line(s.out, s.req.version, up.status, up.reason);
  append_response_fields(s.out, up.fields, a.engine.label());
  net::append_connection(s.out, s.req.version, x.keep_alive && !draining_ && !s.close_after);
  s.out.append("Content-Length: ");
  net::append_decimal(s.out, body.size());
  s.out.append("\r\n\r\n");
  OutBuffers& out = s.out_buffers;
  out.clear();
  out.add(s.out);
  out.add(body);
  if (!out.send_now(s.client, ec) && !ec) {
    co_await asio::async_write(s.client, out.rest(), asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return ec ? RelayResult::kClientGone : RelayResult::kComplete;
}

}  // namespace ramjet::request
