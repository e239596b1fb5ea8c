// net/io_pool: one io_context per thread. A connection lives on one thread for its whole life
// (its upstream connections too), so per-connection state needs no locks, and neither does Asio's
// own per-socket state: a socket on a pool context must only be used from that context's thread
// (post to it; io_pool.cc).
#pragma once

#include <boost/asio/io_context.hpp>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace ramjet::net {

class IoPool {
 public:
  explicit IoPool(size_t threads);
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  size_t size() const { return contexts_.size(); }
  boost::asio::io_context& at(size_t i) { return *contexts_[i]; }
  boost::asio::io_context& next();  // round robin, for accepted connections

  // Runs every context on its own thread (the caller's thread runs context 0) until stop().
  void run();
  void stop();
  // Destroys the contexts and every handler and coroutine frame still pending in them. Call after
  // run() returned, once sockets and timers owned outside coroutines are gone, and while the
  // objects those coroutines reference are still alive.
  void destroy();

  // Index of the io thread the caller runs on, or size() when called from elsewhere.
  static size_t current_index();

 private:
  std::vector<std::unique_ptr<boost::asio::io_context>> contexts_;
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guards_;
  std::atomic<size_t> next_{0};
};

}  // namespace ramjet::net
