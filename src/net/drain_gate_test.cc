#include "net/drain_gate.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include <optional>
#include <thread>

namespace ramjet::net {
namespace {

using std::chrono::milliseconds;

TEST(DrainGate, HoldersEnterUntilItClosesAndTheWaitEndsWhenTheLastOneLeaves) {
  boost::asio::io_context io;
  DrainGate gate;
  DrainGate::Hold a = gate.enter();
  DrainGate::Hold b = gate.enter();
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  EXPECT_EQ(gate.holders(), 2u);
  gate.close();
  EXPECT_FALSE(gate.enter()) << "no new holder once closed";
  std::optional<bool> result;
  gate.async_wait(io.get_executor(), milliseconds(60000), [&](bool drained) { result = drained; });
  io.poll();
  EXPECT_FALSE(result) << "two holders are still inside";
  a.release();
  io.poll();
  EXPECT_FALSE(result);
  DrainGate::Hold moved = std::move(b);  // a moved hold is still one holder
  EXPECT_EQ(gate.holders(), 1u);
  moved = DrainGate::Hold();
  io.poll();
  ASSERT_TRUE(result);
  EXPECT_TRUE(*result);
  EXPECT_EQ(gate.holders(), 0u);
}

TEST(DrainGate, TheGracePeriodEndsTheWaitWithHoldersInside) {
  boost::asio::io_context io;
  DrainGate gate;
  DrainGate::Hold stuck = gate.enter();
  gate.close();
  std::optional<bool> result;
  gate.async_wait(io.get_executor(), milliseconds(20), [&](bool drained) { result = drained; });
  io.run_for(std::chrono::seconds(5));
  ASSERT_TRUE(result);
  EXPECT_FALSE(*result);
  stuck.release();  // leaving after the wait ended calls nothing again
  io.restart();
  io.poll();
  EXPECT_FALSE(*result);
}

TEST(DrainGate, AnEmptyClosedGateEndsTheWaitAtOnce) {
  boost::asio::io_context io;
  DrainGate gate;
  gate.close();
  std::optional<bool> result;
  gate.async_wait(io.get_executor(), milliseconds(60000), [&](bool drained) { result = drained; });
  io.run_for(std::chrono::seconds(5));
  ASSERT_TRUE(result);
  EXPECT_TRUE(*result);
}

TEST(DrainGate, HoldersOnOtherThreadsLeaveSafely) {
  boost::asio::io_context io;
  DrainGate gate;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        DrainGate::Hold h = gate.enter();
        if (!h) return;
      }
    });
  }
  gate.close();
  std::optional<bool> result;
  gate.async_wait(io.get_executor(), milliseconds(60000), [&](bool drained) { result = drained; });
  for (auto& th : threads) th.join();
  io.run_for(std::chrono::seconds(5));
  ASSERT_TRUE(result);
  EXPECT_TRUE(*result);
}

TEST(DrainGate, AnAbandonedWaitIsNeverCalledAndHoldsReleasedAfterTheContextIsGoneAreSafe) {
  DrainGate gate;
  DrainGate::Hold inside = gate.enter();
  bool called = false;
  {
    boost::asio::io_context io;
    gate.close();
    gate.async_wait(io.get_executor(), milliseconds(60000), [&](bool) { called = true; });
    io.poll();
    gate.abandon();  // a forced stop: the context goes with the wait still armed
  }
  inside.release();  // the last holder leaves after the context is destroyed: nothing is posted
  EXPECT_FALSE(called);
  EXPECT_EQ(gate.holders(), 0u);
}

}  // namespace
}  // namespace ramjet::net
