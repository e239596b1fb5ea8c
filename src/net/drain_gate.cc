#include "net/drain_gate.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

namespace ramjet::net {

namespace asio = boost::asio;

struct DrainGate::Waiter {
  Waiter(const asio::any_io_executor& e) : ex(e), timer(e) {}
  asio::any_io_executor ex;
  asio::steady_timer timer;
  std::function<void(bool)> done;
};

DrainGate::~DrainGate() { abandon(); }

void DrainGate::abandon() {
  std::shared_ptr<Waiter> w;
  {
    std::lock_guard lock(mu_);
    w = std::move(waiter_);
  }
  if (w) w->done = nullptr;  // the timer's handler finds no waiter and returns
}

void DrainGate::Hold::release() {
  if (gate_ == nullptr) return;
  DrainGate* g = gate_;
  gate_ = nullptr;
  g->leave();
}

DrainGate::Hold DrainGate::enter() {
  std::lock_guard lock(mu_);
  if (closed_) return Hold();
  ++holders_;
  return Hold(this);
}

void DrainGate::close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  if (holders_ == 0) settle_locked(true);
}

bool DrainGate::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

size_t DrainGate::holders() const {
  std::lock_guard lock(mu_);
  return holders_;
}

void DrainGate::leave() {
  std::lock_guard lock(mu_);
  --holders_;
  if (closed_ && holders_ == 0) settle_locked(true);
}

void DrainGate::settle_locked(bool drained) {
  if (!waiter_ || !waiter_->done) return;
  std::shared_ptr<Waiter> w = std::move(waiter_);
  auto done = std::move(w->done);
  w->done = nullptr;
  // The callback runs on the waiter's executor, never under the lock; the timer goes with it.
  asio::post(w->ex, [w, done = std::move(done), drained] {
    w->timer.cancel();
    done(drained);
  });
}

void DrainGate::async_wait(const asio::any_io_executor& ex, std::chrono::milliseconds grace,
                           std::function<void(bool drained)> done) {
  auto w = std::make_shared<Waiter>(ex);
  w->done = std::move(done);
  std::lock_guard lock(mu_);
  waiter_ = w;
  if (closed_ && holders_ == 0) {
    settle_locked(true);
    return;
  }
  w->timer.expires_after(grace);
  w->timer.async_wait([this, weak = std::weak_ptr<Waiter>(w)](boost::system::error_code ec) {
    if (ec) return;  // cancelled: drained in time
    auto w = weak.lock();
    if (!w) return;
    std::lock_guard lock(mu_);
    if (waiter_ == w) settle_locked(false);
  });
}

}  // namespace ramjet::net
