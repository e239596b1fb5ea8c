// request/admission/fair_queue: the order requests leave the waiting room.
#include "request/admission/fair_queue.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace ramjet::request {
namespace {

std::vector<uint64_t> drain(FairQueue& q) {
  std::vector<uint64_t> out;
  while (auto id = q.pop()) out.push_back(*id);
  return out;
}

TEST(FairQueue, OneClientIsFirstComeFirstServed) {
  FairQueue q;
  for (uint64_t id = 1; id <= 4; ++id) q.push(id, 0, "a", 100);
  EXPECT_EQ(drain(q), (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_TRUE(q.empty());
}

// A heavy client queued 32 long requests; a light one then queues two short ones: they leave
// after about one of the heavy client's, not after all 32.
TEST(FairQueue, ALightClientDoesNotWaitBehindAHeavyOnesBacklog) {
  FairQueue q;
  for (uint64_t id = 1; id <= 32; ++id) q.push(id, 0, "heavy", 4000);
  EXPECT_EQ(q.pop(), 1u);  // one is in service
  q.push(101, 0, "light", 300);
  q.push(102, 0, "light", 300);
  const auto order = drain(q);
  ASSERT_EQ(order.size(), 33u);
  EXPECT_EQ(order[0], 101u);
  EXPECT_EQ(order[1], 102u);
}

// Shares are by tokens: a client of short requests gets as many tokens through as one of long
// requests, so it gets more requests through.
TEST(FairQueue, ClientsShareByTokensNotRequests) {
  FairQueue q;
  uint64_t id = 0;
  for (int i = 0; i < 40; ++i) q.push(++id, 0, "long", 1000);
  for (int i = 0; i < 40; ++i) q.push(++id, 0, "short", 250);
  std::map<bool, uint64_t> tokens;  // long?
  for (int i = 0; i < 30; ++i) {
    const uint64_t got = *q.pop();
    tokens[got <= 40] += got <= 40 ? 1000 : 250;
  }
  EXPECT_NEAR(static_cast<double>(tokens[true]), static_cast<double>(tokens[false]), 1000.0);
}

TEST(FairQueue, AMoreUrgentClassAlwaysLeavesFirst) {
  FairQueue q(2);
  q.push(1, 1, "batch", 10);
  q.push(2, 1, "batch", 10);
  q.push(3, 0, "user", 100000);
  EXPECT_EQ(q.peek(), 3u);
  EXPECT_EQ(q.size(0), 1u);
  EXPECT_EQ(q.size(1), 2u);
  EXPECT_EQ(drain(q), (std::vector<uint64_t>{3, 1, 2}));
}

TEST(FairQueue, RemovedRequestsLeaveNoTraceAndTheTableStaysBounded) {
  FairQueue q;
  for (uint64_t id = 1; id <= 100; ++id) q.push(id, 0, "client-" + std::to_string(id), 10);
  for (uint64_t id = 1; id <= 100; id += 2) EXPECT_TRUE(q.remove(id));
  EXPECT_FALSE(q.remove(1));
  EXPECT_EQ(q.size(), 50u);
  for (uint64_t want = 2; want <= 100; want += 2) EXPECT_EQ(q.pop(), want);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.clients_tracked(), 0u);  // a drained room forgets every client
  EXPECT_EQ(q.pop(), std::nullopt);
}

}  // namespace
}  // namespace ramjet::request

namespace ramjet::request {
namespace {

// A deadline reorders the client's own backlog: its urgent request takes its next turn. Another
// client's turns do not move.
TEST(FairQueue, ADeadlineReordersOnlyItsClientsOwnRequests) {
  FairQueue q;
  for (uint64_t id = 1; id <= 4; ++id) q.push(id, 0, "a", 100);
  q.push(10, 0, "b", 100);
  q.push(5, 0, "a", 100, 1.0, /*deadline=*/1000);
  EXPECT_EQ(q.pop(), 5u);   // a's first turn: its urgent request
  EXPECT_EQ(q.pop(), 10u);  // b's turn (b arrived when a had one turn booked ahead of it)
  EXPECT_EQ(drain(q), (std::vector<uint64_t>{1, 2, 3, 4}));
  q.push(20, 0, "c", 100, 1.0, 500);
  q.push(21, 0, "c", 100, 1.0, 200);
  q.push(22, 0, "c", 100);
  EXPECT_TRUE(q.remove(21));
  EXPECT_EQ(drain(q), (std::vector<uint64_t>{20, 22}));
  EXPECT_EQ(q.clients_tracked(), 0u);
}

}  // namespace
}  // namespace ramjet::request
