// request/admission/admission: the waiting room on a real io context.
#include "request/admission/admission.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace ramjet::request {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

struct Room {
  std::atomic<uint64_t> free{0};
  Admission::Room fn() {
    return [this] { return free.load(); };
  }
};

struct Result {
  std::optional<AdmissionOutcome> outcome;
  Admission::Ticket ticket;
};

void spawn(asio::io_context& io, Admission& a, Room& room, Admission::Request r, Result& out, const bool& gone) {
  asio::co_spawn(
      io,
      [&a, &room, r, &out, &gone]() -> asio::awaitable<void> {
        out.outcome = co_await a.admit(r, room.fn(), gone, out.ticket);
      },
      asio::detached);
}

Admission::Request req(std::string client, uint64_t cost = 100, AdmissionClass cls = AdmissionClass::kInteractive) {
  Admission::Request r;
  r.client = std::move(client);
  r.cls = cls;
  r.cost = cost;
  r.bytes = 1000;
  return r;
}

void run_for(asio::io_context& io, std::chrono::milliseconds d) {
  io.restart();
  io.run_for(d);
}

TEST(Admission, RoomAdmitsAtOnceAndATicketHoldsItsPlaceUntilReleased) {
  asio::io_context io;
  Admission a(AdmissionConfig{});
  Room room;
  room.free = 1;
  const bool gone = false;
  Result r1, r2;
  spawn(io, a, room, req("a"), r1, gone);
  spawn(io, a, room, req("b"), r2, gone);
  run_for(io, 50ms);
  EXPECT_EQ(r1.outcome, AdmissionOutcome::kImmediate);
  EXPECT_FALSE(r2.outcome.has_value());  // one free slot, already taken by an admitted request
  EXPECT_EQ(a.queued(), 1u);
  room.free = 0;        // its engine's reservation counts it now,
  r1.ticket.release();  // so its ticket is let go
  run_for(io, 50ms);
  EXPECT_FALSE(r2.outcome.has_value());
  room.free = 1;  // it finished
  a.notify();
  run_for(io, 50ms);
  EXPECT_EQ(r2.outcome, AdmissionOutcome::kAdmitted);
  EXPECT_EQ(a.queued(), 0u);
  // The wait the caller reports (journal queue_ms) is the ticket's: none for the first, the two
  // runs' time or so for the second, carried with the ticket when it moves.
  EXPECT_EQ(r1.ticket.waited_ns(), 0);
  EXPECT_GE(r2.ticket.waited_ns(), 50'000'000);  // (the second run's 50 ms at least)
  EXPECT_LT(r2.ticket.waited_ns(), 60'000'000'000);
  const int64_t waited = r2.ticket.waited_ns();
  Admission::Ticket moved = std::move(r2.ticket);
  EXPECT_EQ(moved.waited_ns(), waited);
}

TEST(Admission, BoundsRefuseAndTheTimeoutSheds) {
  asio::io_context io;
  AdmissionConfig c;
  c.max_queued = 2;
  c.max_wait = 200ms;
  c.poll = 20ms;
  Admission a(c);
  Room room;  // no room at all
  const bool gone = false;
  Result r[3];
  for (auto& x : r) spawn(io, a, room, req("a"), x, gone);
  run_for(io, 50ms);
  EXPECT_EQ(r[2].outcome, AdmissionOutcome::kShedFull);
  EXPECT_EQ(a.queued(), 2u);
  run_for(io, 400ms);
  EXPECT_EQ(r[0].outcome, AdmissionOutcome::kShedTimeout);
  EXPECT_EQ(r[1].outcome, AdmissionOutcome::kShedTimeout);
  EXPECT_EQ(a.queued(), 0u);
  EXPECT_GE(a.retry_after_s(), 1u);
  metrics::Exposition e;
  a.write_metrics(e);
  const std::string text = e.take();
  EXPECT_NE(text.find("ramjet_admission_requests_total{class=\"interactive\",outcome=\"shed_timeout\"} 2"), std::string::npos)
      << text;
  EXPECT_NE(text.find("ramjet_admission_requests_total{class=\"interactive\",outcome=\"shed_full\"} 1"), std::string::npos);
}

TEST(Admission, AClientThatLeavesWhileWaitingIsForgottenAndFreesNothing) {
  asio::io_context io;
  AdmissionConfig c;
  c.poll = 10ms;
  Admission a(c);
  Room room;
  bool gone = false;
  const bool stays = false;
  Result leaving, staying;
  spawn(io, a, room, req("x"), leaving, gone);
  spawn(io, a, room, req("y"), staying, stays);
  run_for(io, 30ms);
  gone = true;
  run_for(io, 50ms);
  EXPECT_EQ(leaving.outcome, AdmissionOutcome::kClientGone);
  EXPECT_FALSE(leaving.ticket.held());
  room.free = 1;
  a.notify();
  run_for(io, 50ms);
  EXPECT_EQ(staying.outcome, AdmissionOutcome::kAdmitted);
}

// Three slots free at once admit three waiters, in the fair order: interactive before batch.
TEST(Admission, FreedRoomAdmitsInFairOrder) {
  asio::io_context io;
  Admission a(AdmissionConfig{});
  Room room;
  const bool gone = false;
  std::vector<Result> batch(3), user(2);
  for (auto& b : batch) spawn(io, a, room, req("batch", 100, AdmissionClass::kBatch), b, gone);
  for (auto& u : user) spawn(io, a, room, req("user"), u, gone);
  run_for(io, 30ms);
  room.free = 3;
  a.notify();
  run_for(io, 50ms);
  for (auto& u : user) EXPECT_EQ(u.outcome, AdmissionOutcome::kAdmitted);
  EXPECT_EQ(batch[0].outcome, AdmissionOutcome::kAdmitted);
  EXPECT_FALSE(batch[1].outcome.has_value());
  EXPECT_FALSE(batch[2].outcome.has_value());
  batch.clear();  // (their coroutines still wait: the io context ends them)
}

// Shutdown destroys the io contexts with every suspended frame: a waiter's frame leaves the
// queue then, and its timer goes with its context, not later with the room.
TEST(Admission, AWaiterDestroyedWithItsIoContextLeavesTheQueue) {
  Admission a(AdmissionConfig{});
  Room room;
  const bool gone = false;
  Result r;
  {
    asio::io_context io;
    spawn(io, a, room, req("a"), r, gone);
    run_for(io, 20ms);
    EXPECT_EQ(a.queued(), 1u);
  }
  EXPECT_EQ(a.queued(), 0u);
  EXPECT_FALSE(r.outcome.has_value());
  room.free = 1;
  a.notify();  // nothing left to wake
}

}  // namespace
}  // namespace ramjet::request
