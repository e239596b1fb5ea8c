#include "sse.h"

#include <gtest/gtest.h>

#include <vector>

namespace ramjet::bench {
namespace {

std::vector<std::string> split(std::string_view stream, size_t step) {
  SseSplitter s;
  std::vector<std::string> events;
  for (size_t i = 0; i < stream.size(); i += step)
    EXPECT_TRUE(s.feed(stream.substr(i, step), [&](std::string_view d) { events.emplace_back(d); }));
  s.finish([&](std::string_view d) { events.emplace_back(d); });
  return events;
}

// What vLLM streams for a two-token answer with include_usage.
const std::string kVllmStream =
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":"
    "{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":"
    "{\"content\":\"Hel\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":"
    "{\"content\":\"lo \\\"x\\\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":"
    "{\"content\":\"\"},\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}]}\n\n"
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":"
    "{\"prompt_tokens\":100,\"total_tokens\":103,\"completion_tokens\":3,"
    "\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\n"
    "data: [DONE]\n\n";

TEST(SseSplitter, SplitsEventsIdenticallyForEveryReadSize) {
  auto whole = split(kVllmStream, kVllmStream.size());
  ASSERT_EQ(whole.size(), 6u);
  EXPECT_EQ(whole.back(), "[DONE]");
  for (size_t step : {1u, 2u, 3u, 5u, 17u, 64u}) EXPECT_EQ(split(kVllmStream, step), whole) << step;
}

TEST(SseSplitter, HandlesCrlfCommentsOtherFieldsAndMultiLineData) {
  auto ev = split(": keep-alive\r\nevent: x\r\ndata:a\r\ndata: b\r\n\r\nid: 3\r\n\r\ndata: c", 4);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0], "a\nb");
  EXPECT_EQ(ev[1], "c");  // dispatched by finish() without a trailing blank line
}

TEST(SseSplitter, ReportsAnEventLargerThanTheLimit) {
  SseSplitter s(16);
  bool ok = s.feed("data: " + std::string(64, 'x'), [](std::string_view) {});
  EXPECT_FALSE(ok);
}

TEST(ScanChunk, FindsContentFinishUsageAndDone) {
  auto c = scan_chunk(
      "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}");
  EXPECT_TRUE(c.has_token);
  EXPECT_EQ(c.content, "hi");
  EXPECT_FALSE(c.finished);
  auto f = scan_chunk("{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}");
  EXPECT_FALSE(f.has_token);
  EXPECT_TRUE(f.finished);
  auto u = scan_chunk(
      "{\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":4,"
      "\"prompt_tokens_details\":{\"cached_tokens\":8}}}");
  ASSERT_TRUE(u.has_usage);
  EXPECT_EQ(u.usage.prompt_tokens, 10);
  EXPECT_EQ(u.usage.completion_tokens, 4);
  EXPECT_EQ(u.usage.cached_tokens, 8);
  EXPECT_TRUE(scan_chunk("[DONE]").done);
  EXPECT_TRUE(scan_chunk("[DONE]\r").done);
}

TEST(ScanChunk, EmptyNullAndRoleOnlyDeltasCarryNoToken) {
  EXPECT_FALSE(scan_chunk("{\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}").has_token);
  EXPECT_FALSE(scan_chunk("{\"choices\":[{\"delta\":{\"content\":null}}]}").has_token);
  EXPECT_FALSE(scan_chunk("{\"choices\":[{\"delta\":{}}]}").has_token);
  EXPECT_FALSE(scan_chunk("{\"choices\":[{\"delta\":{\"content\":\"\"}}],\"usage\":null}").has_usage);
}

TEST(ScanChunk, ReasoningContentCountsAsAToken) {
  auto c = scan_chunk("{\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}");
  EXPECT_TRUE(c.has_token);
  EXPECT_EQ(c.content, "");
}

TEST(ScanChunk, KeysInsideStringValuesAreNotMistakenForKeys) {
  auto c = scan_chunk(
      "{\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\":{\\\"prompt_tokens\\\":9} "
      "\\\"finish_reason\\\":\\\"stop\\\"\"},\"finish_reason\":null}]}");
  EXPECT_TRUE(c.has_token);
  EXPECT_FALSE(c.has_usage);
  EXPECT_FALSE(c.finished);
}

TEST(ScanChunk, ToleratesWhitespaceAfterKeys) {
  auto c = scan_chunk("{\"choices\": [{\"delta\": {\"content\" : \"x\"}, \"finish_reason\": \"stop\"}]}");
  EXPECT_TRUE(c.has_token);
  EXPECT_TRUE(c.finished);
}

TEST(ScanChunk, RecognisesBothErrorShapes) {
  EXPECT_TRUE(scan_chunk("{\"error\":{\"message\":\"boom\",\"code\":500}}").error);
  EXPECT_TRUE(scan_chunk("{\"object\":\"error\",\"message\":\"boom\"}").error);
  EXPECT_FALSE(scan_chunk("{\"choices\":[],\"usage\":{\"prompt_tokens\":1}}").error);
}

TEST(StreamAccount, MeasuresTtftTpotAndUsageFromTimedEvents) {
  StreamAccount a(true);
  SseSplitter s;
  // events arrive at t = 0.1, 0.2, 0.3, 0.4, 0.5, 0.6
  double t = 0;
  std::string_view rest = kVllmStream;
  while (!rest.empty()) {
    size_t end = rest.find("\n\n") + 2;
    t += 0.1;
    s.feed(rest.substr(0, end), [&](std::string_view d) { a.on_event(d, t); });
    rest.remove_prefix(end);
  }
  EXPECT_TRUE(a.done());
  EXPECT_TRUE(a.finished());
  EXPECT_FALSE(a.error());
  EXPECT_EQ(a.content_chunks(), 2u);
  EXPECT_DOUBLE_EQ(a.first_token_time(), 0.2);  // the role chunk has empty content
  EXPECT_DOUBLE_EQ(a.last_token_time(), 0.30000000000000004);
  EXPECT_EQ(a.output_tokens(), 3u);  // usage wins over the chunk count
  EXPECT_NEAR(a.tpot(), 0.1 / 2, 1e-12);
  EXPECT_EQ(a.usage().prompt_tokens, 100);
  EXPECT_EQ(a.usage().cached_tokens, 64);
  EXPECT_EQ(a.content(), "Hello \"x\"");
}

TEST(StreamAccount, FallsBackToCountingContentChunksWithoutUsage) {
  StreamAccount a;
  a.on_event("{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}", 1.0);
  a.on_event("{\"choices\":[{\"delta\":{\"content\":\"b\"}}]}", 1.5);
  a.on_event("{\"choices\":[{\"delta\":{\"content\":\"c\"}}]}", 2.0);
  EXPECT_EQ(a.output_tokens(), 3u);
  EXPECT_DOUBLE_EQ(a.tpot(), 0.5);
  EXPECT_EQ(a.usage().prompt_tokens, -1);
  EXPECT_FALSE(a.done());
  EXPECT_EQ(a.content(), "");  // not collected
}

TEST(StreamAccount, SingleTokenHasNoTpot) {
  StreamAccount a;
  a.on_event("{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}", 1.0);
  EXPECT_LT(a.tpot(), 0);
}

TEST(StreamAccount, ReadsANonStreamedCompletion) {
  StreamAccount a(true);
  a.on_json_body(
      "{\"id\":\"x\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
      "\"assistant\",\"content\":\"Hi there\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":"
      "12,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":null}}}",
      0.25);
  EXPECT_TRUE(a.done());
  EXPECT_TRUE(a.finished());
  EXPECT_EQ(a.output_tokens(), 3u);
  EXPECT_EQ(a.usage().prompt_tokens, 12);
  EXPECT_EQ(a.usage().cached_tokens, -1);
  EXPECT_EQ(a.content(), "Hi there");
  StreamAccount bad;
  bad.on_json_body("{\"object\":\"error\"}", 0.1);
  EXPECT_TRUE(bad.error());
}

}  // namespace
}  // namespace ramjet::bench
