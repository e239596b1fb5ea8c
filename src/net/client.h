// net/client: upstream connections. Connecting with a deadline, per-thread idle keep-alive
// pools (one per engine per io thread, never shared across threads, so no locks), and a small
// one-shot GET used by health probes. Request forwarding itself lives in request/stream.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "net/deadline.h"
#include "net/stream.h"

namespace ramjet::net {

// A connection in non-blocking mode (plain writes are tried synchronously first; https://
// engines under TLS, net/stream.h), its read buffer and its deadline (the data plane's
// first-byte and idle timeouts).
struct UpstreamConnection {
  explicit UpstreamConnection(const boost::asio::any_io_executor& ex) : stream(ex), deadline(stream.socket()) {
    buffer.reserve(16 * 1024);  // reads fill at most the free capacity
  }
  Stream stream;
  Deadline deadline;
  boost::beast::flat_buffer buffer;
  bool reused = false;  // came from the idle pool (a failure before any byte may be a stale close)
  uint64_t incarnation = 0;  // the engine it was made to (net/roster.h): another one in its slot never gets it
  int64_t idle_since_ms = 0;  // when it went into the idle pool (the caller's Clock, common/clock.h)
};
using ConnectionPtr = std::unique_ptr<UpstreamConnection>;

// Idle keep-alive connections to one engine, owned by one io thread.
// A connection idle for kIdleCheckAfterMs or longer is asked whether the engine closed it or sent
// bytes nobody asked for (a recv with MSG_PEEK) before it is taken: engines close idle keep-alive
// connections after seconds (vLLM and SGLang through uvicorn: 5 s). One idle for less is taken
// unasked unless the caller asks (`ask`): under load that is every request, and the question is a
// system call each; an engine that closed it in that second all the same (it restarted) fails the
// request's first attempt before any answer, which the proxy makes again on a new connection
// (request/stream's stale retry). A connection is put back only with nothing left unread in its
// buffer: bytes after a complete response (an engine answering twice) make it unusable.
class IdlePool {
 public:
  static constexpr int64_t kIdleCheckAfterMs = 1000;

  explicit IdlePool(size_t max_idle = 64) : max_idle_(max_idle) {}
  IdlePool(IdlePool&&) = default;
  IdlePool& operator=(IdlePool&&) = default;
  // The most recently used idle connection to `incarnation` that still looks open, or nullptr
  // (connections to an engine that left the slot are closed). `now_ms`: the caller's monotonic
  // time (common/clock.h; the proxy passes the dispatch time it has just read). `ask`: every
  // connection is asked, however recently it was put back (a request whose retry would cost more
  // than the question).
  ConnectionPtr take(int64_t now_ms, uint64_t incarnation = 0, bool ask = false);
  // Keeps a connection whose response was fully read and that may be reused (closes it when its
  // buffer still holds bytes). `now_ms`: as take()'s, on the same clock (a coarse reading, a tick
  // behind, only makes a connection look idle that much longer or shorter).
  void put(ConnectionPtr c, int64_t now_ms);
  size_t size() const { return idle_.size(); }
  void clear() { idle_.clear(); }  // closes them (on the owning thread)

 private:
  size_t max_idle_;
  std::vector<ConnectionPtr> idle_;
};

// Pools for every (io thread, engine) pair.
class PoolSet {
 public:
  PoolSet(size_t threads, size_t engines, size_t max_idle);
  IdlePool& at(size_t thread, size_t engine) { return pools_[thread][engine]; }
  void clear() { pools_.clear(); }  // closes every idle connection (before the io contexts go)

 private:
  std::vector<std::vector<IdlePool>> pools_;
};

// kTls: the TLS handshake with an https:// engine failed (its reason is counted on the engine's
// net::TlsTarget).
enum class ConnectFailure { kNone, kTimeout, kConnect, kCancelled, kTls };

// Resolves and connects with a deadline (an https:// URL: the TCP connect and the TLS handshake
// under the same one). On failure returns nullptr and sets `failure`.
// `out` (optional) receives the connection object as soon as it exists, so a caller can close
// it from another coroutine (client disconnect) while the connect is pending.
boost::asio::awaitable<ConnectionPtr> connect(const config::UpstreamUrl& url,
                                              std::chrono::milliseconds timeout,
                                              ConnectFailure& failure,
                                              UpstreamConnection** out = nullptr);

struct SimpleResponse {
  unsigned status = 0;
  std::string body;
};
enum class GetFailure { kNone, kTimeout, kConnect, kProtocol, kTooLarge, kTls };

// One GET on a fresh connection (Connection: close), whole exchange under one deadline.
boost::asio::awaitable<SimpleResponse> simple_get(const config::UpstreamUrl& url, std::string path,
                                                  std::string bearer,
                                                  std::chrono::milliseconds timeout,
                                                  size_t max_body, GetFailure& failure);
// One POST of a JSON body, likewise (the tokenizer shadow's /tokenize calls).
// `dp_rank`: X-Data-Parallel-Rank (the probe of one data-parallel rank).
boost::asio::awaitable<SimpleResponse> simple_post(const config::UpstreamUrl& url, std::string path,
                                                   std::string json_body, std::string bearer,
                                                   std::chrono::milliseconds timeout,
                                                   size_t max_body, GetFailure& failure,
                                                   std::optional<uint32_t> dp_rank = std::nullopt);

// Runs one simple_get/simple_post to completion on `io`, a context of the calling thread's own
// (CLI tools and worker threads outside the io pool). Returns false, with the call abandoned,
// when `abandon` is set or io is stopped from another thread before the call completes; an
// exception from the call is a kProtocol failure.
bool run_to_completion(boost::asio::io_context& io, boost::asio::awaitable<SimpleResponse> op,
                       SimpleResponse& out, GetFailure& failure,
                       const std::atomic<bool>* abandon = nullptr);

}  // namespace ramjet::net
