#include "net/deadline.h"

#include "common/clock.h"

namespace ramjet::net {

Deadline::Clock::time_point Deadline::coarse_now() {
  return Clock::time_point(std::chrono::nanoseconds(coarse_monotonic_ns()));
}

Deadline::Deadline(boost::asio::ip::tcp::socket& socket) : state_(std::make_shared<State>(socket)) {}

Deadline::~Deadline() {
  state_->socket = nullptr;
  state_->deadline = Clock::time_point::max();
  if (state_->waiting) state_->timer.cancel();
}

void Deadline::arm_at(Clock::time_point at) {
  State& st = *state_;
  st.expired = false;
  if (at == Clock::time_point::max()) {
    st.deadline = at;
    return;
  }
  st.deadline = at;
  if (!st.waiting || st.scheduled > st.deadline) wait(state_, st.deadline);
}

void Deadline::wait(const std::shared_ptr<State>& st, Clock::time_point at) {
  st->scheduled = at;
  st->waiting = true;
  const uint64_t generation = ++st->generation;
  st->timer.expires_at(at);  // cancels a pending wait; its completion is ignored
  st->timer.async_wait([st, generation](boost::system::error_code ec) {
    if (generation != st->generation) return;  // superseded by a nearer deadline
    st->waiting = false;
    if (ec || st->socket == nullptr || st->deadline == Clock::time_point::max()) return;
    if (Clock::now() < st->deadline) {  // re-armed since this wait began
      wait(st, st->deadline);
      return;
    }
    st->expired = true;
    st->deadline = Clock::time_point::max();
    boost::system::error_code ignored;
    st->socket->cancel(ignored);
  });
}

}  // namespace ramjet::net
