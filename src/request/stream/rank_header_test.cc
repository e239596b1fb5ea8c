#include "request/stream/rank_header.h"

#include <gtest/gtest.h>

#include <string>

namespace ramjet::request {
namespace {

namespace http = boost::beast::http;

TEST(RankHeader, AClientsRankFieldIsRecognisedInAnyCaseAndNothingElseIs) {
  net::HeadFields f;
  f.add(http::field::unknown, "x-data-parallel-rank", "3");
  f.add(http::field::unknown, "X-DATA-PARALLEL-RANK", "7");
  f.add(http::field::unknown, "X-Data-Parallel-Ranks", "1");
  f.add(http::field::unknown, "X-Session-ID", "s");
  f.add(http::field::content_type, "Content-Type", "application/json");
  EXPECT_TRUE(is_rank_header(f, 0));
  EXPECT_TRUE(is_rank_header(f, 1));
  EXPECT_FALSE(is_rank_header(f, 2));
  EXPECT_FALSE(is_rank_header(f, 3));
  EXPECT_FALSE(is_rank_header(f, 4));
}

TEST(RankHeader, ARankTargetGetsItsRankAndAWholeEngineNone) {
  net::HeadBuffer out;
  EXPECT_EQ(append_rank_header(out, std::nullopt), 0u);
  EXPECT_EQ(out.size(), 0u);
  EXPECT_EQ(append_rank_header(out, 0u), 1u);
  EXPECT_EQ(append_rank_header(out, 12u), 1u);
  EXPECT_EQ(std::string(out.data(), out.size()), "X-Data-Parallel-Rank: 0\r\nX-Data-Parallel-Rank: 12\r\n");
}

}  // namespace
}  // namespace ramjet::request
