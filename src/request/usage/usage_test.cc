#include "request/usage/usage.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ramjet::request {
namespace {

// A vLLM chat stream with stream_options.include_usage: role chunk, two content chunks, the
// finish chunk, the usage-only chunk, [DONE].
const std::string kChatStream =
    "data: "
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
    "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":"
    "null,"
    "\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: "
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
    "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"logprobs\":null,"
    "\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: "
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
    "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"logprobs\":null,"
    "\"finish_reason\":\"stop\",\"stop_reason\":null}],\"usage\":null}\n\n"
    "data: "
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
    "\"choices\":[],\"usage\":{\"prompt_tokens\":1200,\"total_tokens\":1202,"
    "\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":1024}}}\n\n"
    "data: [DONE]\n\n";

// Byte offset of the '\n' that completes the first content chunk.
size_t first_token_offset(const std::string& stream, std::string_view marker) {
  return stream.find('\n', stream.find(marker));
}

struct Fed {
  Usage usage;
  uint32_t failures = 0;
  std::vector<size_t> signalled_at;  // indices of the feed() calls that returned true
};

Fed feed_in_chunks(const std::string& body, size_t chunk, bool sse = true,
                   Endpoint endpoint = Endpoint::kChat, UsageLimits limits = {}) {
  UsageAccumulator acc(endpoint, sse, limits);
  Fed out;
  for (size_t i = 0, call = 0; i < body.size(); i += chunk, ++call) {
    if (acc.feed(std::string_view(body).substr(i, chunk))) out.signalled_at.push_back(call);
  }
  acc.finish();
  out.usage = acc.usage();
  out.failures = acc.parse_failures();
  return out;
}

void expect_same(const Usage& a, const Usage& b) {
  EXPECT_EQ(a.prompt_tokens, b.prompt_tokens);
  EXPECT_EQ(a.cached_tokens, b.cached_tokens);
  EXPECT_EQ(a.completion_tokens, b.completion_tokens);
  EXPECT_EQ(a.finish_reason, b.finish_reason);
  EXPECT_EQ(a.generated, b.generated);
}

// --- OpenAI chat SSE ---

TEST(UsageSse, OpenAiChatStreamWithIncludeUsageReportsTokensCachedAndFinish) {
  auto r = feed_in_chunks(kChatStream, kChatStream.size());
  EXPECT_EQ(r.usage.prompt_tokens, 1200u);
  EXPECT_EQ(r.usage.cached_tokens, 1024u);
  EXPECT_EQ(r.usage.completion_tokens, 2u);
  EXPECT_EQ(r.usage.finish_reason, "stop");
  EXPECT_TRUE(r.usage.generated);
  EXPECT_EQ(r.failures, 0u);
  EXPECT_EQ(r.signalled_at, std::vector<size_t>{0});
  EXPECT_EQ(cache_outcome(r.usage), "partial");
}

TEST(UsageSse, FeedingOneByteAtATimeGivesIdenticalResults) {
  auto whole = feed_in_chunks(kChatStream, kChatStream.size());
  auto bytes = feed_in_chunks(kChatStream, 1);
  expect_same(whole.usage, bytes.usage);
  EXPECT_EQ(bytes.failures, 0u);
  // The signal comes on the call that delivers the newline ending the first content chunk.
  EXPECT_EQ(bytes.signalled_at, std::vector<size_t>{first_token_offset(kChatStream, "Hel")});
  for (size_t chunk : {2u, 3u, 7u, 64u, 129u}) {
    auto r = feed_in_chunks(kChatStream, chunk);
    expect_same(whole.usage, r.usage);
    EXPECT_EQ(r.failures, 0u);
    EXPECT_EQ(r.signalled_at.size(), 1u) << chunk;
  }
}

TEST(UsageSse, CrlfLineEndingsAreAccepted) {
  std::string crlf;
  for (char c : kChatStream) {
    if (c == '\n') crlf += '\r';
    crlf += c;
  }
  auto r = feed_in_chunks(crlf, 5);
  expect_same(feed_in_chunks(kChatStream, kChatStream.size()).usage, r.usage);
  EXPECT_EQ(r.failures, 0u);
}

TEST(UsageSse, PartialLineIsCarriedAcrossChunks) {
  UsageAccumulator acc(Endpoint::kChat, true);
  EXPECT_TRUE(acc.feed(
      "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\ndata: {\"usage\":{\"prompt_t"));
  EXPECT_EQ(acc.usage().prompt_tokens, std::nullopt);
  EXPECT_FALSE(acc.feed("okens\":10,\"completion_tokens\":3}}\n"));
  EXPECT_EQ(acc.usage().prompt_tokens, 10u);
  EXPECT_EQ(acc.usage().completion_tokens, 3u);
  EXPECT_EQ(acc.parse_failures(), 0u);
}

TEST(UsageSse, FirstChunkCanCarryTheFirstTokenInItsFirstCall) {
  UsageAccumulator acc(Endpoint::kChat, true);
  EXPECT_TRUE(acc.feed("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n"));
}

TEST(UsageSse, MalformedDataLineIsCountedAndParsingContinues) {
  UsageAccumulator acc(Endpoint::kChat, true);
  acc.feed("data: {\"choices\":[{\"delta\":{\"content\":\n\n");
  acc.feed("data: not json\n\n");
  acc.feed("data: {\"a\":1}}\n\n");
  EXPECT_EQ(acc.parse_failures(), 3u);
  EXPECT_TRUE(acc.feed(
      "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"length\"}]}\n"));
  acc.finish();
  EXPECT_EQ(acc.usage().finish_reason, "length");
  EXPECT_TRUE(acc.usage().generated);
  EXPECT_EQ(acc.parse_failures(), 3u);
}

TEST(UsageSse, DoneCommentsAndOtherFieldsAreIgnoredWithoutFailures) {
  UsageAccumulator acc(Endpoint::kChat, true);
  acc.feed(": keep-alive\nevent: message\nid: 7\nretry: 100\ndata:\ndata: [DONE]\ndata:[DONE]\n\n");
  acc.feed("data: 42\ndata: [1,2]\n  data: {broken\n");
  acc.finish();
  EXPECT_EQ(acc.parse_failures(), 0u);
  EXPECT_FALSE(acc.usage().generated);
}

TEST(UsageSse, DataPrefixWithoutSpaceIsAccepted) {
  UsageAccumulator acc(Endpoint::kChat, true);
  EXPECT_TRUE(acc.feed("data:{\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n"));
}

TEST(UsageSse, FirstTokenSignalFiresExactlyOnceAndNotOnTheRoleOnlyChunk) {
  UsageAccumulator acc(Endpoint::kChat, true);
  EXPECT_FALSE(acc.feed(
      "data: "
      "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"));
  EXPECT_FALSE(acc.usage().generated);
  EXPECT_FALSE(
      acc.feed("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":null}]}\n\n"));
  EXPECT_TRUE(acc.feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"));
  EXPECT_FALSE(acc.feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n"));
  EXPECT_FALSE(acc.feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"c\"}}]}\n\n"));
  EXPECT_TRUE(acc.usage().generated);
}

TEST(UsageSse, ToolCallDeltaCountsAsGenerated) {
  UsageAccumulator acc(Endpoint::kChat, true);
  EXPECT_FALSE(
      acc.feed("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"tool_calls\":[]}}]}\n"));
  EXPECT_TRUE(acc.feed(
      "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":"
      "\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]}}]}\n"));
  acc.feed("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n");
  EXPECT_EQ(finish_bucket(acc.usage().finish_reason), "tool_calls");
}

TEST(UsageSse, ReasoningDeltaCountsAsGenerated) {
  for (const char* key : {"reasoning_content", "reasoning"}) {
    UsageAccumulator acc(Endpoint::kChat, true);
    EXPECT_TRUE(acc.feed(std::string("data: {\"choices\":[{\"delta\":{\"") + key +
                         "\":\"Let me think\"}}]}\n"))
        << key;
  }
}

TEST(UsageSse, OnlyTheFirstChoiceSetsTheFinishReasonButAnyChoiceGenerates) {
  UsageAccumulator acc(Endpoint::kChat, true);
  EXPECT_TRUE(acc.feed(
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":null},"
      "{\"index\":1,\"delta\":{\"content\":\"b\"},\"finish_reason\":\"length\"}]}\n"));
  EXPECT_EQ(acc.usage().finish_reason, "");
}

TEST(UsageSse, CompletionsTextCountsAsGenerated) {
  UsageAccumulator acc(Endpoint::kCompletions, true);
  EXPECT_FALSE(acc.feed(
      "data: {\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"\"}]}\n"));
  EXPECT_TRUE(
      acc.feed("data: {\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" the\","
               "\"finish_reason\":null}]}\n"));
}

TEST(UsageSse, TrailingLineWithoutNewlineIsParsedAtFinish) {
  UsageAccumulator acc(Endpoint::kChat, true);
  acc.feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}");
  EXPECT_EQ(acc.usage().prompt_tokens, std::nullopt);
  acc.finish();
  EXPECT_EQ(acc.usage().prompt_tokens, 5u);
  acc.finish();  // idempotent
  EXPECT_FALSE(acc.feed("data: {\"usage\":{\"prompt_tokens\":6}}\n"));
  EXPECT_EQ(acc.usage().prompt_tokens, 5u);
  EXPECT_EQ(acc.parse_failures(), 0u);
}

TEST(UsageSse, LongLineIsSkippedCountedOnceAndNotBuffered) {
  UsageLimits limits;
  limits.max_line_bytes = 64;
  const std::string long_line =
      "data: {\"choices\":[{\"delta\":{\"content\":\"" + std::string(200, 'x') + "\"}}]}\n";
  const std::string ok = "data: {\"usage\":{\"prompt_tokens\":7}}\n";
  for (size_t chunk : {size_t{1}, size_t{10}, size_t{1000}}) {
    auto r = feed_in_chunks(ok + long_line + ok, chunk, true, Endpoint::kChat, limits);
    EXPECT_EQ(r.failures, 1u) << chunk;
    EXPECT_FALSE(r.usage.generated) << chunk;
    EXPECT_EQ(r.usage.prompt_tokens, 7u);
  }
  // A line of exactly the limit is still parsed.
  std::string exact = "data: {\"usage\":{\"prompt_tokens\":7}}";
  exact += std::string(64 - exact.size(), ' ');
  auto r = feed_in_chunks(exact + "\n", 3, true, Endpoint::kChat, limits);
  EXPECT_EQ(r.failures, 0u);
  EXPECT_EQ(r.usage.prompt_tokens, 7u);
  // An unterminated over-long tail is counted once and not parsed at finish.
  auto tail = feed_in_chunks(ok + long_line.substr(0, 150), 4, true, Endpoint::kChat, limits);
  EXPECT_EQ(tail.failures, 1u);
}

TEST(UsageSse, DeeplyNestedEventIsAParseFailure) {
  UsageLimits limits;
  limits.max_json_depth = 4;
  auto r = feed_in_chunks("data: {\"a\":[[[[[1]]]]]}\ndata: {\"usage\":{\"prompt_tokens\":3}}\n", 9,
                          true, Endpoint::kChat, limits);
  EXPECT_EQ(r.failures, 1u);
  EXPECT_EQ(r.usage.prompt_tokens, 3u);
}

TEST(UsageJson, AResponseDenserThanEightBytesOfTapeAByteIsNotReadButALogprobsOneIs) {
  // 1M one-digit numbers beside the usage (12 bytes of tape a byte): a parse failure, no usage.
  std::string dense = R"({"usage":{"prompt_tokens":5,"completion_tokens":2},"pad":[)";
  for (int i = 0; i < (1 << 20); ++i) dense += i ? ",0" : "0";
  dense += "]}";
  auto r = feed_in_chunks(dense, 1 << 16, false);
  EXPECT_EQ(r.failures, 1u);
  EXPECT_EQ(r.usage.prompt_tokens, std::nullopt);
  // A 2 MiB chat completion with logprobs (token bytes as numbers: ~3 bytes of tape a byte) is read.
  std::string logprobs = R"({"choices":[{"finish_reason":"stop","logprobs":{"content":[)";
  for (int i = 0; i < 20000; ++i) {
    logprobs += std::string(i ? "," : "") +
                R"({"token":"ab","logprob":-0.25,"bytes":[97,98],"top_logprobs":[{"token":"a","logprob":-1.5,"bytes":[97]}]})";
  }
  logprobs += R"(]}}],"usage":{"prompt_tokens":5,"completion_tokens":20000}})";
  r = feed_in_chunks(logprobs, 1 << 16, false);
  EXPECT_EQ(r.failures, 0u);
  EXPECT_EQ(r.usage.completion_tokens, std::optional<uint64_t>(20000));
}

// After the first token only events that can change the Usage are parsed (a byte scan).
constexpr std::string_view kFirstToken = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n";

TEST(UsageSse, AfterTheFirstTokenEventsWithoutAccountingKeysAreNotParsed) {
  UsageAccumulator acc(Endpoint::kChat, true);
  EXPECT_TRUE(acc.feed(kFirstToken));
  // Malformed, but neither a usage, finish_reason, stop_reason nor status key: nothing to account.
  acc.feed("data: {\"choices\":[{\"delta\":{\"content\":\n");
  acc.feed("data: {\"choices\":[{\"delta\":{\"content\":\"y\"},\"finish_reason\":null,\"stop_reason\" : null}],"
           "\"usage\":null,\"status\":\tnull\n");
  EXPECT_EQ(acc.parse_failures(), 0u);
  // A non-null accounting key means a parse (and a malformed event with one is counted).
  acc.feed("data: {\"choices\":[{\"finish_reason\":\"stop\"}]\n");
  EXPECT_EQ(acc.parse_failures(), 1u);
  acc.feed("data: {\"choices\":[{\"delta\":{},\"finish_reason\" : \"length\"}]}\n");
  acc.feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n");
  acc.finish();
  EXPECT_EQ(acc.usage().finish_reason, "length");
  EXPECT_EQ(acc.usage().prompt_tokens, 7u);
  EXPECT_EQ(acc.usage().completion_tokens, 2u);
  EXPECT_EQ(acc.parse_failures(), 1u);
}

TEST(UsageSse, KeysSpeltWithEscapesOrQuotedInsideStringsAreStillFound) {
  UsageAccumulator acc(Endpoint::kMessages, true);
  EXPECT_TRUE(acc.feed(kFirstToken));
  // "usage" with \u0075 for its u: the DOM reads it as usage, so the scan must parse it.
  acc.feed("data: {\"\\u0075sage\":{\"input_tokens\":5,\"output_tokens\":4}}\n");
  EXPECT_EQ(acc.usage().prompt_tokens, 5u);
  EXPECT_EQ(acc.usage().completion_tokens, 4u);
  // Inside a string the key's quotes are escaped: no key, no change (parsed or not).
  acc.feed("data: {\"delta\":{\"text\":\"\\\"stop_reason\\\":\\\"x\\\"\"}}\n");
  EXPECT_EQ(acc.usage().finish_reason, "");
  acc.feed("data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n");
  acc.finish();
  EXPECT_EQ(acc.usage().finish_reason, "end_turn");
  EXPECT_EQ(acc.parse_failures(), 0u);
}

// The scan reads 16 or 32 bytes at a time (with an overlapping last block): an accounting key
// is found wherever it starts, and an event with none is never parsed, at every length and
// alignment. Each event here is malformed (no closing brace): parsed, it is one failure more.
TEST(UsageSse, TheScanFindsAnAccountingKeyAtEveryOffset) {
  for (size_t pad = 0; pad < 100; ++pad) {
    for (std::string_view key : {"finish_reason", "usage", "status", "stop_reason", "\\u0075sage"}) {
      UsageAccumulator acc(Endpoint::kChat, true);
      ASSERT_TRUE(acc.feed(kFirstToken));
      const std::string filler(pad, 'x');
      acc.feed("data: {\"a\":\"" + filler + "\",\"" + std::string(key) + "\":1\n");
      EXPECT_EQ(acc.parse_failures(), 1u) << "key " << key << " after " << pad << " bytes";
      // The same event with the key's value null, or no key: nothing to read.
      acc.feed("data: {\"a\":\"" + filler + "\",\"" + std::string(key) + "\":null\n");
      acc.feed("data: {\"a\":\"" + filler + "\",\"other\":1\n");
      acc.feed("data: {\"" + filler + "\"\n");
      EXPECT_EQ(acc.parse_failures(), key[0] == '\\' ? 2u : 1u) << "key " << key << " after " << pad << " bytes";
    }
  }
}

// After the first token, the whole lines of a feed that cannot change the Usage are passed over
// in one scan finding line ends and keys together, each event after the last read one's opening
// when it repeats it: they are exactly those the line-by-line path reads nothing from. Fed one
// byte at a time, every line takes that path (it is never whole in one feed): the same Usage and
// failures whatever the chunking. And the Usage is the one parsing every event gives, with no
// more failures, though the openings hold keys (in members extraction never reads). Keys at every
// position of a 32-byte block, values on the next line (`"usage"` then `: null` after a newline
// must be read: its line ends at the key), \r\n line ends, comments and blank lines.
TEST(UsageSse, LinesPassedOverInOneScanAreThoseTheLineByLinePathReadsNothingFrom) {
  const std::vector<std::string> keys = {"finish_reason", "usage", "status", "stop_reason", "\\u0075sage", "other"};
  // What follows a key's closing quote.
  const std::vector<std::string> values = {":null", ": null", ":1", ":{\"prompt_tokens\":3}", ":\"stop\"", "\n: null", ""};
  const std::vector<std::string> openings = {
      "{",
      "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",",
      "{\"id\":\"x\",\"meta\":{\"usage\":{\"prompt_tokens\":1},\"status\":\"s\"},\"finish_reason\":\"f\", ",
  };
  UsageLimits every;
  every.parse_every_event = true;
  uint64_t x = 88172645463325252ull;
  auto next = [&x](uint64_t n) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x % n;
  };
  size_t parsed = 0;
  for (int round = 0; round < 3000; ++round) {
    const std::string& opening = openings[next(openings.size())];
    std::string stream = "data: " + opening + "\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n";
    for (size_t lines = 1 + next(6); lines > 0; --lines) {
      switch (next(8)) {
        case 0:
          stream += "\n";
          break;
        case 1:
          stream += ": comment \"usage\":1\n";
          break;
        default: {
          std::string line = (next(2) == 0 ? "data: " + opening : std::string("data:{")) + "\"a\":\"" + std::string(next(70), 'x') + "\"";
          for (size_t k = next(3); k > 0; --k) line += ",\"" + keys[next(keys.size())] + "\"" + values[next(values.size())];
          if (next(2) != 0) line += "}";  // else malformed: a failure when read
          stream += line + (next(4) == 0 ? "\r\n" : "\n");
        }
      }
    }
    stream += "data: [DONE]\n\n";
    const Fed bytewise = feed_in_chunks(stream, 1);
    SCOPED_TRACE(stream);
    for (size_t chunk : {stream.size(), size_t{33}, size_t{64}, 1 + next(100)}) {
      const Fed fed = feed_in_chunks(stream, chunk);
      expect_same(fed.usage, bytewise.usage);
      ASSERT_EQ(fed.failures, bytewise.failures) << "chunk " << chunk;
    }
    const Fed all = feed_in_chunks(stream, stream.size(), true, Endpoint::kChat, every);
    expect_same(bytewise.usage, all.usage);
    ASSERT_LE(bytewise.failures, all.failures);
    parsed += bytewise.failures;
  }
  EXPECT_GT(parsed, 1000u);  // malformed lines with a key to read were read
}

TEST(UsageSse, ScanningGivesTheUsageThatParsingEveryEventGives) {
  UsageLimits every;
  every.parse_every_event = true;
  for (size_t chunk : {size_t{1}, size_t{7}, kChatStream.size()}) {
    const Fed scanned = feed_in_chunks(kChatStream, chunk);
    const Fed parsed = feed_in_chunks(kChatStream, chunk, true, Endpoint::kChat, every);
    expect_same(scanned.usage, parsed.usage);
    EXPECT_EQ(scanned.signalled_at, parsed.signalled_at);
    EXPECT_EQ(scanned.failures, 0u);
  }
}

// An event that repeats the last parsed event's opening (vLLM's id, object, created, model) is
// read on from the member after it: the same acceptance and the same Usage as reading it whole,
// whatever follows the opening.
TEST(UsageSse, AnEventReadOnFromARepeatedOpeningReadsAsWhole) {
  const std::string opening =
      "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",";
  // A role-only first chunk: no token yet, so every event is read (none skipped by the scan).
  const std::string first =
      "data: " + opening + "\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
  const std::vector<std::string> rests = {
      "\"choices\":[{\"finish_reason\":\"length\"}]}",            // valid
      "\"choices\":[{\"finish_reason\":\"stop\"}],}",             // trailing comma: refused
      "}",                                                      // `...,}`: refused
      " \"choices\":[{\"finish_reason\":\"stop\"}]}",             // whitespace first: read whole
      "\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3}}",  // valid
      "\"usage\":{\"prompt_tokens\":9}",                          // unterminated
      "\"usage\":{\"prompt_tokens\":9}}x",                        // bytes after the document
      "\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3}}  ",
      "\"choices\":[{\"finish_reason\":\"\xff\"}]}",             // bad UTF-8
      "\"choices\":[[[[{\"finish_reason\":\"stop\"}]]]]}",        // deeper than the limit below
      "\"id\":\"again\",\"choices\":[{\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":4}}",
  };
  UsageLimits limits;
  limits.max_json_depth = 5;
  UsageLimits every = limits;
  every.parse_every_event = true;
  for (const std::string& rest : rests) {
    const std::string stream = first + "data: " + opening + rest + "\n\n" + "data: [DONE]\n\n";
    const Fed read_on = feed_in_chunks(stream, stream.size(), true, Endpoint::kChat, limits);
    const Fed whole = feed_in_chunks(stream, stream.size(), true, Endpoint::kChat, every);
    SCOPED_TRACE(rest);
    expect_same(read_on.usage, whole.usage);
    EXPECT_EQ(read_on.failures, whole.failures);
  }
  // And what was accepted reads as expected.
  const std::string stream = first + "data: " + opening + rests[0] + "\n\n" + "data: " + opening + rests[4] + "\n\n";
  const Fed fed = feed_in_chunks(stream, 7);
  EXPECT_EQ(fed.usage.finish_reason, "length");
  EXPECT_EQ(fed.usage.prompt_tokens, 9u);
  EXPECT_EQ(fed.usage.completion_tokens, 3u);
  EXPECT_EQ(fed.failures, 0u);
}

// A member extraction reads, or a key spelt with escapes (it could spell one), ends the opening.
TEST(UsageSse, AnOpeningHoldsNoMemberExtractionReads) {
  for (const std::string& opening :
       {std::string("{\"usage\":{\"prompt_tokens\":1},\"id\":\"x\","), std::string("{\"\\u0075sage\":null,\"id\":\"x\","),
        std::string("{\"id\":\"x\",\"choices\":[],\"object\":\"y\",")}) {
    const std::string first = "data: " + opening + "\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";
    const std::string stream =
        first + "data: " + opening + "\"choices\":[{\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":7}}\n\n";
    UsageLimits every;
    every.parse_every_event = true;
    const Fed read_on = feed_in_chunks(stream, stream.size());
    const Fed whole = feed_in_chunks(stream, stream.size(), true, Endpoint::kChat, every);
    SCOPED_TRACE(opening);
    expect_same(read_on.usage, whole.usage);
    EXPECT_EQ(read_on.failures, whole.failures);
    // (With the third opening the first `choices`, the one extraction reads, is empty.)
    EXPECT_EQ(read_on.usage.finish_reason, opening.find("\"choices\"") == std::string::npos ? "stop" : "");
  }
}

// --- usage fields ---

TEST(UsageFields, LaterValuesOverwriteAndMalformedValuesAreIgnored) {
  UsageAccumulator acc(Endpoint::kChat, true);
  acc.feed(
      "data: {\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1,\"cached_tokens\":4}}\n");
  acc.feed(
      "data: "
      "{\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":-1,\"cached_tokens\":\"9\"}}\n");
  acc.feed(
      "data: "
      "{\"usage\":{\"prompt_tokens\":1.5,\"completion_tokens\":3.0,\"cached_tokens\":null}}\n");
  EXPECT_EQ(acc.usage().prompt_tokens, 12u);
  EXPECT_EQ(acc.usage().completion_tokens, 3u);
  EXPECT_EQ(acc.usage().cached_tokens, 4u);
  EXPECT_EQ(acc.parse_failures(), 0u);
}

TEST(UsageFields, PromptTokensDetailsWinOverTopLevelCachedTokens) {
  UsageAccumulator acc(Endpoint::kChat, false);
  acc.feed(
      "{\"usage\":{\"prompt_tokens\":10,\"cached_tokens\":1,\"prompt_tokens_details\":{\"cached_"
      "tokens\":8}}}");
  acc.finish();
  EXPECT_EQ(acc.usage().cached_tokens, 8u);
}

// --- Anthropic messages ---

TEST(UsageAnthropic, MessageStartDeltaAndMessageDeltaAreAccounted) {
  const std::string stream =
      "event: message_start\n"
      "data: "
      "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":"
      "\"assistant\",\"content\":[],\"model\":\"m\",\"stop_reason\":null,\"stop_sequence\":null,"
      "\"usage\":{\"input_tokens\":2095,\"output_tokens\":0}}}\n\n"
      "event: content_block_start\n"
      "data: "
      "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\","
      "\"thinking\":\"\"}}\n\n"
      "event: ping\ndata: {\"type\": \"ping\"}\n\n"
      "event: content_block_delta\n"
      "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\","
      "\"thinking\":\"Hmm\"}}\n\n"
      "event: content_block_delta\n"
      "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\","
      "\"text\":\"Hello\"}}\n\n"
      "event: message_delta\n"
      "data: "
      "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},"
      "\"usage\":{\"input_tokens\":15,\"output_tokens\":15,\"cache_creation_input_tokens\":32,"
      "\"cache_read_input_tokens\":2048}}\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  // As vLLM 0.32 streams it: message_start has the whole prompt as input_tokens and no cache
  // fields yet; message_delta has Anthropic's split (15 uncached + 32 written + 2048 read).
  auto r = feed_in_chunks(stream, stream.size(), true, Endpoint::kMessages);
  EXPECT_EQ(r.usage.prompt_tokens, 2095u);
  EXPECT_EQ(r.usage.cached_tokens, 2048u);
  EXPECT_EQ(cache_outcome(r.usage), "partial");
  EXPECT_EQ(r.usage.completion_tokens, 15u);
  EXPECT_EQ(r.usage.finish_reason, "end_turn");
  EXPECT_EQ(finish_bucket(r.usage.finish_reason), "stop");
  EXPECT_EQ(r.failures, 0u);
  auto bytes = feed_in_chunks(stream, 1, true, Endpoint::kMessages);
  expect_same(r.usage, bytes.usage);
  EXPECT_EQ(bytes.signalled_at, std::vector<size_t>{first_token_offset(stream, "Hmm")});
}

TEST(UsageAnthropic, ToolInputJsonDeltaCountsAsGenerated) {
  UsageAccumulator acc(Endpoint::kMessages, true);
  EXPECT_FALSE(
      acc.feed("data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"input_json_delta\","
               "\"partial_json\":\"\"}}\n"));
  EXPECT_TRUE(
      acc.feed("data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"input_json_delta\","
               "\"partial_json\":\"{\\\"city\\\":\"}}\n"));
  acc.feed(
      "data: "
      "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_"
      "tokens\":9}}\n");
  EXPECT_EQ(finish_bucket(acc.usage().finish_reason), "tool_calls");
}

TEST(UsageAnthropic, NonStreamingMessageBodyReportsStopReasonAndUsage) {
  UsageAccumulator acc(Endpoint::kMessages, false);
  EXPECT_FALSE(
      acc.feed("{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[{"
               "\"type\":\"text\","
               "\"text\":\"Hi\"}],\"stop_reason\":\"max_tokens\",\"stop_sequence\":null,"));
  acc.feed("\"usage\":{\"input_tokens\":30,\"cache_read_input_tokens\":0,\"output_tokens\":16}}");
  acc.finish();
  EXPECT_EQ(acc.usage().finish_reason, "max_tokens");
  EXPECT_EQ(finish_bucket(acc.usage().finish_reason), "length");
  EXPECT_EQ(acc.usage().prompt_tokens, 30u);
  EXPECT_EQ(acc.usage().cached_tokens, 0u);
  EXPECT_EQ(acc.usage().completion_tokens, 16u);
  EXPECT_EQ(cache_outcome(acc.usage()), "cold");
}

// vLLM 0.32 (--enable-prompt-tokens-details): a 1,516-token prompt with 1,504 tokens read from
// the cache. Taking input_tokens as the prompt would call this a full hit of a 12-token prompt.
TEST(UsageAnthropic, InputTokensAreTheUncachedPartOfThePrompt) {
  UsageAccumulator acc(Endpoint::kMessages, false);
  acc.feed(
      "{\"id\":\"chatcmpl-1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],"
      "\"model\":\"qwen3\",\"stop_reason\":\"max_tokens\",\"usage\":{\"input_tokens\":12,"
      "\"output_tokens\":4,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":1504}}");
  acc.finish();
  EXPECT_EQ(acc.usage().prompt_tokens, 1516u);
  EXPECT_EQ(acc.usage().cached_tokens, 1504u);
  EXPECT_EQ(cache_outcome(acc.usage()), "partial");

  UsageAccumulator cold(Endpoint::kMessages, false);
  cold.feed(
      "{\"type\":\"message\",\"usage\":{\"input_tokens\":12,\"output_tokens\":4,"
      "\"cache_creation_input_tokens\":1504,\"cache_read_input_tokens\":0}}");
  cold.finish();
  EXPECT_EQ(cold.usage().prompt_tokens, 1516u);
  EXPECT_EQ(cache_outcome(cold.usage()), "cold");

  // Other APIs keep their own meaning of input_tokens (Responses: the whole prompt).
  UsageAccumulator responses(Endpoint::kResponses, false);
  responses.feed("{\"usage\":{\"input_tokens\":40,\"input_tokens_details\":{\"cached_tokens\":32}}}");
  responses.finish();
  EXPECT_EQ(responses.usage().prompt_tokens, 40u);
}

// --- Responses API ---

TEST(UsageResponses, EventsReportDeltaStatusAndNestedUsage) {
  const std::string stream =
      "event: response.created\n"
      "data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\","
      "\"object\":\"response\",\"status\":\"in_progress\",\"usage\":null}}\n\n"
      "event: response.output_item.added\n"
      "data: "
      "{\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"message\","
      "\"status\":\"in_progress\",\"content\":[]}}\n\n"
      "event: response.output_text.delta\n"
      "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,"
      "\"content_index\":0,\"delta\":\"Hi\",\"sequence_number\":4}\n\n"
      "event: response.completed\n"
      "data: "
      "{\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"object\":\"response\","
      "\"status\":\"completed\",\"usage\":{\"input_tokens\":50,\"input_tokens_details\":"
      "{\"cached_tokens\":50},\"output_tokens\":7,\"output_tokens_details\":{\"reasoning_tokens\":"
      "0},"
      "\"total_tokens\":57}}}\n\n";
  auto r = feed_in_chunks(stream, 11, true, Endpoint::kResponses);
  EXPECT_EQ(r.usage.finish_reason, "completed");
  EXPECT_EQ(finish_bucket(r.usage.finish_reason), "stop");
  EXPECT_EQ(r.usage.prompt_tokens, 50u);
  EXPECT_EQ(r.usage.cached_tokens, 50u);
  EXPECT_EQ(r.usage.completion_tokens, 7u);
  EXPECT_TRUE(r.usage.generated);
  EXPECT_EQ(r.signalled_at.size(), 1u);
  EXPECT_EQ(cache_outcome(r.usage), "full");
}

TEST(UsageResponses, NonStreamingBodyUsesTopLevelStatus) {
  UsageAccumulator acc(Endpoint::kResponses, false);
  acc.feed(
      "{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"incomplete\",\"output\":[],"
      "\"usage\":{\"input_tokens\":9,\"output_tokens\":3}}");
  acc.finish();
  EXPECT_EQ(acc.usage().finish_reason, "incomplete");
  EXPECT_EQ(acc.usage().prompt_tokens, 9u);
  EXPECT_EQ(cache_outcome(acc.usage()), "unknown");
}

// --- non-streaming OpenAI ---

TEST(UsageJson, NonStreamingChatBodyIsParsedOnceAtFinish) {
  const std::string body =
      "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":"
      "{\"role\":\"assistant\",\"content\":\"hi\",\"reasoning_content\":\"thinking\"},"
      "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":5,"
      "\"prompt_tokens_details\":{\"cached_tokens\":90}}}";
  UsageAccumulator acc(Endpoint::kChat, false);
  for (char c : body) EXPECT_FALSE(acc.feed(std::string_view(&c, 1)));
  EXPECT_EQ(acc.usage().prompt_tokens, std::nullopt);
  acc.finish();
  EXPECT_EQ(acc.usage().prompt_tokens, 100u);
  EXPECT_EQ(acc.usage().cached_tokens, 90u);
  EXPECT_EQ(acc.usage().completion_tokens, 5u);
  EXPECT_EQ(acc.usage().finish_reason, "stop");
  EXPECT_TRUE(acc.usage().generated);
  EXPECT_EQ(acc.parse_failures(), 0u);
  EXPECT_EQ(cache_outcome(acc.usage()), "partial");
}

// The relay says which bytes are the body's last: a body that arrives whole in that call is read
// where it is (not copied), one in pieces from what was kept; either reads as feed() + finish().
TEST(UsageJson, TheLastBytesOfABodyReadAsFinishWouldReadThem) {
  const std::string body =
      "{\"choices\":[{\"message\":{\"content\":\"hi\"},\"finish_reason\":\"length\"}],"
      "\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}";
  for (size_t cut : {size_t{0}, size_t{1}, body.size() / 2, body.size() - 1}) {
    UsageAccumulator acc(Endpoint::kChat, false);
    if (cut > 0) acc.feed(std::string_view(body).substr(0, cut));
    acc.feed(std::string_view(body).substr(cut), /*last=*/true);
    EXPECT_EQ(acc.usage().prompt_tokens, 7u) << cut;  // read at once, before finish()
    acc.feed("garbage");                              // ignored: the body has ended
    acc.finish();
    EXPECT_EQ(acc.usage().completion_tokens, 3u) << cut;
    EXPECT_EQ(acc.usage().finish_reason, "length") << cut;
    EXPECT_EQ(acc.parse_failures(), 0u) << cut;
  }
  UsageLimits limits;
  limits.max_json_body_bytes = 16;
  UsageAccumulator big(Endpoint::kChat, false, limits);
  big.feed(body, /*last=*/true);
  big.finish();
  EXPECT_EQ(big.parse_failures(), 1u);  // too large: counted once, not read
  EXPECT_EQ(big.usage().prompt_tokens, std::nullopt);
  UsageAccumulator bad(Endpoint::kChat, false);
  bad.feed("{\"usage\":", /*last=*/true);
  bad.finish();
  EXPECT_EQ(bad.parse_failures(), 1u);
}

TEST(UsageJson, BodyOverTheLimitIsCountedOnceAndNotParsed) {
  UsageLimits limits;
  limits.max_json_body_bytes = 32;
  UsageAccumulator acc(Endpoint::kChat, false, limits);
  acc.feed("{\"usage\":{\"prompt_tokens\":100,");
  acc.feed("\"completion_tokens\":5}}");
  acc.feed("more");
  acc.finish();
  EXPECT_EQ(acc.parse_failures(), 1u);
  EXPECT_EQ(acc.usage().prompt_tokens, std::nullopt);
}

TEST(UsageJson, MalformedOrEmptyBodyIsOneParseFailure) {
  for (const char* body : {"{\"usage\":", "", "<html>bad gateway</html>"}) {
    UsageAccumulator acc(Endpoint::kChat, false);
    acc.feed(body);
    acc.finish();
    acc.finish();
    EXPECT_EQ(acc.parse_failures(), 1u) << body;
  }
}

TEST(UsageJson, FinishReasonIsCappedAt64BytesOnACharacterBoundary) {
  std::string reason = std::string(63, 'a') + "\xc3\xa9" + std::string(10, 'b');
  UsageAccumulator acc(Endpoint::kChat, false);
  acc.feed("{\"choices\":[{\"finish_reason\":\"" + reason + "\"}]}");
  acc.finish();
  EXPECT_EQ(acc.usage().finish_reason, std::string(63, 'a'));
  EXPECT_EQ(finish_bucket(acc.usage().finish_reason), "other");

  UsageAccumulator ascii(Endpoint::kChat, false);
  ascii.feed("{\"choices\":[{\"finish_reason\":\"" + std::string(100, 'z') + "\"}]}");
  ascii.finish();
  EXPECT_EQ(ascii.usage().finish_reason, std::string(64, 'z'));
}

// --- buckets ---

TEST(FinishBucket, MapsEveryKnownReason) {
  EXPECT_EQ(finish_bucket(""), "none");
  for (const char* r : {"stop", "end_turn", "completed"}) EXPECT_EQ(finish_bucket(r), "stop");
  for (const char* r : {"length", "max_tokens", "incomplete"})
    EXPECT_EQ(finish_bucket(r), "length");
  for (const char* r : {"tool_calls", "tool_use"}) EXPECT_EQ(finish_bucket(r), "tool_calls");
  for (const char* r : {"cancelled", "canceled"}) EXPECT_EQ(finish_bucket(r), "cancelled");
  for (const char* r : {"content_filter", "abort", "stop_sequence", "STOP"}) {
    EXPECT_EQ(finish_bucket(r), "other");
  }
}

TEST(CacheOutcome, FollowsCachedAgainstPrompt) {
  Usage u;
  EXPECT_EQ(cache_outcome(u), "unknown");
  u.prompt_tokens = 100;
  EXPECT_EQ(cache_outcome(u), "unknown");
  u.cached_tokens = 0;
  EXPECT_EQ(cache_outcome(u), "cold");
  u.cached_tokens = 40;
  EXPECT_EQ(cache_outcome(u), "partial");
  u.cached_tokens = 100;
  EXPECT_EQ(cache_outcome(u), "full");
  u.cached_tokens = 120;
  EXPECT_EQ(cache_outcome(u), "full");
  u.prompt_tokens = 0;
  EXPECT_EQ(cache_outcome(u), "partial");
  u.prompt_tokens.reset();
  EXPECT_EQ(cache_outcome(u), "partial");
  u.cached_tokens = 0;
  EXPECT_EQ(cache_outcome(u), "cold");
}

}  // namespace
}  // namespace ramjet::request
