#include "request/stream/owned_body.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <string>

namespace ramjet::request {
namespace {

namespace json = boost::json;

// The body an SGLang target of `rank` gets, as one string, checked against the size the head says.
std::string sent(std::string_view body, std::optional<int64_t> value, size_t* pieces = nullptr,
                 BodyEdit edit = BodyEdit::kSglangRank) {
  const OwnedMembers f = find_owned_members(body, owned_names(edit), 128);
  std::string member;
  owned_member(member, edit, value, f);
  std::string out;
  size_t n = 0;
  edited_body(body, f, member, [&](std::string_view p) {
    out.append(p);
    ++n;
  });
  EXPECT_EQ(out.size(), edited_body_size(body, f, member));
  EXPECT_EQ(n, edited_body_pieces(f));
  if (pieces) *pieces = n;
  return out;
}

// The same JSON object as `client` less its top-level rank members, with routed_dp_rank = rank.
void expect_pinned(std::string_view client, uint32_t rank) {
  const std::string body = sent(client, rank);
  json::value got = json::parse(body);
  json::object want = json::parse(client).as_object();
  want.erase(kRoutedDpRank);
  want.erase(kDataParallelRank);
  ASSERT_TRUE(got.is_object()) << body;
  EXPECT_EQ(got.as_object().at(kRoutedDpRank), json::value(rank)) << body;
  EXPECT_FALSE(got.as_object().contains(kDataParallelRank)) << body;
  got.as_object().erase(kRoutedDpRank);
  EXPECT_EQ(got, json::value(want)) << body;
}

TEST(RankBody, ARankTargetsMemberGoesFirst) {
  EXPECT_EQ(sent(R"({"model":"m","stream":true})", 3u), R"({"routed_dp_rank":3,"model":"m","stream":true})");
  EXPECT_EQ(sent("{}", 0u), R"({"routed_dp_rank":0})");
  EXPECT_EQ(sent("{ }", 4294967295u), R"({"routed_dp_rank":4294967295 })");
}

TEST(RankBody, TheClientsRankMembersAreReplacedWhereverTheyStand) {
  EXPECT_EQ(sent(R"({"routed_dp_rank":7,"model":"m"})", 1u), R"({"routed_dp_rank":1,"model":"m"})");
  EXPECT_EQ(sent(R"({"model":"m", "routed_dp_rank": 7, "n":1})", 1u), R"({"routed_dp_rank":1,"model":"m", "n":1})");
  EXPECT_EQ(sent(R"({"model":"m","data_parallel_rank":7})", 2u), R"({"routed_dp_rank":2,"model":"m"})");
  EXPECT_EQ(sent(R"({"routed_dp_rank":7})", 2u), R"({"routed_dp_rank":2})");
  EXPECT_EQ(sent(R"({"routed_dp_rank":7,"data_parallel_rank":"x"})", 2u), R"({"routed_dp_rank":2})");
}

TEST(RankBody, AWholeEngineGetsTheBodyLessTheClientsRankMembers) {
  EXPECT_EQ(sent(R"({"model":"m","routed_dp_rank":7})", std::nullopt), R"({"model":"m"})");
  EXPECT_EQ(sent(R"({"routed_dp_rank":7})", std::nullopt), R"({})");
  EXPECT_EQ(sent(R"({"model":"m"})", std::nullopt), R"({"model":"m"})");
}

TEST(RankBody, ABodyThatIsNotAJsonObjectGoesAsItCameWithoutARank) {
  size_t pieces = 0;
  for (std::string_view body : {"", "[1,2]", "not json", "{\"routed_dp_rank\":1", "{\"a\":1} trailing"}) {
    EXPECT_EQ(sent(body, 2u, &pieces), body);
    EXPECT_EQ(pieces, 1u);
  }
}

TEST(RankBody, TheResultIsTheSameObjectPinnedToTheRank) {
  for (std::string_view body : {
           R"({"model":"m","messages":[{"role":"user","content":"hi"}]})",
           R"({"routed_dp_rank":5,"model":"m"})",
           R"({"model":"m","routed_dp_rank":5,"stream":false})",
           R"({"model":"m","stream":false,"routed_dp_rank":5})",
           R"({"data_parallel_rank":1,"routed_dp_rank":5})",
           R"({"a":{"routed_dp_rank":1,"b":[{"data_parallel_rank":2}]},"routed_dp_rank":5,"c":"}"})",
           R"({"routed\u005fdp_rank":5,"k\"ey":"v\\","data_parallel_rank":null})",
           "{\n  \"model\": \"m\",\n  \"routed_dp_rank\": 5\n}\n",
           "{\"model\":\"m\"}\n\t ",
           R"({"x":1,"routed_dp_rank":2,"y":3,"data_parallel_rank":4,"z":5,"routed_dp_rank":6})",
       }) {
    SCOPED_TRACE(body);
    expect_pinned(body, 3u);
  }
}

TEST(RankBody, ManyScatteredRankMembersStillMakeOneObject) {
  std::string body = "{";
  for (int i = 0; i < 50; ++i) body += "\"a" + std::to_string(i) + "\":" + std::to_string(i) + ",\"routed_dp_rank\":9,";
  body += "\"z\":0}";
  size_t pieces = 0;
  sent(body, 1u, &pieces);
  EXPECT_EQ(pieces, 53u);  // more than one gather write takes: the proxy copies them (add_edited_body)
  expect_pinned(body, 1u);
}

std::string prioritised(std::string_view body, int64_t priority) {
  return sent(body, priority, nullptr, BodyEdit::kVllmPriority);
}

TEST(PriorityBody, RamjetsPriorityGoesFirstAndTheClientsIsLeftOut) {
  EXPECT_EQ(prioritised(R"({"model":"m"})", 1), R"({"priority":1,"model":"m"})");
  EXPECT_EQ(prioritised(R"({"model":"m","priority":-100})", 0), R"({"priority":0,"model":"m"})");
  EXPECT_EQ(prioritised(R"({"priority":-5,"priority":-6})", 1), R"({"priority":1})");
  EXPECT_EQ(prioritised(R"({"pri\u006frity":-5,"model":"m"})", 1), R"({"priority":1,"model":"m"})");
  // Nested priorities and the rank members are not vLLM's per-request priority: they stay.
  EXPECT_EQ(prioritised(R"({"x":{"priority":-5},"routed_dp_rank":2})", 1),
            R"({"priority":1,"x":{"priority":-5},"routed_dp_rank":2})");
  // A priority edit leaves an SGLang rank member alone, and a rank edit a client's priority.
  EXPECT_EQ(sent(R"({"priority":3,"routed_dp_rank":1})", 2u), R"({"routed_dp_rank":2,"priority":3})");
  EXPECT_EQ(prioritised("[1]", 1), "[1]");
}

TEST(PriorityBody, NoEditLeavesTheBodyAsItCame) {
  const std::string body = R"({"priority":-100,"routed_dp_rank":1})";
  EXPECT_EQ(sent(body, 1, nullptr, BodyEdit::kNone), body);
}

}  // namespace
}  // namespace ramjet::request
