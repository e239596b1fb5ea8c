// sim/server/sglang_dp: the rank an SGLang server pins a request to, restated from SGLang's
// protocol.py, serving_base.py, tokenizer_manager.py and data_parallel_controller.py.
#include "sim/server/sglang_dp.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

namespace ramjet::sim {
namespace {

namespace json = boost::json;

constexpr SglangRankSources kBoth{.body = true, .header = true};

std::optional<int64_t> asked(std::string_view body, std::optional<std::string_view> header = std::nullopt,
                             SglangRankSources reads = kBoth) {
  auto r = sglang_requested_rank(json::parse(body).as_object(), header, reads);
  EXPECT_TRUE(r) << (r ? "" : r.error());
  if (!r || !r.value()) return std::nullopt;
  return r.value()->value;
}

std::string refused(std::string_view body, std::optional<std::string_view> header = std::nullopt) {
  auto r = sglang_requested_rank(json::parse(body).as_object(), header, kBoth);
  return r ? std::string() : r.error();
}

TEST(SglangDp, RoutedDpRankNamesTheRankAndTheDeprecatedNameCountsWhenItIsUnset) {
  EXPECT_EQ(asked(R"({"routed_dp_rank":2})"), 2);
  EXPECT_EQ(asked(R"({"data_parallel_rank":3})"), 3);
  EXPECT_EQ(asked(R"({"routed_dp_rank":null,"data_parallel_rank":3})"), 3);
  EXPECT_EQ(asked(R"({"routed_dp_rank":1,"data_parallel_rank":3})"), 1);
  EXPECT_EQ(asked(R"({"model":"m"})"), std::nullopt);
  EXPECT_EQ(asked(R"({"extra":{"routed_dp_rank":1}})"), std::nullopt);
}

TEST(SglangDp, TheHeaderWinsOverTheBodyWhereTheRouteReadsIt) {
  EXPECT_EQ(asked(R"({"routed_dp_rank":1})", "3"), 3);
  EXPECT_EQ(asked(R"({})", " +2 "), 2);
  EXPECT_EQ(asked(R"({"routed_dp_rank":1})", "3", SglangRankSources{.body = true, .header = false}), 1);
  EXPECT_EQ(asked(R"({"routed_dp_rank":1})", "3", SglangRankSources{.body = false, .header = true}), 3);
  EXPECT_EQ(asked(R"({"routed_dp_rank":1})", std::nullopt, SglangRankSources{}), std::nullopt);
}

TEST(SglangDp, ANonIntegerFieldOrHeaderIsRefused) {
  EXPECT_EQ(refused(R"({"routed_dp_rank":"1"})"), "routed_dp_rank: Input should be a valid integer");
  EXPECT_EQ(refused(R"({"routed_dp_rank":1.5})"), "routed_dp_rank: Input should be a valid integer");
  EXPECT_EQ(refused(R"({"data_parallel_rank":true})"), "data_parallel_rank: Input should be a valid integer");
  EXPECT_EQ(refused(R"({})", "abc"), "Invalid X-Data-Parallel-Rank header: must be an integer, got 'abc'");
  EXPECT_EQ(refused(R"({})", ""), "Invalid X-Data-Parallel-Rank header: must be an integer, got ''");
}

TEST(SglangDp, ARankOutsideTheEnginesIsRefusedAndRankZeroOfOneIsIgnored) {
  auto check = [](int64_t v, size_t n) {
    return sglang_rank_check(DpRankHeader{std::to_string(v), v}, n);
  };
  EXPECT_EQ(check(3, 4).value(), std::optional<size_t>(3));
  EXPECT_EQ(check(4, 4).error(), "routed_dp_rank=4 out of range [0, 4)");
  EXPECT_EQ(check(-1, 4).error(), "routed_dp_rank=-1 out of range [0, 4)");
  EXPECT_EQ(check(0, 1).value(), std::nullopt);
  EXPECT_EQ(check(1, 1).error(), "routed_dp_rank=1 out of range [0, 1)");
  EXPECT_EQ(sglang_rank_check(std::nullopt, 4).value(), std::nullopt);
  auto huge = sglang_requested_rank(json::parse(R"({"routed_dp_rank":18446744073709551615})").as_object(),
                                    std::nullopt, kBoth);
  ASSERT_TRUE(huge);
  EXPECT_EQ(sglang_rank_check(huge.value(), 4).error(), "routed_dp_rank=18446744073709551615 out of range [0, 4)");
}

TEST(SglangDp, WithoutARankRequestsAreDealtRoundRobin) {
  RoundRobin rr;
  std::vector<size_t> got;
  for (int i = 0; i < 6; ++i) got.push_back(rr.next(4));
  EXPECT_EQ(got, (std::vector<size_t>{0, 1, 2, 3, 0, 1}));
  RoundRobin one;
  EXPECT_EQ(one.next(1), 0u);
  EXPECT_EQ(one.next(1), 0u);
}

TEST(SglangDp, ErrorsHaveSglangsOpenAiShape) {
  EXPECT_EQ(sglang_error("routed_dp_rank=9 out of range [0, 4)", "BadRequestError", 400),
            R"j({"object":"error","message":"routed_dp_rank=9 out of range [0, 4)","type":"BadRequestError","param":null,"code":400})j");
}

}  // namespace
}  // namespace ramjet::sim
