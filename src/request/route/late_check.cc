#include "request/route/late_check.h"

#include <algorithm>
#include <utility>

namespace ramjet::route {

LateCheck::LateCheck(PredictionCheck& check, Lookup lookup, HeldSince held_since, LateCheckConfig config,
                     const Clock& clock)
    : check_(check),
      lookup_(std::move(lookup)),
      held_since_(std::move(held_since)),
      config_(config),
      clock_(clock),
      worker_([this] { run(); }) {}

LateCheck::~LateCheck() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

bool LateCheck::explained(const Misprediction& u) const {
  if (u.over()) {
    if (!held_since_) return false;
    const std::optional<bool> held = held_since_(u.engine, u.tokens, u.model, u.cache_salt, u.cached, u.stamp);
    return held && !*held;
  }
  const std::optional<uint32_t> now = lookup_(u.engine, u.tokens, u.model, u.cache_salt);
  return now && *now + check_.tolerance_tokens(u.block_size) >= u.cached;
}

void LateCheck::record(const Misprediction& u, bool explained) {
  if (explained && u.over()) check_.record_evicted(u.engine, u.regret_tokens);
  else if (explained) check_.record_late(u.engine, u.regret_tokens);
  else check_.record(u.engine, u.predicted, u.cached, u.block_size, u.regret_tokens);
}

namespace {

bool later(const auto& a, const auto& b) { return a.due_ms > b.due_ms; }

}  // namespace

void LateCheck::submit(Misprediction u) {
  if (explained(u)) {
    record(u, true);
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (!stopping_ && queue_.size() < config_.max_pending) {
      const int64_t now = clock_.now_ms();
      const int64_t first = std::min(config_.first_retry_ms, config_.delay_ms);
      queue_.push_back(Look{now + first, now + config_.delay_ms, 2 * first, std::move(u)});
      std::push_heap(queue_.begin(), queue_.end(), [](const Look& a, const Look& b) { return later(a, b); });
      cv_.notify_one();
      return;
    }
  }
  record(u, false);  // no room for another look: as it stands
}

size_t LateCheck::pending() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void LateCheck::run() {
  auto cmp = [](const Look& a, const Look& b) { return later(a, b); };
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (queue_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const int64_t wait_ms = queue_.front().due_ms - clock_.now_ms();
    if (wait_ms > 0) {
      cv_.wait_for(lock, std::chrono::milliseconds(wait_ms));
      continue;
    }
    std::pop_heap(queue_.begin(), queue_.end(), cmp);
    Look look = std::move(queue_.back());
    queue_.pop_back();
    lock.unlock();
    const bool why = explained(look.u);
    const int64_t now = clock_.now_ms();
    if (!why && now < look.deadline_ms) {  // not yet: look again later
      lock.lock();
      look.due_ms = std::min(now + look.wait_ms, look.deadline_ms);
      look.wait_ms *= 2;
      queue_.push_back(std::move(look));
      std::push_heap(queue_.begin(), queue_.end(), cmp);
      continue;
    }
    record(look.u, why);
    lock.lock();
  }
}

}  // namespace ramjet::route
