// net/deadline: a deadline armed from the coarse clock comes when asked, at most a tick early,
// and cancels the socket's pending read; one re-armed further away before it passes does not.
#include "net/deadline.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <gtest/gtest.h>

#include <array>
#include <chrono>

namespace ramjet::net {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// The coarse clock is steady_clock's own, read at its last tick: never ahead of it, and behind
// by less than a tick (4 ms at HZ=250, 10 ms at HZ=100; 50 ms leaves a loaded machine room).
TEST(Deadline, TheCoarseClockIsTheSteadyClockAtItsLastTick) {
  for (int i = 0; i < 1000; ++i) {
    const auto before = std::chrono::steady_clock::now();
    const auto coarse = Deadline::coarse_now();
    const auto after = std::chrono::steady_clock::now();
    ASSERT_LE(coarse, after);
    ASSERT_GT(coarse, before - 50ms);  // (a preemption between the reads only moves `after`)
  }
}

struct Reading {
  asio::io_context io;
  tcp::socket ours{io};
  tcp::socket peer{io};
  std::array<char, 16> buf{};
  bool done = false;
  boost::system::error_code ec;

  Reading() {
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    ours.connect(acceptor.local_endpoint());
    acceptor.accept(peer);
    ours.async_read_some(asio::buffer(buf), [this](boost::system::error_code e, size_t) {
      ec = e;
      done = true;
    });
  }
};

TEST(Deadline, AnArmedDeadlineCancelsThePendingReadWhenItPasses) {
  Reading r;
  Deadline d(r.ours);
  const auto began = std::chrono::steady_clock::now();
  d.arm(60ms);
  r.io.run_for(2s);
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.ec, asio::error::operation_aborted);
  EXPECT_TRUE(d.expired());
  const auto took = std::chrono::steady_clock::now() - began;
  EXPECT_GE(took, 60ms - 50ms);  // at most a tick early
  EXPECT_LT(took, 1500ms);
}

TEST(Deadline, ADeadlineReArmedFurtherAwayDoesNotCancel) {
  Reading r;
  Deadline d(r.ours);
  d.arm(30ms);
  d.arm(10s);  // re-armed before it passes
  r.io.run_for(200ms);
  EXPECT_FALSE(r.done);
  EXPECT_FALSE(d.expired());
  d.disarm();
}

}  // namespace
}  // namespace ramjet::net
