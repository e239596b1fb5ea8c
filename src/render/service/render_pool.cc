// render::render_pool (see render_pool.h).
#include "render/service/render_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace ramjet::render {

std::string_view to_string(PoolRefusal r) {
  switch (r) {
    case PoolRefusal::kQueueFull:
      return "queue_full";
    case PoolRefusal::kDeadline:
      return "deadline";
    case PoolRefusal::kStopping:
      return "stopping";
    case PoolRefusal::kCancelled:
      return "cancelled";
    case PoolRefusal::kFailed:
      return "job_failed";
  }
  return "unknown";
}

RenderPool::RenderPool(RenderPoolLimits limits) : limits_(limits) {}

RenderPool::~RenderPool() {
  stop();
}

void RenderPool::start() {
  std::lock_guard lock(mu_);
  if (started_) return;
  started_ = running_ = true;
  const size_t n = std::max<size_t>(1, limits_.threads);
  for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { worker(); });
}

void RenderPool::begin_stop() noexcept {
  std::deque<Queued> dropped;
  {
    std::lock_guard lock(mu_);
    running_ = false;
    dropped.swap(queue_);
    queued_bytes_ = 0;
  }
  cv_.notify_all();
  for (Queued& q : dropped) q.job->refuse(PoolRefusal::kStopping);
}

void RenderPool::stop() {
  begin_stop();
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

size_t RenderPool::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

size_t RenderPool::queued_bytes() const {
  std::lock_guard lock(mu_);
  return queued_bytes_;
}

std::optional<PoolRefusal> RenderPool::submit(std::unique_ptr<Job> job, size_t bytes,
                                              Clock::time_point deadline) noexcept {
  std::optional<PoolRefusal> refusal;
  if (deadline != kNoDeadline && deadline <= Clock::now()) refusal = PoolRefusal::kDeadline;
  if (!refusal) {
    std::lock_guard lock(mu_);
    if (!running_) {
      refusal = PoolRefusal::kStopping;
    } else if (queue_.size() >= limits_.max_jobs || bytes > limits_.max_bytes ||
               queued_bytes_ > limits_.max_bytes - bytes) {
      refusal = PoolRefusal::kQueueFull;
    } else {
      Queued entry{std::move(job), bytes, deadline};
      try {
        queue_.push_back(std::move(entry));  // strong guarantee: on a throw, entry keeps the job
        queued_bytes_ += bytes;
      } catch (...) {  // out of memory for the queue entry
        job = std::move(entry.job);
        refusal = PoolRefusal::kQueueFull;
      }
    }
  }
  if (refusal) {
    job->refuse(*refusal);
    return refusal;
  }
  cv_.notify_one();
  return std::nullopt;
}

void RenderPool::worker() {
  for (;;) {
    Queued q;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !running_ || !queue_.empty(); });
      if (!running_) break;
      q = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= q.bytes;
    }
    if (q.deadline != kNoDeadline && q.deadline <= Clock::now()) {
      q.job->refuse(PoolRefusal::kDeadline);  // not started in time: skipped
      continue;
    }
    try {
      q.job->run();
    } catch (const std::exception& e) {  // e.g. out of memory rendering a huge body
      spdlog::warn("render pool: job abandoned: {}", e.what());
    } catch (...) {
      spdlog::warn("render pool: job abandoned");
    }
  }
}

}  // namespace ramjet::render
