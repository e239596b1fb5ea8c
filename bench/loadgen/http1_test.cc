#include "http1.h"

#include <gtest/gtest.h>

namespace ramjet::bench {
namespace {

// Feeds `wire` in pieces of `step` bytes; returns the concatenated body.
std::string feed_all(ResponseParser& p, std::string_view wire, size_t step, size_t* consumed = nullptr) {
  std::string body;
  size_t used = 0;
  while (used < wire.size() && !p.done() && p.error() == ResponseParser::Error::kNone) {
    std::string_view piece = wire.substr(used, step);
    used += p.feed(piece, [&](std::string_view b) { body.append(b); });
  }
  if (consumed) *consumed = used;
  return body;
}

TEST(ParseUrl, AcceptsHostPortAndStripsTrailingSlashAndV1) {
  auto u = parse_url("http://127.0.0.1:8000/v1/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 8000);
  EXPECT_EQ(u->base_path, "");
  EXPECT_EQ(u->host_header(), "127.0.0.1:8000");
  auto v = parse_url("http://example/api/v1");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->port, 80);
  EXPECT_EQ(v->base_path, "/api");
  EXPECT_EQ(v->host_header(), "example");
  auto w = parse_url("http://[::1]:9/");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->host, "::1");
}

TEST(ParseUrl, RejectsHttpsMissingHostAndBadPorts) {
  EXPECT_FALSE(parse_url("https://a:1"));
  EXPECT_FALSE(parse_url("a:1"));
  EXPECT_FALSE(parse_url("http://:80"));
  EXPECT_FALSE(parse_url("http://a:0"));
  EXPECT_FALSE(parse_url("http://a:70000"));
  EXPECT_FALSE(parse_url("http://a:8x"));
  EXPECT_EQ(parse_url("ftp://a").error().reason, "bad_url");
}

TEST(PostHead, CarriesPathHostLengthAndAccept) {
  Url u = parse_url("http://h:81/base").value();
  std::string h = post_head(u, "/v1/chat/completions", 12, true);
  EXPECT_EQ(h,
            "POST /base/v1/chat/completions HTTP/1.1\r\nHost: h:81\r\nContent-Type: application/json\r\n"
            "Accept: text/event-stream\r\nContent-Length: 12\r\n\r\n");
}

TEST(ResponseParser, ParsesContentLengthBodyByteByByte) {
  const std::string wire = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n"
                           "X-Ramjet-Upstream: 3\r\n\r\nhello";
  for (size_t step : {1u, 2u, 7u, 1000u}) {
    ResponseParser p;
    EXPECT_EQ(feed_all(p, wire, step), "hello") << step;
    EXPECT_TRUE(p.done());
    EXPECT_EQ(p.status(), 200u);
    EXPECT_TRUE(p.keep_alive());
    EXPECT_FALSE(p.event_stream());
    EXPECT_EQ(p.upstream(), "3");
  }
}

TEST(ResponseParser, ParsesChunkedEventStreamInAnySplit) {
  const std::string wire =
      "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
      "transfer-encoding: chunked\r\n\r\n"
      "6\r\ndata: \r\n17;ext=1\r\n{\"a\":1}\n\ndata: [DONE]\n\n\r\n0\r\nTrailer: x\r\n\r\n";
  for (size_t step = 1; step < wire.size() + 1; ++step) {
    ResponseParser p;
    size_t used = 0;
    EXPECT_EQ(feed_all(p, wire, step, &used), "data: {\"a\":1}\n\ndata: [DONE]\n\n") << step;
    EXPECT_TRUE(p.done()) << step;
    EXPECT_EQ(used, wire.size());
    EXPECT_TRUE(p.event_stream());
  }
}

TEST(ResponseParser, StopsAtTheEndOfTheMessageAndLeavesExtraBytes) {
  const std::string wire = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1";
  ResponseParser p;
  std::string body;
  size_t used = p.feed(wire, [&](std::string_view b) { body.append(b); });
  EXPECT_TRUE(p.done());
  EXPECT_EQ(body, "ok");
  EXPECT_EQ(used, wire.size() - 8);
}

TEST(ResponseParser, ConnectionCloseAndHttp10DisableKeepAlive) {
  ResponseParser a;
  feed_all(a, "HTTP/1.1 503 x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", 100);
  EXPECT_TRUE(a.done());
  EXPECT_EQ(a.status(), 503u);
  EXPECT_FALSE(a.keep_alive());
  ResponseParser b;
  feed_all(b, "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", 100);
  EXPECT_FALSE(b.keep_alive());
}

TEST(ResponseParser, BodyWithoutLengthRunsUntilEof) {
  ResponseParser p;
  std::string body = feed_all(p, "HTTP/1.1 200 OK\r\n\r\nabc", 100);
  EXPECT_FALSE(p.done());
  EXPECT_EQ(body, "abc");
  EXPECT_TRUE(p.on_eof());
  EXPECT_FALSE(p.keep_alive());
}

TEST(ResponseParser, TruncatedLengthBodyIsNotCompleteAtEof) {
  ResponseParser p;
  feed_all(p, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 100);
  EXPECT_FALSE(p.on_eof());
}

TEST(ResponseParser, SkipsInterimContinueResponse) {
  ResponseParser p;
  std::string body = feed_all(p, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", 3);
  EXPECT_TRUE(p.done());
  EXPECT_EQ(p.status(), 200u);
  EXPECT_EQ(body, "x");
}

TEST(ResponseParser, RejectsMalformedInputWithStableReasons) {
  struct Case {
    const char* wire;
    ResponseParser::Error err;
  } cases[] = {
      {"HTTX/1.1 200 OK\r\n\r\n", ResponseParser::Error::kBadStatusLine},
      {"HTTP/1.1 2x0 OK\r\n\r\n", ResponseParser::Error::kBadStatusLine},
      {"HTTP/1.1 200 OK\r\nNoColon\r\n\r\n", ResponseParser::Error::kBadHeader},
      {"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", ResponseParser::Error::kBadLength},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", ResponseParser::Error::kBadLength},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", ResponseParser::Error::kBadChunk},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", ResponseParser::Error::kBadChunk},
  };
  for (const auto& c : cases) {
    ResponseParser p;
    feed_all(p, c.wire, 1000);
    EXPECT_EQ(p.error(), c.err) << c.wire;
    EXPECT_NE(ResponseParser::reason(p.error()), "none");
  }
}

TEST(ResponseParser, HeadLargerThanTheLimitFails) {
  ResponseParser p(ResponseParser::Limits{.max_head_bytes = 64, .max_chunk_line_bytes = 1024});
  std::string wire = "HTTP/1.1 200 OK\r\nX: " + std::string(100, 'a') + "\r\n\r\n";
  feed_all(p, wire, 10);
  EXPECT_EQ(p.error(), ResponseParser::Error::kHeadTooLarge);
}

}  // namespace
}  // namespace ramjet::bench
