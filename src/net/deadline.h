// net/deadline: the read/write deadline of one socket, cheap enough to re-arm around every
// operation of a relay. arm() and disarm() only store a time point: one timer per socket wakes up
// no later than the armed deadline (it is moved earlier only when a shorter deadline is armed,
// and re-armed lazily when it fires early), so re-arming costs no timer operation. When the
// deadline passes, the socket's pending operations are cancelled (the socket stays open, so the
// caller can still answer, e.g. 408) and expired() turns true.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <memory>

namespace ramjet::net {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Deadline(boost::asio::ip::tcp::socket& socket);
  ~Deadline();
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

  // `after` from now as the clock's last tick had it (common/clock.h coarse_monotonic_ns: a few
  // ms behind at most, a third of a full read's cost, and a relay re-arms around every read and
  // write): the deadline comes at most that much early.
  void arm(std::chrono::milliseconds after) { arm_at(coarse_now() + after); }
  static Clock::time_point coarse_now();
  void arm_at(Clock::time_point at);
  void disarm() { state_->deadline = Clock::time_point::max(); }
  // The armed deadline passed (reset by the next arm()).
  bool expired() const { return state_->expired; }

 private:
  struct State {
    explicit State(boost::asio::ip::tcp::socket& s) : socket(&s), timer(s.get_executor()) {}
    boost::asio::ip::tcp::socket* socket;  // null once the owner is gone
    boost::asio::steady_timer timer;
    Clock::time_point deadline = Clock::time_point::max();
    Clock::time_point scheduled = Clock::time_point::max();  // when the pending wait ends
    uint64_t generation = 0;  // of the pending wait; older completions are ignored
    bool waiting = false;
    bool expired = false;
  };
  static void wait(const std::shared_ptr<State>& st, Clock::time_point at);
  std::shared_ptr<State> state_;
};

}  // namespace ramjet::net
