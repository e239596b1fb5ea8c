// net/stream's plain reads: one that follows a read which drained the socket waits for the
// socket to be readable and then reads; one that follows a read which filled its buffer tries
// first. Either way every byte arrives, in order, and an end, an error, a close or a
// cancellation ends the read.
#include "net/stream.h"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace ramjet::net {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// A connected loopback pair: `ours` (a Stream, non-blocking as the data plane's are) and `peer`.
struct Pair {
  asio::io_context io;
  Stream ours{io.get_executor()};
  tcp::socket peer{io};

  explicit Pair(bool non_blocking = true) {
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    ours.socket().connect(acceptor.local_endpoint());
    acceptor.accept(peer);
    if (non_blocking) ours.socket().non_blocking(true);
  }
  void send(std::string_view bytes) { asio::write(peer, asio::buffer(bytes.data(), bytes.size())); }
};

struct Read {
  boost::system::error_code ec;
  std::string bytes;
  bool done = false;
};

// Starts one read of at most `capacity` bytes into `out`.
void start_read(Pair& p, size_t capacity, Read& out) {
  asio::co_spawn(
      p.io,
      [&p, capacity, &out]() -> asio::awaitable<void> {
        std::vector<char> buf(capacity);
        auto [ec, n] = co_await p.ours.async_read_some(asio::buffer(buf), awaited);
        out.ec = ec;
        out.bytes.assign(buf.data(), n);
        out.done = true;
      },
      asio::detached);
}

// Runs the context until `r` is done (or a few seconds pass: a read that never completes fails).
void run_until(Pair& p, const Read& r) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!r.done && std::chrono::steady_clock::now() < deadline) {
    p.io.run_for(10ms);
    if (p.io.stopped()) p.io.restart();
  }
}

// Starts a read of at most 64 bytes on a socket nothing was sent to: it is still waiting after a
// while.
void start_waiting_read(Pair& p, Read& r) {
  start_read(p, 64, r);
  p.io.run_for(10ms);
  p.io.restart();
  EXPECT_FALSE(r.done);
}

// A waiting read, then `bytes` sent: the read gets them.
void expect_read_of_late_bytes(Pair& p, std::string_view bytes) {
  Read r;
  start_waiting_read(p, r);
  p.send(bytes);
  run_until(p, r);
  ASSERT_TRUE(r.done);
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.bytes, bytes);
}

// A read of at most 64 bytes, run to its end: it gets `bytes`.
void expect_read(Pair& p, std::string_view bytes) {
  Read r;
  start_read(p, 64, r);
  run_until(p, r);
  ASSERT_TRUE(r.done);
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.bytes, bytes);
}

TEST(Stream, AReadOnAQuietSocketGetsTheBytesThatComeLater) {
  Pair p;
  expect_read_of_late_bytes(p, "hello");
}

// Bytes that arrived while no read was pending (their readiness already reported, and lost, on
// the edge-triggered registration) are read by a read that waits first: the wait re-arms.
TEST(Stream, AReadThatWaitsGetsBytesQueuedBeforeItStarted) {
  Pair p;
  p.send("one");
  expect_read(p, "one");  // drains the socket: the next read waits first
  p.send("two");
  {
    // The readiness is reported, and taken, with no read pending: the work guard keeps run_for
    // in epoll_wait (without work the context would stop at once and never look).
    auto work = asio::make_work_guard(p.io);
    for (int i = 0; i < 5; ++i) {
      p.io.run_for(5ms);
      std::this_thread::sleep_for(2ms);
    }
  }
  p.io.restart();
  expect_read(p, "two");
}

// A read that drained the socket, and the next one started before the loop looked at the socket
// again (the engine's answer to a request just sent): the bytes sent in between are not lost,
// whether they came before that read started or after.
TEST(Stream, AReadAfterADrainingReadGetsBytesSentBeforeOrAfterItStarted) {
  Pair p;
  p.send("one");
  expect_read(p, "one");
  p.send("two");  // no run of the loop between this and the read
  expect_read(p, "two");
  expect_read_of_late_bytes(p, "three");
}

// A long run of small messages, each read as it comes (an SSE stream's events): every read
// drains the socket, so each but the first waits first; all bytes arrive, in order.
TEST(Stream, ManyDrainingReadsGetEveryMessageInOrder) {
  Pair p;
  std::string want, got;
  for (int i = 0; i < 200; ++i) {
    const std::string msg = "event " + std::to_string(i) + "\n";
    want += msg;
    Read r;
    if (i % 2 == 0) {
      start_waiting_read(p, r);  // the read waits, then the message comes
      p.send(msg);
    } else {
      p.send(msg);  // the message is there before the read starts
      start_read(p, 64, r);
    }
    run_until(p, r);
    ASSERT_TRUE(r.done) << i;
    ASSERT_FALSE(r.ec) << r.ec.message();
    got += r.bytes;
    if (got.size() < want.size()) {  // (loopback delivers a send whole; keep reading if not)
      Read rest;
      start_read(p, 64, rest);
      run_until(p, rest);
      got += rest.bytes;
    }
  }
  EXPECT_EQ(got, want);
}

// A waiting read whose handler has a cancellation slot ends as aborted when the slot is
// signalled (Asio's own cancellation, which the read's operation keeps).
TEST(Stream, AWaitingReadEndsAsAbortedWhenItsSlotIsCancelled) {
  Pair p;
  asio::cancellation_signal signal;
  std::array<char, 16> buf{};
  Read r;
  p.ours.async_read_some(asio::buffer(buf), asio::bind_cancellation_slot(signal.slot(), [&](boost::system::error_code ec, size_t) {
                           r.ec = ec;
                           r.done = true;
                         }));
  p.io.run_for(10ms);
  p.io.restart();
  ASSERT_FALSE(r.done);
  signal.emit(asio::cancellation_type::terminal);
  run_until(p, r);
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.ec, asio::error::operation_aborted);
  // The socket still reads afterwards.
  expect_read_of_late_bytes(p, "after");
}

TEST(Stream, AReadThatFilledItsBufferIsFollowedByOneThatTakesTheRest) {
  Pair p;
  p.send("0123456789abcdef");
  std::string got;
  for (int i = 0; i < 4 && got.size() < 16; ++i) {
    Read r;
    start_read(p, 6, r);
    run_until(p, r);
    ASSERT_TRUE(r.done);
    ASSERT_FALSE(r.ec) << r.ec.message();
    got += r.bytes;
  }
  EXPECT_EQ(got, "0123456789abcdef");
}

TEST(Stream, APeerThatClosesEndsAWaitingReadWithEof) {
  Pair p;
  Read r;
  start_waiting_read(p, r);
  p.peer.close();
  run_until(p, r);
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.ec, asio::error::eof);
  EXPECT_TRUE(r.bytes.empty());
}

// The peer's last bytes and its close (or reset) arrive together, before the read that drains
// them: the readiness of the end was reported with the bytes' and comes no more, so the next
// read must find the end by asking the socket (a read that only waited for another edge would
// wait for ever: an engine that dies mid-stream, a client that sends and half-closes).
TEST(Stream, BytesThenAnEndThatCameTogetherAreReadAndThenTheEnd) {
  for (const bool reset : {false, true}) {
    SCOPED_TRACE(reset ? "reset" : "close");
    Pair p;
    Read warm;  // a first draining read, so the next ones follow one
    start_waiting_read(p, warm);
    p.send("head");
    run_until(p, warm);
    ASSERT_EQ(warm.bytes, "head");
    p.send("last events");
    if (reset) p.peer.set_option(asio::socket_base::linger(true, 0));
    p.peer.close();
    std::this_thread::sleep_for(10ms);  // both are in before the next read starts
    Read bytes;
    start_read(p, 64, bytes);
    run_until(p, bytes);
    ASSERT_TRUE(bytes.done);
    if (!reset) {  // (a reset may discard what was queued: Linux answers the reset at once)
      ASSERT_FALSE(bytes.ec) << bytes.ec.message();
      EXPECT_EQ(bytes.bytes, "last events");
    }
    if (bytes.ec) continue;
    Read end;
    start_read(p, 64, end);
    run_until(p, end);
    ASSERT_TRUE(end.done) << "the end was never seen";
    const boost::system::error_code want = reset ? asio::error::make_error_code(asio::error::connection_reset)
                                                 : asio::error::make_error_code(asio::error::eof);
    EXPECT_EQ(end.ec, want) << end.ec.message();
  }
}

TEST(Stream, ClosingTheStreamEndsAWaitingReadAsAborted) {
  Pair p;
  Read r;
  start_waiting_read(p, r);
  boost::system::error_code ignored;
  p.ours.close(ignored);
  run_until(p, r);
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.ec, asio::error::operation_aborted);
}

// A socket left blocking never reads synchronously (that could block the thread): its reads
// are Asio's own, and still get every byte.
TEST(Stream, ABlockingSocketIsReadAsynchronously) {
  Pair p(/*non_blocking=*/false);
  expect_read_of_late_bytes(p, "late");
}

// The client watch's read (async_read_some_unowned) may complete with bytes after the Stream is
// gone: its handler runs then and gets them, and the read touches nothing of the Stream (under
// ASan, a read that noted into the freed Stream would fail here).
TEST(Stream, AnUnownedReadOutlivesItsStream) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket peer(io);
  boost::system::error_code result;
  size_t got = 0;
  bool called = false;
  static std::array<char, 16> buf;
  {
    auto ours = std::make_unique<Stream>(io.get_executor());
    ours->socket().connect(acceptor.local_endpoint());
    acceptor.accept(peer);
    ours->socket().non_blocking(true);
    asio::write(peer, asio::buffer("bytes", 5));
    std::this_thread::sleep_for(10ms);
    // Tried at once: the bytes are there, the handler is queued with them.
    ours->async_read_some_unowned(asio::buffer(buf), [&](boost::system::error_code ec, size_t n) {
      called = true;
      result = ec;
      got = n;
    });
  }  // destroyed before the handler ran
  io.run_for(100ms);
  EXPECT_TRUE(called);
  EXPECT_FALSE(result) << result.message();
  EXPECT_EQ(got, 5u);
}

// A waiting read on a connection the peer resets ends with the reset, not eof.
TEST(Stream, APeerThatResetsEndsAWaitingReadWithTheReset) {
  Pair p;
  Read r;
  start_waiting_read(p, r);
  p.peer.set_option(asio::socket_base::linger(true, 0));  // close sends RST
  p.peer.close();
  run_until(p, r);
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.ec, asio::error::connection_reset);
}

// --- write_some: what the non-blocking socket takes now, gathered from several buffers ---

std::string read_all(tcp::socket& s, size_t n) {
  std::string out(n, '\0');
  asio::read(s, asio::buffer(out));
  return out;
}

iovec iov(std::string_view s) { return {const_cast<char*>(s.data()), s.size()}; }

TEST(Stream, WriteSomeSendsEveryBufferInOrder) {
  Pair p;
  const std::array<iovec, 3> bufs = {iov("head "), iov(""), iov("body")};
  boost::system::error_code ec;
  EXPECT_EQ(p.ours.write_some(bufs, ec), 9u);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(read_all(p.peer, 9), "head body");
}

TEST(Stream, WriteSomeOfNothingWritesNothing) {
  Pair p;
  const std::array<iovec, 2> bufs = {iov(""), iov("")};
  boost::system::error_code ec = asio::error::eof;
  EXPECT_EQ(p.ours.write_some(bufs, ec), 0u);
  EXPECT_FALSE(ec) << ec.message();
}

// A sequence longer than one system call takes is written in part: its first 64 buffers.
TEST(Stream, WriteSomeOfManyBuffersWritesTheFirst64) {
  Pair p;
  const std::vector<iovec> bufs(100, iov("x"));
  boost::system::error_code ec;
  EXPECT_EQ(p.ours.write_some(bufs, ec), 64u);
  EXPECT_FALSE(ec) << ec.message();
}

// A peer that reads nothing: the socket takes what its buffers hold, then would_block (never
// a wait).
TEST(Stream, WriteSomeToAPeerThatDoesNotReadStopsWithWouldBlock) {
  Pair p;
  const std::string chunk(1 << 16, 'y');
  const std::array<iovec, 1> bufs = {iov(chunk)};
  boost::system::error_code ec;
  size_t total = 0;
  for (int i = 0; i < 10000 && !ec; ++i) total += p.ours.write_some(bufs, ec);
  EXPECT_EQ(ec, asio::error::would_block);
  EXPECT_GT(total, 0u);
}

// A write to a connection the peer reset is an error (EPIPE or ECONNRESET), never a SIGPIPE.
TEST(Stream, WriteSomeToAResetPeerIsAnError) {
  Pair p;
  p.peer.set_option(asio::socket_base::linger(true, 0));
  p.peer.close();
  std::this_thread::sleep_for(20ms);
  const std::array<iovec, 1> bufs = {iov("after")};
  boost::system::error_code ec;
  for (int i = 0; i < 3 && !ec; ++i) p.ours.write_some(bufs, ec);
  EXPECT_TRUE(ec == asio::error::broken_pipe || ec == asio::error::connection_reset) << ec.message();
}

// A socket left blocking is written by Asio's write_some (which may wait), not a bare sendmsg.
TEST(Stream, WriteSomeOnABlockingSocketWritesEverything) {
  Pair p(/*non_blocking=*/false);
  const std::array<iovec, 2> bufs = {iov("who"), iov("le")};
  boost::system::error_code ec;
  EXPECT_EQ(p.ours.write_some(bufs, ec), 5u);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(read_all(p.peer, 5), "whole");
}

}  // namespace
}  // namespace ramjet::net
