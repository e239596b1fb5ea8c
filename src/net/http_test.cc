#include "net/http.h"

#include <boost/beast/http.hpp>
#include <gtest/gtest.h>

namespace ramjet::net {
namespace {

namespace http = boost::beast::http;

TEST(StripHopByHop, RemovesStandardHopHeadersAndThoseNamedInConnection) {
  http::fields f;
  f.set(http::field::connection, "keep-alive, X-Secret-Hop");
  f.set("X-Secret-Hop", "1");
  f.set(http::field::keep_alive, "timeout=5");
  f.set(http::field::te, "trailers");
  f.set(http::field::upgrade, "h2c");
  f.set(http::field::proxy_authorization, "Basic x");
  f.set(http::field::transfer_encoding, "chunked");
  f.set(http::field::content_length, "10");
  f.set(http::field::host, "a");
  f.set("X-Request-Id", "abc");
  f.set(http::field::authorization, "Bearer client");
  strip_hop_by_hop(f);
  EXPECT_EQ(f.count("X-Secret-Hop"), 0u);
  EXPECT_EQ(f.count(http::field::connection), 0u);
  EXPECT_EQ(f.count(http::field::keep_alive), 0u);
  EXPECT_EQ(f.count(http::field::te), 0u);
  EXPECT_EQ(f.count(http::field::upgrade), 0u);
  EXPECT_EQ(f.count(http::field::proxy_authorization), 0u);
  EXPECT_EQ(f.count(http::field::transfer_encoding), 0u);
  EXPECT_EQ(f.count(http::field::content_length), 0u);
  EXPECT_EQ(f.count(http::field::host), 0u);
  EXPECT_EQ(f["X-Request-Id"], "abc");
  EXPECT_EQ(f[http::field::authorization], "Bearer client");
}

}  // namespace
}  // namespace ramjet::net

namespace ramjet::net {
namespace {

TEST(HeadFields, FindIsTheFirstFieldOfANameInAnyCase) {
  HeadFields f;
  f.add(http::field::unknown, "X-Priority", "batch");
  f.add(http::field::unknown, "x-priority", "interactive");
  f.add(http::field::content_type, "Content-Type", "application/json");
  EXPECT_EQ(f.find("x-PRIORITY"), "batch");
  EXPECT_EQ(f.find("content-type"), "application/json");  // a known field by its name too
  EXPECT_EQ(f.find("X-TTFT-Target-Ms"), std::nullopt);
}

}  // namespace
}  // namespace ramjet::net
