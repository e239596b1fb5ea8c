// OutBuffers: the gather write of the data plane. What send_now() leaves (a full socket) is
// exactly the unsent rest, which rest() hands to an asynchronous write.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "request/stream/session.h"

namespace ramjet::request {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

std::string joined(std::span<const asio::const_buffer> bufs) {
  std::string out;
  for (const auto& b : bufs) out.append(static_cast<const char*>(b.data()), b.size());
  return out;
}

TEST(OutBuffers, ConsumeDropsWholeAndPartBuffersFromTheFront) {
  OutBuffers out;
  EXPECT_TRUE(out.empty());
  out.add("abc");
  out.add("");  // nothing: not a buffer
  out.add("defg");
  out.add("hi");
  EXPECT_FALSE(out.empty());
  EXPECT_EQ(out.rest().size(), 3u);
  out.consume(2);
  EXPECT_EQ(joined(out.rest()), "cdefghi");
  out.consume(1);
  EXPECT_EQ(out.rest().size(), 2u);
  EXPECT_EQ(joined(out.rest()), "defghi");
  out.consume(5);
  EXPECT_EQ(joined(out.rest()), "i");
  out.consume(1);
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(out.rest().empty());
  out.add("again");
  out.clear();
  EXPECT_TRUE(out.empty());
}

TEST(OutBuffers, WhatTheSocketDidNotTakeIsTheRest) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  net::Stream ours(io.get_executor());
  tcp::socket peer(io);
  ours.socket().connect(acceptor.local_endpoint());
  acceptor.accept(peer);
  ours.socket().non_blocking(true);
  ours.socket().set_option(asio::socket_base::send_buffer_size(16 * 1024));
  peer.set_option(asio::socket_base::receive_buffer_size(16 * 1024));

  // Far more than the socket buffers hold, in pieces of uneven sizes.
  std::vector<std::string> pieces;
  std::string all;
  for (size_t i = 0; i < OutBuffers::kMax; ++i) {
    pieces.push_back(std::string(50'000 + 997 * i, static_cast<char>('a' + i % 26)));
    all += pieces.back();
  }
  OutBuffers out;
  for (const auto& p : pieces) out.add(p);
  boost::system::error_code ec;
  EXPECT_FALSE(out.send_now(ours, ec));  // the socket filled up
  EXPECT_FALSE(ec) << ec.message();
  const std::string rest = joined(out.rest());
  ASSERT_LT(rest.size(), all.size());
  EXPECT_EQ(all.substr(all.size() - rest.size()), rest);

  // The peer reads everything while the rest is written: the bytes arrive whole and in order.
  std::string got(all.size(), '\0');
  asio::async_read(peer, asio::buffer(got), [](boost::system::error_code, size_t) {});
  asio::async_write(ours.socket(), out.rest(), [&](boost::system::error_code, size_t n) { out.consume(n); });
  io.run();
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(got, all);
}

}  // namespace
}  // namespace ramjet::request
