// request/stream/proxy: the data plane. Serves one client connection (keep-alive, limits,
// timeouts), answers /health and every path it does not serve itself, prepares and routes the
// rest, forwards each request with one retry before the first response byte (blaming the
// request, not the engines, when both fail it the same way), and relays the response chunk by
// chunk with backpressure, first-byte, idle and client-send timeouts, cancelling the upstream
// the moment the client goes away. proxy.cc holds the connection loop, forward.cc dispatch and
// retry, relay.cc the response relay. Policies live in request/route, engine state in
// upstream/, body rules in request/prepare.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "net/client.h"
#include "net/drain_gate.h"
#include "net/io_pool.h"
#include "net/tls.h"
#include "request/ingress/api_keys.h"
#include "request/ingress/body_budget.h"
#include "request/ingress/endpoint.h"
#include "request/prepare/prepare.h"
#include "request/route/router.h"
#include "request/stream/exact_tokens.h"
#include "request/stream/metrics.h"
#include "request/stream/observer.h"
#include "upstream/engine_catalog.h"
#include "upstream/fleet.h"

namespace ramjet::request {

struct ProxyConfig {
  uint64_t max_body_bytes = 64ull << 20;
  uint32_t max_header_bytes = 64 * 1024;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{60000};
  std::chrono::milliseconds keepalive_timeout{75000};
  std::chrono::milliseconds connect_timeout{5000};
  // RJ_UPSTREAM_FIRST_BYTE_TIMEOUT_MS, RJ_UPSTREAM_IDLE_TIMEOUT_MS, RJ_CLIENT_SEND_TIMEOUT_MS
  // (0 = never).
  std::chrono::milliseconds first_byte_timeout{300000};
  std::chrono::milliseconds upstream_idle_timeout{120000};
  std::chrono::milliseconds client_send_timeout{60000};
  // What the engines accept (RJ_UPSTREAM_MAX_HEADER_BYTES / _COUNT): larger heads get 431 here.
  uint64_t upstream_max_header_bytes = 4u << 20;
  uint32_t upstream_max_header_count = 256;
  // The longest Host header + base path an engine that joins later can have (RJ_UPSTREAM_DNS
  // names, a reload's RJ_UPSTREAM); the engines present at the start are measured themselves.
  size_t max_engine_prefix_bytes = 0;
  uint64_t max_buffered_bytes = 256ull << 20;  // RJ_MAX_BUFFERED_BYTES
  ServedPaths served;                          // RJ_SERVE_TOKENIZE, RJ_PASSTHROUGH_PATHS
  uint64_t advertise_ctx_margin = 16384;
  size_t max_models_body = 16u << 20;
  PrepareConfig prepare;
  ExactTokensConfig exact;  // RJ_EXACT_ROUTE_*: prompt tokens for exact routing
  // RJ_ROUTE_PHASE_AWARE_LOAD: at a streaming response's first generated token the request's
  // reservation shrinks to one decode unit.
  bool phase_aware_load = true;
  // RJ_API_KEYS_FILE (null: off): every request but GET /health and CORS preflights needs a key,
  // checked once its head is read; the client's Authorization and x-api-key are then not
  // forwarded, and `upstream_authorization` ("Bearer <RJ_UPSTREAM_TOKEN>", or "" for none) goes
  // upstream instead. Must outlive the proxy.
  ApiKeys* api_keys = nullptr;
  std::string upstream_authorization;
  // RJ_TLS_CERT_FILE / _KEY_FILE (null: plain HTTP): every connection starts with a TLS
  // handshake, under the header timeout. Must outlive the proxy.
  const net::ServerTls* tls = nullptr;
  // Which engines serve which model (upstream/engine_catalog.h; null: every engine serves every
  // request, as in unit tests): an inference request is routed within its model's pool, one for a
  // model no engine serves gets 404 here, and GET /v1/models is answered from the engines' cards.
  // Must outlive the proxy.
  upstream::EngineCatalog* models = nullptr;
};

class Proxy {
 public:
  // Every client connection holds `gate` while it is served (net/drain_gate.h); one accepted
  // after the gate closed is closed at once.
  Proxy(ProxyConfig config, upstream::Fleet& fleet, route::Router& router, net::IoPool& io,
        net::PoolSet& pools, const Clock& clock, net::DrainGate& gate);
  ~Proxy();

  // Connection handler for the API listener.
  boost::asio::awaitable<void> serve(boost::asio::ip::tcp::socket socket);

  // Graceful drain: idle keep-alive connections are closed now, busy ones after their current
  // response. Thread-safe.
  void begin_drain();

  // Adds an observer of every routed exchange (request/stream/observer.h), called after the
  // proxy's own metrics and the observers added before it. Add before serving; each must
  // outlive the proxy's connections.
  void add_observer(ExchangeObserver* o) {
    for (size_t e = 0; e < kExchangeEventCount; ++e) {
      if (o->events() & (1u << e)) observers_[e].push_back(o);
    }
  }

  ProxyMetrics& metrics() { return metrics_; }
  const ProxyMetrics& metrics() const { return metrics_; }

 private:
  struct Session;
  struct Exchange;
  struct Attempt;
  // How writing the request and reading the response head on one connection went.
  // kTls: an https:// engine refused the connection with a TLS alert before any byte of an answer
  // (TLS 1.3 refuses a missing client certificate only then).
  enum class HeadResult { kOk, kClientGone, kStale, kFenced, kUnresponsive, kTimeout, kDropped, kBadResponse, kTls };
  // How one candidate engine's attempt ended: the response went out, or try the next one.
  enum class Step { kDone, kNext };
  enum class RelayResult { kComplete, kClientGone, kClientTimeout, kUpstreamCut, kUpstreamTimeout };
  // forward.cc: routing, dispatch and retry.
  boost::asio::awaitable<void> forward(Session& s, Exchange& x);
  boost::asio::awaitable<Step> dispatch(Session& s, Exchange& x, const route::Routed& routed,
                                        const std::vector<route::CandidateTerms>& order, size_t k);
  void start_exchange(Session& s, Exchange& x, net::UpstreamConnection& conn, const net::Member& member,
                      boost::system::error_code& write_ec);
  HeadResult head_failure(Session& s, const net::UpstreamConnection& conn, const boost::system::error_code& ec) const;
  boost::asio::awaitable<Step> on_sent_failure(Session& s, Exchange& x, size_t u, HeadResult why, bool more);
  void settle_first_failure(Exchange& x);
  // Whether a candidate after order[k] may still be tried.
  bool more_candidates(const route::Decision& d, const std::vector<route::CandidateTerms>& order, size_t k) const;
  void prepare_exchange(Session& s, Exchange& x);
  // exact_tokens.cc: the prompt's tokens for exact routing, into s.prep.exact.
  boost::asio::awaitable<void> fetch_exact_tokens(Session& s);
  // RJ_EXACT_TOKENS=local: true when the profile refuses the request (then remote_exact_tokens).
  boost::asio::awaitable<bool> local_exact_tokens(Session& s, std::chrono::milliseconds wait);
  boost::asio::awaitable<void> remote_exact_tokens(Session& s, std::chrono::milliseconds wait);  // POST /tokenize
  // Serialises the upstream request head for `engine` into s.out; returns its field count.
  size_t build_request_head(Session& s, const config::UpstreamUrl& engine, std::optional<uint32_t> dp_rank = std::nullopt);
  bool upstream_head_fits(Session& s);
  // Tells the observers of the exchange's decision.
  void decided(Exchange& x, const route::Routed& routed);
  // Tells every observer of event E, in order (the proxy's metrics first).
  template <ExchangeEvent E, typename X, typename... A, typename... B>
  void notify(void (ExchangeObserver::*handler)(ExchangeRecord&, A...), X& x, B&&... args) {
    for (ExchangeObserver* o : observers_[std::countr_zero(static_cast<uint32_t>(E))]) (o->*handler)(x, args...);
  }
  // Requests waiting for an engine's first byte, per (io thread, engine), so a fence can move
  // them (touched only on their io thread).
  void set_waiting(Session& s, size_t engine);  // engine = npos: no longer waiting
  void on_engine_fenced(size_t engine);
  // A probe of `engine` failed while it is still in service (the fleet's recent-success grace):
  // streamed requests waiting for its first byte past their own first_byte_budget move on (when
  // another engine can take them: dispatch() arms Session::unresponsive_after).
  void on_engine_unresponsive(size_t engine);
  // How long a request of `body_bytes` waits for its first byte before a failing probe of its
  // engine moves it: 4x its expected cold prefill (learned), at least 1 s, at most
  // RJ_UPSTREAM_FIRST_BYTE_TIMEOUT_MS.
  std::chrono::milliseconds first_byte_budget(uint64_t body_bytes) const;
  // relay.cc: the response.
  boost::asio::awaitable<RelayResult> relay_body(Session& s, Exchange& x, Attempt& a);
  boost::asio::awaitable<RelayResult> relay_models(Session& s, Exchange& x, Attempt& a);
  static RelayResult read_failure(const Attempt& a);
  // How a relay that did not complete must end for the client (status 0: nothing to add).
  struct ErrorEnding {
    unsigned status = 0;
    std::string_view message;
    std::string_view type;
  };
  // The relay's bookkeeping (journal result, metrics, the engine's outcome).
  ErrorEnding settle_relay(Session& s, Exchange& x, Attempt& a, RelayResult r);
  boost::asio::awaitable<void> end_with_error(Session& s, Exchange& x, unsigned status,
                                              std::string_view message, std::string_view type);
  bool build_response_head(Session& s, Exchange& x, const upstream::Engine& engine, bool* chunked);
  void account_pieces(Session& s, Exchange& x);
  void engine_completed(Exchange& x, Attempt& a);
  void finish_usage(Session& s, Exchange& x);
  // Writes what s.out_buffers still holds to the client under RJ_CLIENT_SEND_TIMEOUT_MS.
  boost::asio::awaitable<void> write_rest(Session& s, Exchange& x, boost::system::error_code& ec);
  // Arms the upstream read deadline: the first-byte deadline until the body began, then idle.
  void arm_upstream(net::UpstreamConnection& conn, const Exchange& x) const;
  // proxy.cc: local answers.
  boost::asio::awaitable<void> send_local(Session& s, Exchange& x, unsigned status,
                                          std::string_view content_type, std::string_view body,
                                          std::string_view extra_field = {});
  boost::asio::awaitable<void> send_error(Session& s, Exchange& x, unsigned status,
                                          std::string_view message, std::string_view type,
                                          std::string_view extra_field = {});
  boost::asio::awaitable<void> answer_unserved(Session& s, Exchange& x);
  // The request's model pool into s.pool (a plain call: no coroutine frame per request); the
  // rejection when ramjet answers the request itself (refuse_model: 400, 404).
  std::optional<Rejection> pick_pool(Session& s);
  boost::asio::awaitable<void> refuse_model(Session& s, Exchange& x, Rejection why);
  // GET/HEAD /v1/models from the engines' cards; false when none is known yet (forward it).
  boost::asio::awaitable<bool> answer_models(Session& s, Exchange& x);

  ProxyConfig config_;
  upstream::Fleet& fleet_;
  route::Router& router_;
  // The proxy's own metrics of each exchange (decisions, time to first token, usage): always the
  // first observer.
  std::unique_ptr<ExchangeMetrics> metrics_observer_;
  std::array<std::vector<ExchangeObserver*>, kExchangeEventCount> observers_;  // per event bit
  net::IoPool& io_;
  net::PoolSet& pools_;
  const Clock& clock_;
  net::DrainGate& gate_;
  ProxyMetrics metrics_;
  std::atomic<bool> draining_{false};
  std::atomic<size_t> tokenize_turn_{0};  // which healthy engine tokenizes next (exact routing)
  // Sessions waiting for their next request: an intrusive list per io thread (touched only on
  // that thread).
  std::vector<Session*> idle_;
  void set_idle(Session& s, bool idle);
  std::vector<std::vector<Session*>> waiting_;  // [io thread][engine]: list heads
  size_t max_host_header_ = 0;  // the longest Host header + base path any engine can have
  BodyBudget budget_;
};

}  // namespace ramjet::request
