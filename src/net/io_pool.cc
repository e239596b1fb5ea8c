#include "net/io_pool.h"

namespace ramjet::net {
namespace {
thread_local size_t t_index = static_cast<size_t>(-1);
}

IoPool::IoPool(size_t threads) {
  if (threads == 0) threads = 1;
  for (size_t i = 0; i < threads; ++i) {
    // One thread runs each context, and every socket and acceptor on it is used from that thread
    // only (posted there from elsewhere; net/listener hands accepted connections over by their
    // descriptor): Asio's per-socket lock is left out (about 1,500 instructions per streamed
    // request, two lock/unlock pairs per read). The scheduler stays locked: other threads post.
    contexts_.push_back(std::make_unique<boost::asio::io_context>(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO));
    guards_.push_back(boost::asio::make_work_guard(*contexts_.back()));
  }
}

boost::asio::io_context& IoPool::next() {
  return *contexts_[next_.fetch_add(1, std::memory_order_relaxed) % contexts_.size()];
}

void IoPool::run() {
  std::vector<std::thread> threads;
  for (size_t i = 1; i < contexts_.size(); ++i) {
    threads.emplace_back([this, i] {
      t_index = i;
      contexts_[i]->run();
    });
  }
  t_index = 0;
  contexts_[0]->run();
  for (auto& t : threads) t.join();
  t_index = static_cast<size_t>(-1);
}

void IoPool::stop() {
  for (auto& g : guards_) g.reset();
  for (auto& c : contexts_) c->stop();
}

void IoPool::destroy() {
  guards_.clear();
  contexts_.clear();
}

size_t IoPool::current_index() { return t_index; }

}  // namespace ramjet::net
