// net/client's one-shot exchange (probes, scrapes, the model catalog) against a loopback engine
// that answers in pieces: the answer is read as the data plane reads an engine's. And the idle
// pool: which connections it hands out again.
#include "net/client.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

namespace ramjet::net {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// Accepts one connection, reads the request head, writes `answer` `piece` bytes at a time with a
// pause between, then closes.
asio::awaitable<void> engine(tcp::acceptor& acceptor, std::string answer, size_t piece) {
  tcp::socket s = co_await acceptor.async_accept(asio::use_awaitable);
  std::string request;
  char buf[4096];
  while (request.find("\r\n\r\n") == std::string::npos) {
    const size_t n = co_await s.async_read_some(asio::buffer(buf), asio::use_awaitable);
    request.append(buf, n);
  }
  asio::steady_timer pause(s.get_executor());
  for (size_t at = 0; at < answer.size(); at += piece) {
    co_await asio::async_write(s, asio::buffer(answer.data() + at, std::min(piece, answer.size() - at)),
                               asio::use_awaitable);
    pause.expires_after(1ms);
    co_await pause.async_wait(asio::use_awaitable);
  }
  boost::system::error_code ignored;
  s.shutdown(tcp::socket::shutdown_both, ignored);
}

SimpleResponse get(const std::string& answer, size_t piece, size_t max_body, GetFailure& failure) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  config::UpstreamUrl url;
  url.host = "127.0.0.1";
  url.port = acceptor.local_endpoint().port();
  SimpleResponse out;
  failure = GetFailure::kNone;
  asio::co_spawn(io, engine(acceptor, answer, piece), asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> { out = co_await simple_get(url, "/metrics", "", 5s, max_body, failure); },
      asio::detached);
  io.run();
  return out;
}

TEST(SimpleGet, ReadsAChunkedAnswerTrickledAByteAtATime) {
  // Every piece of the framing (chunk-size line, data, CRLF, the last chunk) arrives on its own.
  GetFailure f;
  const SimpleResponse r = get("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 1, 1024, f);
  EXPECT_EQ(f, GetFailure::kNone);
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, "hello");
}

TEST(SimpleGet, ReadsALengthAndAnAnswerThatEndsWithTheConnection) {
  GetFailure f;
  SimpleResponse r = get("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy", 3, 1024, f);
  EXPECT_EQ(f, GetFailure::kNone);
  EXPECT_EQ(r.status, 503u);
  EXPECT_EQ(r.body, "busy");
  r = get("HTTP/1.0 200 OK\r\n\r\n# HELP x\nx 1\n", 5, 1024, f);
  EXPECT_EQ(f, GetFailure::kNone);
  EXPECT_EQ(r.body, "# HELP x\nx 1\n");
}

TEST(SimpleGet, RefusesAnAnswerPastTheLimitCutShortOrMalformed) {
  GetFailure f;
  get("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + std::string(100, 'x'), 50, 10, f);
  EXPECT_EQ(f, GetFailure::kTooLarge);
  get("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n" + std::string(32, 'x') + "\r\n0\r\n\r\n", 8, 10, f);
  EXPECT_EQ(f, GetFailure::kTooLarge);
  get("HTTP/1.1 200 OK\r\n\r\n" + std::string(64, 'x'), 8, 10, f);
  EXPECT_EQ(f, GetFailure::kTooLarge);
  const SimpleResponse r = get("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", 2, 1024, f);
  EXPECT_EQ(f, GetFailure::kProtocol);
  EXPECT_TRUE(r.body.empty());
  get("SSH-2.0-OpenSSH_9.2\r\n\r\n", 4, 1024, f);
  EXPECT_EQ(f, GetFailure::kProtocol);
  get("", 1, 1024, f);  // closed without a byte
  EXPECT_EQ(f, GetFailure::kProtocol);
}

// --- IdlePool ---

// A pooled connection and its engine's end of it.
struct Pooled {
  ConnectionPtr conn;
  tcp::socket engine;
};

Pooled connect_pair(asio::io_context& io, tcp::acceptor& acceptor, uint64_t incarnation = 0) {
  auto conn = std::make_unique<UpstreamConnection>(io.get_executor());
  conn->stream.socket().connect(acceptor.local_endpoint());
  conn->stream.socket().non_blocking(true);
  conn->incarnation = incarnation;
  tcp::socket engine(io);
  acceptor.accept(engine);
  return {std::move(conn), std::move(engine)};
}

// Connections idle past the check are asked: one the engine closed, or that holds bytes nobody
// asked for, is dropped; an open one is handed out, marked reused. The newest goes first.
TEST(IdlePool, AConnectionIdlePastTheCheckIsHandedOutOnlyIfTheEngineKeptItOpen) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  IdlePool pool;
  const int64_t put_at = 5'000;
  const int64_t take_at = put_at + IdlePool::kIdleCheckAfterMs;  // idle exactly as long as the check's time
  Pooled open = connect_pair(io, acceptor);
  Pooled closed = connect_pair(io, acceptor);
  Pooled chatty = connect_pair(io, acceptor);
  UpstreamConnection* open_conn = open.conn.get();
  pool.put(std::move(open.conn), put_at);
  pool.put(std::move(closed.conn), put_at);
  pool.put(std::move(chatty.conn), put_at);
  closed.engine.close();
  asio::write(chatty.engine, asio::buffer("HTTP/1.1 200 OK\r\n", 17));
  std::this_thread::sleep_for(20ms);  // the FIN and the bytes arrive
  ConnectionPtr got = pool.take(take_at);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got.get(), open_conn);
  EXPECT_TRUE(got->reused);
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_EQ(pool.take(take_at), nullptr);
}

// A connection back in the pool for less than the check's time is handed out without the
// question (a system call a request under load), even one the engine closed meanwhile: the
// proxy's stale retry takes the request to a new connection then (test_failover's engine that
// closes after every answer). Unless the caller asks (a decode leg's single-use parameters).
TEST(IdlePool, AConnectionJustPutBackIsHandedOutWithoutAskingUnlessTheCallerAsks) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  IdlePool pool;
  const int64_t put_at = 5'000;
  const int64_t take_at = put_at + IdlePool::kIdleCheckAfterMs - 1;
  Pooled closed = connect_pair(io, acceptor);
  UpstreamConnection* conn = closed.conn.get();
  pool.put(std::move(closed.conn), put_at);
  closed.engine.close();
  std::this_thread::sleep_for(20ms);
  ConnectionPtr got = pool.take(take_at);
  EXPECT_EQ(got.get(), conn);
  pool.put(std::move(got), put_at);
  EXPECT_EQ(pool.take(take_at, 0, /*ask=*/true), nullptr);
  EXPECT_EQ(pool.size(), 0u);
}

// A connection whose buffer still holds bytes after its response (an engine that answered
// twice) is not kept: those bytes would be read as the next request's answer.
TEST(IdlePool, AConnectionWithBytesLeftInItsBufferIsNotKept) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  IdlePool pool;
  Pooled leftover = connect_pair(io, acceptor);
  const std::string_view extra = "HTTP/1.1 200 OK\r\n";
  auto room = leftover.conn->buffer.prepare(extra.size());
  std::memcpy(room.data(), extra.data(), extra.size());
  leftover.conn->buffer.commit(extra.size());
  pool.put(std::move(leftover.conn), 0);
  EXPECT_EQ(pool.size(), 0u);
}

// A connection made to an engine that has since left its slot is never handed out.
TEST(IdlePool, AConnectionToAnotherIncarnationIsDropped) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  IdlePool pool;
  Pooled old = connect_pair(io, acceptor, /*incarnation=*/1);
  pool.put(std::move(old.conn), 0);
  EXPECT_EQ(pool.take(0, /*incarnation=*/2), nullptr);
  EXPECT_EQ(pool.size(), 0u);
}

}  // namespace
}  // namespace ramjet::net
