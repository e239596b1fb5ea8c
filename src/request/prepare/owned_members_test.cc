#include "request/prepare/owned_members.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace ramjet::request {
namespace {

using Ranges = std::vector<std::pair<size_t, size_t>>;

OwnedMembers scan(std::string_view body, uint32_t depth = 128) { return find_owned_members(body, kSglangRankMembers, depth); }

TEST(OwnedMembers, AnObjectWithoutRankMembersHasNothingToDrop) {
  const OwnedMembers f = scan(R"( {"model":"m","messages":[{"role":"user","content":"hi"}]} )");
  EXPECT_TRUE(f.object);
  EXPECT_EQ(f.open, 2u);
  EXPECT_TRUE(f.members_left);
  EXPECT_TRUE(f.drop.empty());
  EXPECT_EQ(f.dropped_bytes(), 0u);
}

TEST(OwnedMembers, TheEmptyObjectIsAnObjectWithNoMembers) {
  const OwnedMembers f = scan("{ }");
  EXPECT_TRUE(f.object);
  EXPECT_EQ(f.open, 1u);
  EXPECT_FALSE(f.members_left);
  EXPECT_TRUE(f.drop.empty());
}

TEST(OwnedMembers, ARankMemberGoesWithTheCommaAfterItUnlessItIsLast) {
  //                      0123456789012345678901234567890
  const std::string body = R"({"routed_dp_rank":3, "a":1})";
  EXPECT_EQ(scan(body).drop, (Ranges{{1, 21}}));  // `"routed_dp_rank":3, `
  const std::string last = R"({"a":1 , "data_parallel_rank" : 2 })";
  EXPECT_EQ(scan(last).drop, (Ranges{{6, 33}}));  // ` , "data_parallel_rank" : 2`
}

TEST(OwnedMembers, NeighbouringRankMembersMergeIntoOneRange) {
  const std::string body = R"({"x":0,"routed_dp_rank":1,"data_parallel_rank":2,"y":3,"routed_dp_rank":4})";
  const OwnedMembers f = scan(body);
  ASSERT_EQ(f.drop.size(), 2u);
  EXPECT_EQ(body.substr(f.drop[0].first, f.drop[0].second - f.drop[0].first),
            R"("routed_dp_rank":1,"data_parallel_rank":2,)");
  EXPECT_EQ(body.substr(f.drop[1].first, f.drop[1].second - f.drop[1].first), R"(,"routed_dp_rank":4)");
  EXPECT_TRUE(f.members_left);
}

TEST(OwnedMembers, AnObjectOfRankMembersAloneDropsThemAll) {
  const std::string body = R"({ "routed_dp_rank":1 , "data_parallel_rank":null })";
  const OwnedMembers f = scan(body);
  EXPECT_FALSE(f.members_left);
  EXPECT_EQ(f.drop, (Ranges{{2, 48}}));
}

TEST(OwnedMembers, NestedRankMembersAreNotTheEnginesAndStay) {
  const OwnedMembers f = scan(R"({"extra_body":{"routed_dp_rank":1},"m":[{"data_parallel_rank":2}],"s":"\"routed_dp_rank\":1"})");
  EXPECT_TRUE(f.object);
  EXPECT_TRUE(f.drop.empty());
}

TEST(OwnedMembers, EscapedKeysAreComparedAsPythonDecodesThem) {
  EXPECT_EQ(scan(R"({"routed\u005fdp_rank":1})").drop.size(), 1u);
  EXPECT_EQ(scan(R"({"\u0072outed_dp_rank":1,"a":2})").drop.size(), 1u);
  EXPECT_EQ(scan(R"({"data_parallel\u005Frank":1})").drop.size(), 1u);
  EXPECT_TRUE(scan(R"({"routed_dp_rank\u00e9":1})").drop.empty());
  EXPECT_TRUE(scan(R"({"routed\"dp_rank":1})").drop.empty());
  EXPECT_TRUE(scan(R"({"a\\":{"b":"c\\"}})").object);
  EXPECT_FALSE(scan(R"({"routed\qdp_rank":1})").object);    // not a JSON escape
  EXPECT_FALSE(scan(R"({"routed\u00zzdp_rank":1})").object);  // not hex
}

TEST(OwnedMembers, WhitespaceAroundTheObjectIsAllowed) {
  EXPECT_TRUE(scan(" \r\n\t{\"routed_dp_rank\":1}\n").object);
  EXPECT_TRUE(scan("{\"a\":1}\n\n").object);
}

TEST(OwnedMembers, AnythingButOneWellFormedObjectIsNotAnObject) {
  for (const char* body : {"", " ", "[]", "\"s\"", "1", "null", "{", "}", "{\"a\":1", "{\"a\":1}x", "{\"a\":1}{}",
                           "{\"a\" 1}", "{\"a\":}", "{\"a\":1,}", "{,}", "{a:1}", "{\"a\":[1,2}", "{\"a\":{\"b\":[}]}",
                           "{\"a\":\"unterminated}", "{\"a\":1 \"b\":2}", "{\"a\":\"x\\", "{\"a\":1}}"}) {
    EXPECT_FALSE(scan(body).object) << body;
  }
}

TEST(OwnedMembers, NestingPastTheDepthLimitIsNotAnObject) {
  EXPECT_TRUE(scan(R"({"a":[[1]]})", 3).object);
  EXPECT_FALSE(scan(R"({"a":[[[1]]]})", 3).object);
  EXPECT_FALSE(scan("{}", 0).object);
  std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_FALSE(scan(deep).object);
}

TEST(OwnedMembers, OnlyTheNamesAskedForAreOwned) {
  const std::string body = R"({"priority":1,"routed_dp_rank":2,"priority_x":3,"pri\u006frity":4})";
  const OwnedMembers f = find_owned_members(body, kPriorityMembers, 128);
  ASSERT_TRUE(f.object);
  ASSERT_EQ(f.drop.size(), 2u);
  EXPECT_EQ(body.substr(f.drop[0].first, f.drop[0].second - f.drop[0].first), R"("priority":1,)");
  EXPECT_EQ(body.substr(f.drop[1].first, f.drop[1].second - f.drop[1].first), R"(,"pri\u006frity":4)");
  EXPECT_TRUE(f.members_left);
  EXPECT_TRUE(find_owned_members(body, {}, 128).drop.empty());  // no names: nothing is owned
}

}  // namespace
}  // namespace ramjet::request
