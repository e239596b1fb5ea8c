// loadgen/client: HTTP/1.1 exchanges for ramjet-bench on one io thread. Keep-alive idle pools
// per target (never shared across threads, so no locks), one retry when a reused connection
// turns out stale before any byte arrived, and deadlines enforced by a per-thread watchdog that
// scans in-flight exchanges (cheaper than a timer per socket operation). Response bytes are
// parsed by http1.h and handed to a BodySink with their arrival time.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "http1.h"

namespace ramjet::bench {

using Clock = std::chrono::steady_clock;

struct Target {
  Url url;
  std::vector<boost::asio::ip::tcp::endpoint> addrs;  // resolved once at start-up
};

// Receives one response. on_head is called once, before any body byte.
class BodySink {
 public:
  virtual ~BodySink() = default;
  virtual void on_head(const ResponseParser& head) = 0;
  virtual void on_body(std::string_view bytes, Clock::time_point arrived) = 0;
};

struct ExchangeResult {
  std::string error;  // "" when a complete response arrived (whatever its status)
  unsigned status = 0;
  std::string upstream;  // X-Ramjet-Upstream
  Clock::time_point sent;  // when the request was written (after connecting)
};

struct Conn;

class Client {
 public:
  Client(boost::asio::io_context& ctx, std::vector<Target> targets,
         std::chrono::milliseconds connect_timeout, size_t max_idle = 4096);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  size_t targets() const { return targets_.size(); }
  const Url& url(size_t target) const { return targets_[target].url; }

  // Sends `head` + `body` to `target` and streams the response into `sink`. The whole exchange
  // (connect included) must finish before `deadline`.
  boost::asio::awaitable<ExchangeResult> exchange(size_t target, std::string_view head,
                                                  std::string_view body, BodySink& sink,
                                                  Clock::time_point deadline);

  // Closes every idle connection (before the io_context goes away).
  void close_idle();
  // The watchdog coroutine; spawn once on the client's io_context. Ends after stop().
  boost::asio::awaitable<void> watchdog();
  void stop() { stopped_ = true; }

  struct Deadline;  // an in-flight exchange the watchdog may cancel

 private:
  struct Guard;  // RAII: links a Deadline into the watchdog's list for one scope
  boost::asio::awaitable<std::unique_ptr<Conn>> connect(size_t target, std::string& error,
                                                        Clock::time_point deadline);
  std::unique_ptr<Conn> take_idle(size_t target);
  void link(Deadline* d);
  void unlink(Deadline* d);

  boost::asio::io_context& ctx_;
  std::vector<Target> targets_;
  std::chrono::milliseconds connect_timeout_;
  size_t max_idle_;
  std::vector<std::vector<std::unique_ptr<Conn>>> idle_;  // per target
  Deadline* deadlines_ = nullptr;                          // intrusive list head
  bool stopped_ = false;
};

// Resolves a URL's host once (blocking; called before the load starts).
Result<Target> resolve_target(const Url& url);

}  // namespace ramjet::bench
