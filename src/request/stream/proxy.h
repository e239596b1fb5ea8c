// request/stream/proxy: the data plane. Serves one client connection (keep-alive, limits,
// timeouts), answers /health itself, prepares and routes every other request, forwards it with
// retry before the first response byte, and relays the response chunk by chunk with
// backpressure, cancelling the upstream the moment the client goes away.
// Policies live in request/route, engine state in upstream/, body rules in request/prepare.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "net/client.h"
#include "net/io_pool.h"
#include "request/prepare/prepare.h"
#include "request/route/router.h"
#include "request/stream/metrics.h"
#include "upstream/fleet.h"

namespace ramjet::observe {
class Journal;
class DecisionLog;
}

namespace ramjet::request {

struct ProxyConfig {
  uint64_t max_body_bytes = 64ull << 20;
  uint32_t max_header_bytes = 64 * 1024;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{60000};
  std::chrono::milliseconds keepalive_timeout{75000};
  std::chrono::milliseconds connect_timeout{5000};
  uint64_t advertise_ctx_margin = 16384;
  size_t max_models_body = 16u << 20;
  PrepareConfig prepare;
  // RJ_ROUTE_PHASE_AWARE_LOAD: at a streaming response's first generated token the request's
  // reservation shrinks to one decode unit.
  bool phase_aware_load = true;
};

class Proxy {
 public:
  Proxy(ProxyConfig config, upstream::Fleet& fleet, route::Router& router, net::IoPool& io,
        net::PoolSet& pools, const Clock& clock);
  ~Proxy();

  // Connection handler for the API listener.
  boost::asio::awaitable<void> serve(boost::asio::ip::tcp::socket socket);

  // Graceful drain: idle keep-alive connections are closed now, busy ones after their current
  // response. Thread-safe.
  void begin_drain();
  int64_t active_requests() const { return metrics_.inflight.get(); }
  int64_t open_connections() const { return connections_.load(); }

  // RJ_ROUTE_JOURNAL: a start record per routed request, a finish record when it ends. Set
  // before serving; the journal must outlive the proxy's connections.
  void set_journal(observe::Journal* journal) { journal_ = journal; }
  // The dashboard's in-memory log of the last routing decisions (set before serving).
  void set_decision_log(observe::DecisionLog* log) { decisions_ = log; }
  // Told of every complete 200 chat or completions response, after its last byte went out:
  // (engine, chat?, the request body as forwarded). Must not block (the tokenizer shadow queues
  // it). Set before serving.
  using CompletionObserver = std::function<void(size_t engine, bool chat, std::string_view body)>;
  void set_completion_observer(CompletionObserver f) { completion_observer_ = std::move(f); }

  ProxyMetrics& metrics() { return metrics_; }
  const ProxyMetrics& metrics() const { return metrics_; }

 private:
  struct Session;
  struct Exchange;
  struct Attempt;
  enum class RelayResult { kComplete, kClientGone, kUpstreamError };
  boost::asio::awaitable<void> forward(Session& s, Exchange& x);
  void prepare_exchange(Session& s, Exchange& x);
  void build_request_head(Session& s, size_t engine);
  bool build_response_head(Session& s, Exchange& x, const upstream::Engine& engine, bool* chunked);
  void account_pieces(Session& s, Exchange& x);
  void finish_usage(Session& s, Exchange& x);
  void journal_start(Session& s, const route::Routed& routed, uint64_t seq);
  void journal_finish(Session& s, const Exchange& x, uint64_t seq, std::string_view result,
                      std::optional<size_t> upstream, uint32_t units);
  boost::asio::awaitable<RelayResult> relay_models(Session& s, Exchange& x, Attempt& a);
  boost::asio::awaitable<void> send_local(Session& s, Exchange& x, unsigned status,
                                          std::string_view content_type, std::string_view body);
  boost::asio::awaitable<void> send_error(Session& s, Exchange& x, unsigned status,
                                          std::string_view message, std::string_view type);

  ProxyConfig config_;
  upstream::Fleet& fleet_;
  route::Router& router_;
  observe::Journal* journal_ = nullptr;
  observe::DecisionLog* decisions_ = nullptr;
  CompletionObserver completion_observer_;
  net::IoPool& io_;
  net::PoolSet& pools_;
  const Clock& clock_;
  ProxyMetrics metrics_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> connections_{0};
  // Sessions waiting for their next request: an intrusive list per io thread (touched only on
  // that thread).
  std::vector<Session*> idle_;
  void set_idle(Session& s, bool idle);
  std::vector<std::string> host_headers_;  // per engine ordinal: the Host header sent upstream
};

}  // namespace ramjet::request
