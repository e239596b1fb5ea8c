#include "trace.h"

#include <gtest/gtest.h>

namespace ramjet::bench {
namespace {

TEST(ParseTrace, ReadsMooncakeLinesSkipsBlanksAndSortsByTimestamp) {
  auto r = parse_trace(
      "{\"timestamp\": 27482, \"input_length\": 6955, \"output_length\": 52, \"hash_ids\": [46, 47, 48]}\n"
      "\n"
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": []}\r\n"
      "{\"timestamp\": 30.5, \"input_length\": 10, \"output_length\": 1}");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].timestamp_ms, 0);
  EXPECT_EQ((*r)[1].timestamp_ms, 30.5);
  EXPECT_TRUE((*r)[1].hash_ids.empty());
  EXPECT_EQ((*r)[2].input_length, 6955u);
  EXPECT_EQ((*r)[2].output_length, 52u);
  EXPECT_EQ((*r)[2].hash_ids, (std::vector<uint64_t>{46, 47, 48}));
}

TEST(ParseTrace, ReportsTheFirstBadLineByNumberWithoutItsContent) {
  auto r = parse_trace("{\"timestamp\":0,\"input_length\":1,\"output_length\":1}\nsecret-prompt-text\n");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "bad_trace");
  EXPECT_NE(r.error().message.find("line 2"), std::string::npos);
  EXPECT_EQ(r.error().message.find("secret"), std::string::npos);
}

TEST(ParseTrace, RejectsMissingOrInvalidFields) {
  for (const char* line : {
           "{\"input_length\":1,\"output_length\":1}",
           "{\"timestamp\":-1,\"input_length\":1,\"output_length\":1}",
           "{\"timestamp\":0,\"input_length\":1.5,\"output_length\":1}",
           "{\"timestamp\":0,\"input_length\":1}",
           "{\"timestamp\":0,\"input_length\":1,\"output_length\":1,\"hash_ids\":[-3]}",
           "{\"timestamp\":0,\"input_length\":1,\"output_length\":1,\"hash_ids\":\"x\"}",
           "[1,2]",
       }) {
    EXPECT_FALSE(parse_trace(line)) << line;
  }
}

TEST(ParseTrace, EnforcesLimits) {
  TraceLimits l;
  l.max_entries = 1;
  l.max_hash_ids = 2;
  l.max_input_length = 100;
  const char* one = "{\"timestamp\":0,\"input_length\":1,\"output_length\":1}\n";
  EXPECT_FALSE(parse_trace(std::string(one) + one, l));
  EXPECT_FALSE(parse_trace("{\"timestamp\":0,\"input_length\":1,\"output_length\":1,\"hash_ids\":[1,2,3]}", l));
  EXPECT_FALSE(parse_trace("{\"timestamp\":0,\"input_length\":101,\"output_length\":1}", l));
  EXPECT_TRUE(parse_trace(one, l));
}

}  // namespace
}  // namespace ramjet::bench
