// render::render_pool: a bounded pool of worker threads for CPU-bound render work (rendering and
// encoding prompts), usable from a Boost.Asio coroutine without blocking its io thread.
//
// Bounds: N threads; a queue of at most max_jobs jobs and max_bytes bytes (the sizes submitters
// declare). A full queue, a stopped pool or a deadline already passed is a typed refusal at
// once; a queued job whose deadline passes before a worker takes it is skipped, not run.
// Awaiting (async_run / run): the job's value or a refusal is delivered on the awaiting
// coroutine's executor, at the latest at the deadline (the job, if already running, finishes
// on its worker and its value is dropped); cancelling the awaiting operation (its cancellation
// slot) refuses with kCancelled. Fire-and-forget jobs (post) have no awaiter.
// Not here: what a job does (render/service/shadow_comparer.h, later exact routing), metrics
// (callers count refusals; queued() is for their gauges).
//
// Lifetime: stop() before the io contexts of any awaiting coroutine are destroyed (it refuses the
// queued jobs and joins the workers, so nothing is delivered to a context afterwards). Awaiting
// executors are single-threaded (ramjet runs one io_context per thread) or strands.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/result.h"

namespace ramjet::render {

// Why a job gave no value (stable labels).
enum class PoolRefusal : uint8_t {
  kQueueFull,  // max_jobs or max_bytes queued already
  kDeadline,   // the deadline passed before the job ran (or, awaiting, before it finished)
  kStopping,   // the pool is not running (not started, or begin_stop() was called)
  kCancelled,  // the awaiting operation was cancelled
  kFailed,     // the job threw
};
inline constexpr size_t kPoolRefusalCount = 5;
std::string_view to_string(PoolRefusal r);  // queue_full|deadline|stopping|cancelled|job_failed

struct RenderPoolLimits {
  size_t threads = 1;
  size_t max_jobs = 8;           // queued (not yet running) jobs
  size_t max_bytes = 64u << 20;  // their declared bytes
};

class RenderPool {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr Clock::time_point kNoDeadline = Clock::time_point::max();

  // One unit of work. run() is called on a worker; refuse() instead when the job is not run
  // (either exactly once, on whichever thread decides). Neither may block on an io thread's work.
  class Job {
   public:
    virtual ~Job() = default;
    virtual void run() = 0;  // an exception is caught by the worker (logged)
    virtual void refuse(PoolRefusal why) noexcept = 0;
  };

  explicit RenderPool(RenderPoolLimits limits);
  ~RenderPool();  // stop()
  RenderPool(const RenderPool&) = delete;
  RenderPool& operator=(const RenderPool&) = delete;

  // Starts the workers (once). Before it, every submission is refused with kStopping.
  void start();
  // Refuses new submissions and every queued job (kStopping); never blocks (safe on an io thread).
  // Running jobs finish on their workers.
  void begin_stop() noexcept;
  // begin_stop(), then joins the workers (each finishes at most the job it is running).
  void stop();

  const RenderPoolLimits& limits() const { return limits_; }
  size_t queued() const;        // jobs waiting for a worker
  size_t queued_bytes() const;  // their declared bytes

  // Queues `job` (declared size `bytes`), or refuses it at once: the refusal is returned and
  // job->refuse() is called first. Never blocks beyond the queue's lock; never throws.
  std::optional<PoolRefusal> submit(std::unique_ptr<Job> job, size_t bytes,
                                    Clock::time_point deadline = kNoDeadline) noexcept;

  // Fire-and-forget: f() runs on a worker unless refused (returned; f is then destroyed unrun).
  template <typename F>
  std::optional<PoolRefusal> post(size_t bytes, Clock::time_point deadline, F f) noexcept;

  // Awaitable: completes with Result<R, PoolRefusal> where R = f()'s type (not void), on the
  // executor associated with `token`'s handler (use_awaitable: the awaiting coroutine's).
  template <typename F, typename CompletionToken>
  auto async_run(Clock::time_point deadline, size_t bytes, F f, CompletionToken&& token);

  // co_await pool.run(deadline, bytes, f): async_run with use_awaitable.
  template <typename F>
  boost::asio::awaitable<Result<std::invoke_result_t<F&>, PoolRefusal>> run(
      Clock::time_point deadline, size_t bytes, F f) {
    co_return co_await async_run(deadline, bytes, std::move(f), boost::asio::use_awaitable);
  }

 private:
  struct Queued {
    std::unique_ptr<Job> job;
    size_t bytes;
    Clock::time_point deadline;
  };
  void worker();

  RenderPoolLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> queue_;
  size_t queued_bytes_ = 0;
  bool running_ = false;  // start() called, begin_stop() not yet
  bool started_ = false;
  std::vector<std::thread> threads_;
};

namespace detail {

template <typename F>
class PostedJob final : public RenderPool::Job {
 public:
  explicit PostedJob(F f) : f_(std::move(f)) {}
  void run() override { f_(); }
  void refuse(PoolRefusal) noexcept override {}

 private:
  F f_;
};

// The shared state of one awaited job: its handler, the deadline timer on the handler's
// executor, and who completed it (the worker, the timer, a cancellation or a refusal; the first
// wins). Completion always runs on the handler's executor, which also owns the timer.
template <typename R, typename Handler>
class AwaitedOp : public std::enable_shared_from_this<AwaitedOp<R, Handler>> {
 public:
  using Value = Result<R, PoolRefusal>;
  using Executor = boost::asio::associated_executor_t<Handler>;

  AwaitedOp(Handler h, const Executor& ex)
      : handler_(std::move(h)), executor_(ex), work_(ex), timer_(ex) {}

  // On the handler's executor, before the job is queued.
  void arm(RenderPool::Clock::time_point deadline) {
    auto self = this->shared_from_this();
    if (deadline != RenderPool::kNoDeadline) {
      timer_.expires_at(deadline);
      timer_.async_wait([self](const boost::system::error_code& ec) {
        if (!ec) self->finish(PoolRefusal::kDeadline);
      });
    }
    auto slot = boost::asio::get_associated_cancellation_slot(handler_);
    if (slot.is_connected()) {
      slot.assign([weak = this->weak_from_this()](boost::asio::cancellation_type) {
        if (auto op = weak.lock()) op->finish(PoolRefusal::kCancelled);
      });
    }
  }

  // Whether the job should still run (nobody has completed the operation yet).
  bool pending() const { return !claimed_.load(std::memory_order_acquire); }

  // From any thread: the first caller completes the operation with `v` on the executor. The
  // caller's reference moves to the executor with it, so the operation (and its timer) is
  // always released there, never on a worker after the io context is gone.
  static void complete(std::shared_ptr<AwaitedOp> self, Value v) {
    const Executor ex = self->executor_;
    if (self->claimed_.exchange(true, std::memory_order_acq_rel)) {
      boost::asio::post(ex, [self = std::move(self)] {});  // already completed: only the release
      return;
    }
    self->result_.emplace(std::move(v));
    boost::asio::post(ex, [self = std::move(self)] { self->deliver(); });
  }

 private:
  // On the executor (timer or cancellation slot).
  void finish(PoolRefusal why) {
    if (claimed_.exchange(true, std::memory_order_acq_rel)) return;
    result_.emplace(why);
    deliver();
  }
  void deliver() {
    timer_.cancel();
    auto slot = boost::asio::get_associated_cancellation_slot(handler_);
    if (slot.is_connected()) slot.clear();
    Value v = std::move(*result_);
    result_.reset();
    // Completed from the executor's own context (a posted function or a timer/cancellation
    // handler): the handler may run inline.
    boost::asio::dispatch(executor_, [h = std::move(handler_), v = std::move(v)]() mutable {
      std::move(h)(std::move(v));
    });
    work_.reset();
  }

  Handler handler_;
  Executor executor_;
  boost::asio::executor_work_guard<Executor> work_;  // the awaiting context keeps running meanwhile
  boost::asio::steady_timer timer_;
  std::atomic<bool> claimed_{false};
  std::optional<Value> result_;
};

template <typename R, typename Handler, typename F>
class AwaitedJob final : public RenderPool::Job {
 public:
  AwaitedJob(std::shared_ptr<AwaitedOp<R, Handler>> op, F f)
      : op_(std::move(op)), f_(std::move(f)) {}
  using Op = AwaitedOp<R, Handler>;
  // Destroyed unrun (not expected: the pool runs or refuses every job): refused as stopping.
  ~AwaitedJob() override {
    if (op_) Op::complete(std::move(op_), PoolRefusal::kStopping);
  }
  void run() override {
    if (!op_->pending()) {  // the deadline passed or the awaiter went away: skipped
      Op::complete(std::move(op_), PoolRefusal::kDeadline);
      return;
    }
    std::optional<typename Op::Value> v;
    try {
      v.emplace(f_());
    } catch (...) {
      v.emplace(PoolRefusal::kFailed);
    }
    Op::complete(std::move(op_), std::move(*v));
  }
  void refuse(PoolRefusal why) noexcept override {
    if (op_) Op::complete(std::move(op_), why);
  }

 private:
  std::shared_ptr<AwaitedOp<R, Handler>> op_;
  F f_;
};

}  // namespace detail

template <typename F>
std::optional<PoolRefusal> RenderPool::post(size_t bytes, Clock::time_point deadline,
                                            F f) noexcept {
  std::unique_ptr<Job> job;
  try {
    job = std::make_unique<detail::PostedJob<F>>(std::move(f));
  } catch (...) {
    return PoolRefusal::kQueueFull;  // out of memory for the job
  }
  return submit(std::move(job), bytes, deadline);
}

template <typename F, typename CompletionToken>
auto RenderPool::async_run(Clock::time_point deadline, size_t bytes, F f, CompletionToken&& token) {
  using R = std::invoke_result_t<F&>;
  static_assert(!std::is_void_v<R>, "a render job returns a value");
  using Signature = void(Result<R, PoolRefusal>);
  return boost::asio::async_initiate<CompletionToken, Signature>(
      [this, deadline, bytes](auto handler, F fn) {
        using Handler = decltype(handler);
        const auto ex = boost::asio::get_associated_executor(handler);
        auto op = std::make_shared<detail::AwaitedOp<R, Handler>>(std::move(handler), ex);
        op->arm(deadline);
        std::unique_ptr<Job> job;
        try {
          job = std::make_unique<detail::AwaitedJob<R, Handler, F>>(op, std::move(fn));
        } catch (...) {
          detail::AwaitedOp<R, Handler>::complete(std::move(op), PoolRefusal::kQueueFull);
          return;
        }
        submit(std::move(job), bytes, deadline);  // a refusal completes op (posted)
      },
      token, std::move(f));
}

}  // namespace ramjet::render
