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
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "net/client.h"
#include "net/drain_gate.h"
#include "net/io_pool.h"
#include "net/tls.h"
#include "request/admission/admission.h"
#include "request/admission/client_share.h"
#include "request/ingress/api_keys.h"
#include "request/ingress/body_budget.h"
#include "request/ingress/endpoint.h"
#include "request/prepare/prepare.h"
#include "request/route/router.h"
#include "request/stream/exact_tokens.h"
#include "request/stream/metrics.h"
#include "request/stream/observer.h"
#include "request/stream/owned_body.h"
#include "upstream/engine_catalog.h"
#include "upstream/engine_load.h"
#include "upstream/fleet.h"
#include "upstream/parking.h"

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
  // The waiting room (request/admission/admission.h; null: off): an inference request whose
  // model pool has no engine with room waits there. An engine has room while this process has
  // fewer than `engine_max_inflight` requests on it (0: no cap) and, with `engine_max_waiting`,
  // while its own fresh vllm:num_requests_waiting (from `engine_load`) is below it.
  struct AdmissionConfig {
    Admission* room = nullptr;
    uint32_t engine_max_inflight = 0;        // RJ_ADMISSION_ENGINE_MAX_INFLIGHT
    uint32_t engine_max_waiting = 0;         // RJ_ADMISSION_ENGINE_MAX_WAITING
    double engine_max_kv_usage = 0;          // RJ_ADMISSION_ENGINE_MAX_KV_USAGE (0: not read)
    const upstream::EngineLoadBoard* engine_load = nullptr;
    std::string priority_header;             // RJ_ADMISSION_PRIORITY_HEADER ("": none honoured)
    std::vector<std::string> batch_keys;     // RJ_ADMISSION_BATCH_KEYS: key names whose requests are batch
    // RJ_ADMISSION_ENGINE_PRIORITY: a vLLM engine's chat, completions and responses requests carry
    // the class as vLLM's per-request "priority" (interactive 0, batch 1; owned_body.h).
    bool engine_priority = false;
    // RJ_ADMISSION_ENGINE_BURST (with engine_max_inflight): requests an engine takes past its cap
    // for clients under their fair share of the pool's slots (`shares`, which main makes).
    uint32_t engine_burst = 0;
    ClientShares* shares = nullptr;
  } admission;
  // The idle drain (upstream/parking.h; null: off). A request whose pool has no engine in service
  // but a parked one coming back waits in the waiting room (`admission.room`, which main makes
  // with its default bounds for this when the waiting room is off) while that engine wakes.
  upstream::EngineParking* parking = nullptr;
  // Prefill/decode disaggregation (request/stream/disagg.cc): on when RJ_UPSTREAM_ROLE was given.
  struct DisaggConfig {
    bool enabled = false;
    uint32_t min_uncached_tokens = 512;  // RJ_DISAGG_MIN_UNCACHED_TOKENS (0: always)
    uint32_t prefill_max_inflight = 0;   // RJ_DISAGG_PREFILL_MAX_INFLIGHT (0: no cap)
    bool fallback_aggregate = true;      // RJ_DISAGG_PREFILL_FAILURE=aggregate
  } disagg;
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
                                        std::span<const route::CandidateTerms> order, size_t k);
  void start_exchange(Session& s, Exchange& x, net::UpstreamConnection& conn, const net::Member& member,
                      boost::system::error_code& write_ec);
  HeadResult head_failure(Session& s, const net::UpstreamConnection& conn, const boost::system::error_code& ec) const;
  boost::asio::awaitable<Step> on_sent_failure(Session& s, Exchange& x, size_t u, HeadResult why, bool more);
  void settle_first_failure(Exchange& x);
  // An https:// engine refused the connection with a TLS alert before any answer: counted on its
  // TLS target and fenced.
  void tls_refused(Exchange& x, size_t u, const net::Member& member);
  // A connection to engine `u` could not be made: counted, and the engine fenced.
  void connect_failed(Exchange& x, size_t u, net::ConnectFailure cf);
  // A new connection to engine `u` (`member`) for an attempt of dispatch() or a prefill leg, the
  // client's watch pointed at it meanwhile (a client that leaves ends the connect). Null when the
  // client left or the connect failed (connect_failed()).
  boost::asio::awaitable<net::ConnectionPtr> connect_engine(Session& s, Exchange& x, size_t u, const net::Member& member);
  // When an attempt's first response byte is due (RJ_UPSTREAM_FIRST_BYTE_TIMEOUT_MS from now; max: none).
  std::chrono::steady_clock::time_point first_byte_deadline() const;
  // Whether a candidate after order[k] may still be tried.
  bool more_candidates(const route::Decision& d, std::span<const route::CandidateTerms> order, size_t k) const;
  void prepare_exchange(Session& s, Exchange& x);
  // exact_tokens.cc: the prompt's tokens for exact routing, into s.prep.exact.
  boost::asio::awaitable<void> fetch_exact_tokens(Session& s);
  // RJ_EXACT_TOKENS=local: true when the profile refuses the request (then remote_exact_tokens).
  boost::asio::awaitable<bool> local_exact_tokens(Session& s, std::chrono::milliseconds wait);
  boost::asio::awaitable<void> remote_exact_tokens(Session& s, std::chrono::milliseconds wait);  // POST /tokenize
  // Serialises the upstream request head for `engine` into s.out, for a body of `body_size` bytes
  // (and X-Data-Parallel-Rank when `header_rank`); returns its field count.
  size_t build_request_head(Session& s, const config::UpstreamUrl& engine, std::optional<uint32_t> header_rank,
                            size_t body_size);
  // What ramjet writes into the body `member` gets for exchange `x` (owned_body.h): an SGLang
  // rank, vLLM's priority, or nothing.
  request::BodyEdit body_edit(const Exchange& x, const net::Member& member) const;
  // The edited body (owned_body.h): edited_body_size() finds the client's members of the owned
  // names (once per request and kind) and makes ramjet's; add_edited_body() adds the pieces after
  // the head.
  size_t edited_body_size(Session& s, request::BodyEdit edit, std::optional<int64_t> value);
  void add_edited_body(Session& s);
  bool upstream_head_fits(Session& s);
  // disagg.cc: prefill/decode disaggregation. The engines of `pool` (null: all) that decode go to
  // s.decode_set, those that prefill to s.prefill_set; returns the request's candidates: the
  // decode set when one of them is in service, else `pool` (served whole wherever it can be).
  const upstream::EngineSet* role_pools(Session& s, const upstream::EngineSet* pool);
  // Decides whether the request goes in two legs (`routed` placed its decode leg) and runs the
  // prefill leg; true: dispatch the decode leg (with s.kv_params, or whole), false: answered.
  boost::asio::awaitable<bool> disaggregate(Session& s, Exchange& x, const route::Routed& routed);
  enum class LegResult { kOk, kFailed, kAnswered, kClientGone };
  // `movable`: another prefill engine or the whole request can follow this leg (a fence moves it on).
  boost::asio::awaitable<LegResult> prefill_leg(Session& s, Exchange& x, const route::CandidateTerms& c,
                                                bool movable);
  // A prefill leg failed on engine `u` after it was sent: held (x.first_failure) until another
  // prefill engine's leg says whose fault it was, as dispatch holds a sent failure.
  void leg_failed(Exchange& x, size_t u, upstream::Failure failure, Blame how);
  // The prompt tokens engine `d` would compute for the request (exact or fingerprint overlap).
  uint64_t uncached_estimate(const Session& s, const route::Routed& routed, size_t d) const;
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
  // The waiting room (config_.admission): true when the request may go on (s.room then holds the
  // engines with room it is placed among), false when it was answered (429) or its client left.
  boost::asio::awaitable<bool> admit(Session& s, Exchange& x);
  // The request's priority class into s.cls: batch for a key of RJ_ADMISSION_BATCH_KEYS or, where
  // the operator allows the header, a client that says batch; interactive otherwise.
  void admission_class(Session& s);
  // Whether an engine of `pool` (null: all) is parked and coming back; if so, asks the idle drain
  // to wake one now (scale from zero).
  bool parked_pool_coming(const upstream::EngineSet* pool) const;
  // Requests engine `i` can take now under the admission caps, `extra` past its in-flight cap
  // (burst slots; 0: saturated or not in service).
  uint64_t engine_room(size_t i, int64_t now_ms, uint32_t extra = 0) const;
  // The requests `pool` (null: every engine) can take now, its engines with room added to
  // `with_room` (when given): what the waiting room waits on and where an admitted request goes.
  // `extra`: burst slots past each engine's in-flight cap count too.
  uint64_t pool_room(const upstream::EngineSet* pool, upstream::EngineSet* with_room, uint32_t extra = 0) const;
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
