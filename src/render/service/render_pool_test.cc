// render::RenderPool: an awaiting coroutine gets the job's value on its own executor; deadlines
// (already passed, passing while queued, passing while running); a full queue (jobs, bytes);
// stop with jobs queued and in flight; cancellation; a throwing job; many concurrent awaiters
// on two io threads.
#include "render/service/render_pool.h"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>

namespace ramjet::render {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using Clock = RenderPool::Clock;
using IntResult = Result<int, PoolRefusal>;

// A gate a job waits on, so the test decides when a worker is free again.
struct Gate {
  std::promise<void> open_promise;
  std::shared_future<void> opened = open_promise.get_future().share();
  std::promise<void> entered_promise;
  std::future<void> entered = entered_promise.get_future();
  void open() { open_promise.set_value(); }
};

// Occupies the pool's (single) worker until gate.open(); returns once the job is running.
void occupy(RenderPool& pool, Gate& gate) {
  ASSERT_FALSE(pool.post(1, RenderPool::kNoDeadline, [&gate] {
    gate.entered_promise.set_value();
    gate.opened.wait();
  }));
  gate.entered.wait();
}

// An io_context run by its own thread until stopped.
struct IoThread {
  asio::io_context ctx;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(ctx);
  std::thread thread{[this] { ctx.run(); }};
  ~IoThread() {
    work.reset();
    thread.join();
  }
};

// Spawns `co_await pool.run(deadline, bytes, f)` on `io` and returns a future of its result.
template <typename F>
std::future<IntResult> await_on(asio::io_context& io, RenderPool& pool, Clock::time_point deadline,
                                size_t bytes, F f) {
  auto promise = std::make_shared<std::promise<IntResult>>();
  auto future = promise->get_future();
  asio::co_spawn(
      io,
      [&pool, deadline, bytes, f, promise]() -> asio::awaitable<void> {
        IntResult r = co_await pool.run(deadline, bytes, f);
        promise->set_value(std::move(r));
      },
      asio::detached);
  return future;
}

TEST(RenderPool, AnAwaitingCoroutineGetsTheValueOnItsOwnExecutor) {
  RenderPool pool({.threads = 2, .max_jobs = 4});
  pool.start();
  asio::io_context io;
  std::thread::id job_thread, resumed_thread;
  bool on_executor = false;
  std::optional<IntResult> got;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        got.emplace(co_await pool.run(Clock::now() + 60s, 10, [&] {
          job_thread = std::this_thread::get_id();
          return 42;
        }));
        resumed_thread = std::this_thread::get_id();
        on_executor = ex == io.get_executor() && io.get_executor().running_in_this_thread();
      },
      asio::detached);
  io.run();  // returns once the coroutine is done (the awaited job keeps the context running)
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->ok());
  EXPECT_EQ(got->value(), 42);
  EXPECT_NE(job_thread, std::this_thread::get_id()) << "the job ran on the io thread";
  EXPECT_EQ(resumed_thread, std::this_thread::get_id());
  EXPECT_TRUE(on_executor);
}

TEST(RenderPool, AnExpiredDeadlineIsRefusedAtOnceAndTheJobNeverRuns) {
  RenderPool pool({.threads = 1});
  pool.start();
  asio::io_context io;
  std::atomic<bool> ran{false};
  auto f = await_on(io, pool, Clock::now() - 1ms, 1, [&] {
    ran = true;
    return 1;
  });
  io.run();
  IntResult r = f.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), PoolRefusal::kDeadline);
  EXPECT_EQ(pool.post(1, Clock::now() - 1ms, [&] { ran = true; }), PoolRefusal::kDeadline);
  pool.stop();
  EXPECT_FALSE(ran);
}

TEST(RenderPool, AJobStillQueuedAtItsDeadlineIsRefusedThenAndSkipped) {
  RenderPool pool({.threads = 1});
  pool.start();
  Gate gate;
  occupy(pool, gate);
  IoThread io;
  std::atomic<bool> ran{false};
  // The worker is held until after the awaiter has its answer: the answer came from the deadline.
  auto f = await_on(io.ctx, pool, Clock::now() + 30ms, 1, [&] {
    ran = true;
    return 1;
  });
  IntResult r = f.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), PoolRefusal::kDeadline);
  EXPECT_EQ(pool.queued(), 1u);  // still queued: the worker skips it when it gets there
  gate.open();
  pool.stop();
  EXPECT_FALSE(ran) << "a job whose deadline passed before it started was run";
}

TEST(RenderPool, AJobRunningAtItsDeadlineIsAnsweredAtTheDeadline) {
  RenderPool pool({.threads = 1});
  pool.start();
  IoThread io;
  Gate gate;
  std::atomic<bool> finished{false};
  auto f = await_on(io.ctx, pool, Clock::now() + 30ms, 1, [&] {
    gate.entered_promise.set_value();
    gate.opened.wait();
    finished = true;
    return 7;
  });
  gate.entered.wait();
  IntResult r = f.get();  // while the job is still blocked
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), PoolRefusal::kDeadline);
  gate.open();
  pool.stop();
  EXPECT_TRUE(finished);  // it ran to its end; its value went nowhere
}

TEST(RenderPool, AFullQueueRefusesAtOnce) {
  RenderPool pool({.threads = 1, .max_jobs = 2, .max_bytes = 100});
  pool.start();
  Gate gate;
  occupy(pool, gate);
  std::atomic<int> ran{0};
  EXPECT_EQ(pool.post(101, RenderPool::kNoDeadline, [&] { ++ran; }),
            PoolRefusal::kQueueFull);  // bytes
  EXPECT_FALSE(pool.post(60, RenderPool::kNoDeadline, [&] { ++ran; }));
  EXPECT_EQ(pool.post(41, RenderPool::kNoDeadline, [&] { ++ran; }),
            PoolRefusal::kQueueFull);  // 60 + 41 > 100
  EXPECT_FALSE(pool.post(40, RenderPool::kNoDeadline, [&] { ++ran; }));
  EXPECT_EQ(pool.queued(), 2u);
  EXPECT_EQ(pool.queued_bytes(), 100u);
  EXPECT_EQ(pool.post(0, RenderPool::kNoDeadline, [&] { ++ran; }),
            PoolRefusal::kQueueFull);  // jobs
  // Awaiting a full pool: refused without waiting for the held worker.
  asio::io_context io;
  auto f = await_on(io, pool, RenderPool::kNoDeadline, 1, [] { return 1; });
  io.run();
  IntResult r = f.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), PoolRefusal::kQueueFull);
  gate.open();
  while (ran < 2) std::this_thread::yield();  // the two queued jobs run once the worker is free
  pool.stop();
  EXPECT_EQ(ran, 2);
}

TEST(RenderPool, StopRefusesQueuedJobsAndLetsTheRunningOneFinish) {
  RenderPool pool({.threads = 1, .max_jobs = 8});
  EXPECT_EQ(pool.post(1, RenderPool::kNoDeadline, [] {}), PoolRefusal::kStopping);  // not started
  pool.start();
  IoThread io;
  Gate gate;
  auto running = await_on(io.ctx, pool, RenderPool::kNoDeadline, 1, [&] {
    gate.entered_promise.set_value();
    gate.opened.wait();
    return 1;
  });
  gate.entered.wait();
  std::atomic<int> ran{0};
  std::vector<std::future<IntResult>> queued;
  for (int i = 0; i < 3; ++i)
    queued.push_back(await_on(io.ctx, pool, RenderPool::kNoDeadline, 1, [&] { return ++ran; }));
  ASSERT_FALSE(pool.post(1, RenderPool::kNoDeadline, [&] { ++ran; }));
  while (pool.queued() < 4) std::this_thread::yield();  // the awaiters' submissions are in
  pool.begin_stop();                                    // never blocks, though a job is running
  for (auto& f : queued) {
    IntResult r = f.get();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error(), PoolRefusal::kStopping);
  }
  EXPECT_EQ(pool.queued(), 0u);
  EXPECT_EQ(await_on(io.ctx, pool, RenderPool::kNoDeadline, 1, [] { return 1; }).get().error(),
            PoolRefusal::kStopping);
  gate.open();
  pool.stop();
  IntResult r = running.get();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), 1);
  EXPECT_EQ(ran, 0);
}

TEST(RenderPool, CancellingTheAwaitingOperationRefusesWithCancelled) {
  RenderPool pool({.threads = 1});
  pool.start();
  Gate gate;
  occupy(pool, gate);
  asio::io_context io;
  asio::cancellation_signal cancel;
  std::optional<IntResult> got;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        got.emplace(co_await pool.run(RenderPool::kNoDeadline, 1, [] { return 1; }));
      },
      asio::bind_cancellation_slot(cancel.slot(), asio::detached));
  io.poll();  // the coroutine is now waiting on the pool
  ASSERT_FALSE(got);
  cancel.emit(asio::cancellation_type::terminal);
  io.run();
  ASSERT_TRUE(got);
  ASSERT_FALSE(got->ok());
  EXPECT_EQ(got->error(), PoolRefusal::kCancelled);
  gate.open();
  pool.stop();
}

TEST(RenderPool, AThrowingJobIsRefusedAsFailed) {
  RenderPool pool({.threads = 1});
  pool.start();
  asio::io_context io;
  auto f = await_on(io, pool, RenderPool::kNoDeadline, 1,
                    []() -> int { throw std::runtime_error("boom"); });
  io.run();
  IntResult r = f.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), PoolRefusal::kFailed);
  EXPECT_FALSE(
      pool.post(1, RenderPool::kNoDeadline, [] { throw std::runtime_error("boom"); }));  // logged
  pool.stop();
}

// Two io threads, each with its own context, 400 awaiters each; a queue large enough for some
// and not all: every awaiter gets its own value (on its own thread) or queue_full.
TEST(RenderPool, ManyConcurrentAwaitersEachGetTheirOwnAnswerOnTheirOwnThread) {
  RenderPool pool({.threads = 2, .max_jobs = 256});
  pool.start();
  constexpr int kPerThread = 400;
  std::atomic<int> values{0}, full{0}, wrong{0};
  auto spawn_all = [&](asio::io_context& io) {
    for (int i = 0; i < kPerThread; ++i) {
      asio::co_spawn(
          io,
          [&, i]() -> asio::awaitable<void> {
            IntResult r = co_await pool.run(Clock::now() + 60s, 64, [i] {
              int x = 0;
              for (int k = 0; k <= i; ++k) x += k;
              return x;
            });
            const bool here = (co_await asio::this_coro::executor) == io.get_executor() &&
                              io.get_executor().running_in_this_thread();
            if (!here) ++wrong;
            if (r.ok()) {
              if (r.value() != i * (i + 1) / 2) ++wrong;
              ++values;
            } else if (r.error() == PoolRefusal::kQueueFull) {
              ++full;
            } else {
              ++wrong;
            }
          },
          asio::detached);
    }
  };
  asio::io_context a, b;
  spawn_all(a);
  spawn_all(b);
  std::thread ta([&] { a.run(); });
  std::thread tb([&] { b.run(); });
  ta.join();
  tb.join();
  pool.stop();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(values + full, 2 * kPerThread);
  EXPECT_GT(values, 0);
}

}  // namespace
}  // namespace ramjet::render
