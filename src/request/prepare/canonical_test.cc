#include "request/prepare/canonical.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <xxhash.h>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "oracle/prepare_reference.h"  // test/oracle: the reference's FNV-1a chain

namespace ramjet::request {
namespace {

namespace json = boost::json;
using namespace std::string_literals;

// What prepare() hands over: the parsed body, or null when it is not JSON.
json::value parse(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  return ec ? json::value() : v;
}

FingerprintConfig golden_config() {
  FingerprintConfig c;
  c.chunk_bytes = 64;
  return c;
}

std::vector<uint64_t> fingerprints_of(std::string_view body,
                                      const FingerprintConfig& c = golden_config()) {
  return fingerprint_request(Endpoint::kChat, parse(body), body, c).chain;
}

std::string canonical_of(std::string_view body, const FingerprintConfig& c = {},
                         bool* raw = nullptr) {
  return canonical_prompt_bytes(parse(body), body, c, raw);
}

// An independent statement of the chain rule for cross-checking the streaming hasher: each whole
// chunk hashed at once, XXH3-64 seeded with the previous fingerprint (0 before the first).
std::vector<uint64_t> naive_chain(std::string_view bytes, size_t chunk) {
  std::vector<uint64_t> out;
  uint64_t prev = 0;
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    const std::string_view block = bytes.substr(at, chunk);
    out.push_back(prev = XXH3_64bits_withSeed(block.data(), block.size(), prev));
  }
  return out;
}

// The reference golden of a body's canonical bytes, and its fingerprints by ramjet's chain.
void expect_reference_golden(std::string_view body, const std::vector<uint64_t>& golden) {
  const std::string canonical = canonical_of(body, golden_config());
  EXPECT_EQ(ramjet::request::reference::reference_fnv_chain(canonical, 64), golden) << body;
  EXPECT_EQ(fingerprints_of(body), naive_chain(canonical, 64)) << body;
}

// ---- chain golden vectors (chunk 64 B), frozen in ramjet 0.4.0's router tests ----
// They pin the canonical bytes (through the reference's FNV chain, above); the fingerprints
// themselves are ramjet's XXH3 chain over the same bytes, pinned by the golden after these.

TEST(ChainFingerprints, OpenAiSystemPromptMatchesTheReferenceGolden) {
  expect_reference_golden(
      R"({"messages":[{"role":"system","content":"shared system"},{"role":"user","content":"hello"}],"tools":[{"name":"lookup","description":"x"}]})",
      {1194147559601608630ULL, 12960585294022105508ULL});
}

TEST(ChainFingerprints, AnthropicTopLevelSystemMatchesTheSameGolden) {
  expect_reference_golden(
      R"({"system":"shared system","messages":[{"role":"user","content":"hello"}],"tools":[{"name":"lookup","description":"x"}]})",
      {1194147559601608630ULL, 12960585294022105508ULL});
  // The reference's own spelling of the Anthropic case: fields and nested keys reordered.
  expect_reference_golden(
      R"({"system":"shared system","tools":[{"description":"x","name":"lookup"}],"messages":[{"content":"hello","role":"user"}]})",
      {1194147559601608630ULL, 12960585294022105508ULL});
  EXPECT_EQ(
      fingerprints_of(
          R"({"system":"shared system","messages":[{"role":"user","content":"hello"}],"tools":[{"name":"lookup","description":"x"}]})"),
      fingerprints_of(
          R"({"messages":[{"role":"system","content":"shared system"},{"role":"user","content":"hello"}],"tools":[{"name":"lookup","description":"x"}]})"));
}

TEST(ChainFingerprints, AssistantReasoningAndToolCallsMatchTheReferenceGolden) {
  expect_reference_golden(
      R"({"messages":[{"role":"assistant","content":"","reasoning":"think","tool_calls":[{"id":"call-1","function":{"name":"lookup","arguments":"{}"}}]}],"reasoning_effort":"high"})",
      {1364963793087020995ULL, 7759282652774235360ULL, 15258068751277170983ULL});
}

TEST(ChainFingerprints, RawFallbackMatchesTheReferenceGolden) {
  const std::string body = R"({"system":"x","messages":"not-an-array"})";
  auto fp = fingerprint_request(Endpoint::kMessages, parse(body), body, golden_config());
  EXPECT_EQ(ramjet::request::reference::reference_fnv_chain(body, 64), (std::vector<uint64_t>{7245889978181980159ULL}));
  EXPECT_EQ(fp.chain, naive_chain(body, 64));
  EXPECT_TRUE(fp.raw_fallback);
  EXPECT_EQ(fp.canonical_bytes, body.size());
}

// ---- chain rule ----

// ramjet's own golden: the values XXH3-64 gives, computed with the xxhash Python package 4.1.0
// (libxxhash 0.8.4, a build independent of Debian's 0.8.1), so a change of hash or chain rule
// cannot pass unnoticed. The first chunk is seeded with 0, which is plain XXH3-64.
TEST(ChainFingerprints, EachChunkIsXxh3SeededWithThePreviousFingerprint) {
  EXPECT_EQ(chain_fingerprints("abc", 64), std::vector<uint64_t>{8696274497037089104ULL});
  EXPECT_EQ(chain_fingerprints("abc", 64), std::vector<uint64_t>{XXH3_64bits("abc", 3)});
  EXPECT_EQ(fingerprints_of(
                R"({"messages":[{"role":"system","content":"shared system"},{"role":"user","content":"hello"}],"tools":[{"name":"lookup","description":"x"}]})"),
            (std::vector<uint64_t>{2231232687054309929ULL, 12545153438261477358ULL}));
  // Chunks of the default 2 KiB, seeded past the first: XXH3's long-input path, its secret
  // derived from the seed (5,000 bytes 'a'..'z' repeated; the same Python package).
  std::string long_bytes(5000, ' ');
  for (size_t i = 0; i < long_bytes.size(); ++i) long_bytes[i] = static_cast<char>('a' + i % 26);
  EXPECT_EQ(chain_fingerprints(long_bytes, 2048),
            (std::vector<uint64_t>{10994288454879981551ULL, 12984565835385071786ULL, 415708750624286753ULL}));
}

// The writer gives up after chunks were streamed (a 3,000-byte message, then a number the
// reference cannot serialise): the sink starts over and hashes the raw body from scratch.
TEST(ChainFingerprints, ARawFallbackAfterStreamedChunksHashesTheBodyFromScratch) {
  const std::string body = R"({"messages":[{"role":"user","content":")" + std::string(3000, 'x') +
                           R"("},{"role":"user","content":1e400}]})";
  const Fingerprints fp = fingerprint_request(Endpoint::kChat, parse(body), body, golden_config());
  EXPECT_TRUE(fp.raw_fallback);
  EXPECT_EQ(fp.chain, naive_chain(body, 64));
  EXPECT_EQ(fp.canonical_bytes, body.size());
}

TEST(ChainFingerprints, EmptyBytesOrZeroChunkSizeYieldNoFingerprints) {
  EXPECT_TRUE(chain_fingerprints("", 64).empty());
  EXPECT_TRUE(chain_fingerprints("abc", 0).empty());
  FingerprintConfig c;
  c.chunk_bytes = 0;
  EXPECT_TRUE(fingerprints_of(R"({"messages":[{"role":"user","content":"hi"}]})", c).empty());
}

TEST(ChainFingerprints, LastChunkMayBeShortAndEveryChunkChainsThePrevious) {
  std::string bytes(200, 'q');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>('a' + i % 26);
  for (size_t chunk : {1u, 3u, 64u, 199u, 200u, 201u, 4096u}) {
    EXPECT_EQ(chain_fingerprints(bytes, chunk), naive_chain(bytes, chunk)) << chunk;
  }
  EXPECT_EQ(chain_fingerprints(bytes, 64).size(), 4u);
}

TEST(ChainFingerprints, EqualPrefixesShareLeadingFingerprintsAndDivergeAfter) {
  std::string a(64 * 3, 'x'), b = a;
  b[64 * 2 + 5] = 'y';
  auto fa = chain_fingerprints(a, 64), fb = chain_fingerprints(b, 64);
  ASSERT_EQ(fa.size(), 3u);
  EXPECT_EQ(fa[0], fb[0]);
  EXPECT_EQ(fa[1], fb[1]);
  EXPECT_NE(fa[2], fb[2]);
  // Identical chunk contents at different depths hash differently (the chain carries depth).
  EXPECT_NE(fa[0], fa[1]);
}

// ---- canonical bytes ----

TEST(CanonicalPrompt, EncodesMessagesAndFieldsAsKeyNulCanonicalJsonNul) {
  const std::string expected =
      "message\0role\0\"system\"\0content\0\"shared system\"\0"
      "tools\0[{\"description\":\"x\",\"name\":\"lookup\"}]\0"
      "message\0role\0\"user\"\0content\0\"hello\"\0"s;
  bool raw = true;
  EXPECT_EQ(
      canonical_of(
          R"({"messages":[{"role":"system","content":"shared system"},{"role":"user","content":"hello"}],"tools":[{"name":"lookup","description":"x"}]})",
          {}, &raw),
      expected);
  EXPECT_FALSE(raw);
}

TEST(CanonicalPrompt, MessageKeysFollowTheFixedOrderAndSkipNullAndUnknownKeys) {
  EXPECT_EQ(
      canonical_of(
          R"({"messages":[{"tool_call_id":"t1","id":"x","name":null,"content":"c","role":"tool","reasoning_content":"r","function_call":{"b":1,"a":2}}]})"),
      "message\0role\0\"tool\"\0content\0\"c\"\0reasoning_content\0\"r\"\0"
      "function_call\0{\"a\":2,\"b\":1}\0tool_call_id\0\"t1\"\0"s);
}

TEST(CanonicalPrompt, TopLevelFieldsComeInTheListedOrderWhateverTheBodyOrder) {
  const std::string body =
      R"({"response_format":{"type":"json_object"},"thinking":{"type":"enabled"},"reasoning_effort":"low",)"
      R"("parallel_tool_calls":false,"function_call":"auto","tool_choice":"none","functions":[],"tools":[1],)"
      R"("temperature":0.5,"model":"m","stream":true,"messages":[{"role":"user","content":"u"}]})";
  EXPECT_EQ(
      canonical_of(body),
      "tools\0[1]\0functions\0[]\0tool_choice\0\"none\"\0function_call\0\"auto\"\0"
      "parallel_tool_calls\0false\0reasoning_effort\0\"low\"\0thinking\0{\"type\":\"enabled\"}\0"
      "response_format\0{\"type\":\"json_object\"}\0message\0role\0\"user\"\0content\0\"u\"\0"s);
}

TEST(CanonicalPrompt, NullTopLevelFieldsAreSkipped) {
  EXPECT_EQ(canonical_of(
                R"({"tools":null,"tool_choice":null,"messages":[{"role":"user","content":"u"}]})"),
            canonical_of(R"({"messages":[{"role":"user","content":"u"}]})"));
}

TEST(CanonicalPrompt, DeveloperMessagesJoinTheLeadingRunBeforeTheTools) {
  EXPECT_EQ(
      canonical_of(
          R"({"messages":[{"role":"system","content":"s"},{"role":"developer","content":"d"},{"role":"user","content":"u"}],"tools":[1]})"),
      "message\0role\0\"system\"\0content\0\"s\"\0message\0role\0\"developer\"\0content\0\"d\"\0"
      "tools\0[1]\0message\0role\0\"user\"\0content\0\"u\"\0"s);
}

TEST(CanonicalPrompt, SystemMessagesAfterTheFirstOtherMessageStayInPlace) {
  EXPECT_EQ(
      canonical_of(
          R"({"messages":[{"role":"user","content":"u"},{"role":"system","content":"s"}],"tools":[1]})"),
      "tools\0[1]\0message\0role\0\"user\"\0content\0\"u\"\0message\0role\0\"system\"\0content\0\"s\"\0"s);
}

TEST(CanonicalPrompt, NonObjectMessagesAreSkippedAndEndTheLeadingRun) {
  EXPECT_EQ(
      canonical_of(
          R"({"messages":[{"role":"system","content":"s"},7,{"role":"system","content":"t"},null,"x",{"role":"user","content":"u"}],"tools":[1]})"),
      "message\0role\0\"system\"\0content\0\"s\"\0tools\0[1]\0"
      "message\0role\0\"system\"\0content\0\"t\"\0message\0role\0\"user\"\0content\0\"u\"\0"s);
}

TEST(CanonicalPrompt, NonStringRoleDoesNotLead) {
  EXPECT_EQ(canonical_of(R"({"messages":[{"role":["system"],"content":"s"}],"tools":[1]})"),
            "tools\0[1]\0message\0role\0[\"system\"]\0content\0\"s\"\0"s);
}

TEST(CanonicalPrompt, AnthropicSystemComesFirstEvenBeforeSystemMessages) {
  EXPECT_EQ(
      canonical_of(
          R"({"messages":[{"role":"system","content":"m"}],"system":[{"type":"text","text":"a"}]})"),
      "message\0role\0\"system\"\0content\0[{\"text\":\"a\",\"type\":\"text\"}]\0"
      "message\0role\0\"system\"\0content\0\"m\"\0"s);
}

// Claude Code's first system block carries a per-request hash; vLLM drops the block before it
// renders, so the engines cache across turns, and the fingerprints must match across turns too.
TEST(CanonicalPrompt, ClaudeCodesBillingHeaderBlockIsLeftOutOfTheSystemBlocks) {
  const std::string want = "message\0role\0\"system\"\0content\0[{\"text\":\"You are Claude Code.\",\"type\":\"text\"}]\0"
                           "message\0role\0\"user\"\0content\0\"hi\"\0"s;
  for (const char* cch : {"5e1f", "0a9b"}) {
    const std::string body = std::string(R"({"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.3; cch=)") +
                             cch + R"(;"},{"type":"text","text":"You are Claude Code."}],"messages":[{"role":"user","content":"hi"}]})";
    EXPECT_EQ(canonical_of(body), want) << cch;
  }
  // Only a text block that starts with the header, and only in the top-level system.
  EXPECT_EQ(canonical_of(R"({"system":[{"type":"text","text":" x-anthropic-billing-header"}],"messages":[]})"),
            "message\0role\0\"system\"\0content\0[{\"text\":\" x-anthropic-billing-header\",\"type\":\"text\"}]\0"s);
  EXPECT_EQ(canonical_of(R"({"system":"x-anthropic-billing-header: a","messages":[]})"),
            "message\0role\0\"system\"\0content\0\"x-anthropic-billing-header: a\"\0"s);
}

TEST(CanonicalPrompt, SystemWithNullOrMissingMessagesIsStillAPrompt) {
  bool raw = true;
  EXPECT_EQ(canonical_of(R"({"system":"s","messages":null,"tools":[2]})", {}, &raw),
            "message\0role\0\"system\"\0content\0\"s\"\0tools\0[2]\0"s);
  EXPECT_FALSE(raw);
  EXPECT_EQ(canonical_of(R"({"system":"s"})", {}, &raw),
            "message\0role\0\"system\"\0content\0\"s\"\0"s);
  EXPECT_FALSE(raw);
}

TEST(CanonicalPrompt, EmptyMessagesGiveEmptyBytesAndNoFingerprints) {
  const std::string body = R"({"messages":[],"model":"m"})";
  auto fp = fingerprint_request(Endpoint::kChat, parse(body), body, {});
  EXPECT_TRUE(fp.chain.empty());
  EXPECT_FALSE(fp.raw_fallback);
  EXPECT_EQ(fp.canonical_bytes, 0u);
}

TEST(CanonicalPrompt, NestedKeyOrderNeverMatters) {
  EXPECT_EQ(
      fingerprints_of(
          R"({"messages":[{"role":"user","content":"hello"}],"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"string"}}}}}]})"),
      fingerprints_of(
          R"({"tools":[{"function":{"parameters":{"properties":{"a":{"type":"string"},"z":{"type":"integer"}},"type":"object"},"name":"lookup"},"type":"function"}],"messages":[{"content":"hello","role":"user"}]})"));
}

TEST(CanonicalPrompt, KeysSortByBytesNotByLocaleOrLength) {
  EXPECT_EQ(
      canonical_of(
          R"({"messages":[{"role":"user","content":{"b":1,"aa":2,"a":3,"B":4,"é":5,"_":6}}]})"),
      "message\0role\0\"user\"\0content\0{\"B\":4,\"_\":6,\"a\":3,\"aa\":2,\"b\":1,\"é\":5}\0"s);
}

TEST(CanonicalPrompt, DuplicateKeysKeepTheLastValueLikeSerdeJson) {
  EXPECT_EQ(canonical_of(R"({"messages":[{"role":"user","content":{"k":1,"k":2}}]})"),
            "message\0role\0\"user\"\0content\0{\"k\":2}\0"s);
}

// ---- canonical JSON scalars, as serde_json writes them ----

TEST(CanonicalJson, StringsUseSerdeJsonCompactEscaping) {
  const std::string body =
      R"({"messages":[{"role":"user","content":"q\" b\\ s/ \b\f\n\r\t \u0001\u001f\u007f é 😀 \u00e9"}]})";
  EXPECT_EQ(
      canonical_of(body),
      "message\0role\0\"user\"\0content\0\"q\\\" b\\\\ s/ \\b\\f\\n\\r\\t \\u0001\\u001f\x7f é 😀 é\"\0"s);
}

TEST(CanonicalJson, NulInsideAStringIsEscaped) {
  EXPECT_EQ(canonical_of(R"({"messages":[{"role":"user","content":"a\u0000b"}]})"),
            "message\0role\0\"user\"\0content\0\"a\\u0000b\"\0"s);
}

TEST(CanonicalJson, IntegersAreWrittenAsIs) {
  EXPECT_EQ(
      canonical_of(
          R"({"messages":[{"role":"user","content":[0,-1,9223372036854775807,-9223372036854775808,18446744073709551615]}]})"),
      "message\0role\0\"user\"\0content\0[0,-1,9223372036854775807,-9223372036854775808,18446744073709551615]\0"s);
}

TEST(CanonicalJson, LiteralsAndNestedContainersAreCompact) {
  EXPECT_EQ(
      canonical_of(
          R"({"messages":[{"role":"user","content":[ true , false , null , [ ] , { } , [[1]] ]}]})"),
      "message\0role\0\"user\"\0content\0[true,false,null,[],{},[[1]]]\0"s);
}

TEST(CanonicalJson, DoublesUseShortestRoundTripDigitsInRyuLayout) {
  EXPECT_EQ(format_double_like_serde(1.0), "1.0");
  EXPECT_EQ(format_double_like_serde(0.0), "0.0");
  EXPECT_EQ(format_double_like_serde(-0.0), "-0.0");
  EXPECT_EQ(format_double_like_serde(1e300), "1e300");
  EXPECT_EQ(format_double_like_serde(0.1), "0.1");
  EXPECT_EQ(format_double_like_serde(-1.5), "-1.5");
  EXPECT_EQ(format_double_like_serde(100.0), "100.0");
  EXPECT_EQ(format_double_like_serde(1e15), "1000000000000000.0");
  EXPECT_EQ(format_double_like_serde(1e16), "1e16");
  EXPECT_EQ(format_double_like_serde(1.5e16), "1.5e16");
  EXPECT_EQ(format_double_like_serde(123456.789), "123456.789");
  EXPECT_EQ(format_double_like_serde(0.001234), "0.001234");
  EXPECT_EQ(format_double_like_serde(0.00001), "0.00001");
  EXPECT_EQ(format_double_like_serde(1e-6), "1e-6");
  EXPECT_EQ(format_double_like_serde(1.5e-7), "1.5e-7");
  EXPECT_EQ(format_double_like_serde(1.234e33), "1.234e33");
  EXPECT_EQ(format_double_like_serde(5e-324), "5e-324");
  EXPECT_EQ(format_double_like_serde(std::numeric_limits<double>::max()), "1.7976931348623157e308");
  EXPECT_EQ(format_double_like_serde(0.30000000000000004), "0.30000000000000004");
  EXPECT_EQ(format_double_like_serde(1234567890123456.7), "1234567890123456.8");
  EXPECT_EQ(format_double_like_serde(12345678901234567.0), "1.2345678901234568e16");
}

TEST(CanonicalJson, JsonFractionsStayDoublesAndExponentsNormalise) {
  EXPECT_EQ(canonical_of(R"({"messages":[{"role":"user","content":[1.0,1E2,2.50,-0.0,1e-7]}]})"),
            "message\0role\0\"user\"\0content\0[1.0,100.0,2.5,-0.0,1e-7]\0"s);
}

TEST(CanonicalJson, NegativeZeroIntegerLiteralIsWrittenAsZeroUnlikeSerdeJson) {
  // Known, accepted difference: Boost.JSON reads the literal -0 as the integer 0 while serde_json
  // reads it as the double -0.0 ("-0.0"). No real prompt field carries a bare -0.
  EXPECT_EQ(canonical_of(R"({"messages":[{"role":"user","content":[-0]}]})"),
            "message\0role\0\"user\"\0content\0[0]\0"s);
}

// ---- fallbacks, limits, truncation ----

TEST(CanonicalFallback, NonObjectBodiesHashTheirRawBytes) {
  for (std::string body : {"[1,2]"s, "\"s\""s, "not json"s, ""s, "{\"messages\":"s}) {
    bool raw = false;
    EXPECT_EQ(canonical_of(body, {}, &raw), body);
    EXPECT_TRUE(raw) << body;
  }
}

TEST(CanonicalFallback, MessagesThatAreNeitherArrayNorNullFallBack) {
  for (std::string body : {R"({"messages":{"role":"user"}})"s, R"({"messages":1,"system":"s"})"s}) {
    bool raw = false;
    EXPECT_EQ(canonical_of(body, {}, &raw), body);
    EXPECT_TRUE(raw);
  }
}

TEST(CanonicalFallback, CompletionsPromptAndResponsesInputHashTheWholeRawBody) {
  for (std::string body :
       {R"({"model":"m","prompt":"p","stream":true})"s, R"({"model":"m","input":"i"})"s,
        R"({"messages":null,"system":null,"prompt":"p"})"s}) {
    const auto fp = fingerprint_request(Endpoint::kCompletions, parse(body), body, golden_config());
    EXPECT_TRUE(fp.raw_fallback);
    EXPECT_EQ(fp.chain, naive_chain(body, 64));
  }
}

TEST(CanonicalFallback, NonFiniteNumberInTheSerialisedPartFallsBack) {
  // Boost.JSON reads 1e400 as infinity; serde_json rejects the whole body, hence raw bytes.
  const std::string body = R"({"messages":[{"role":"user","content":[1e400]}]})";
  bool raw = false;
  EXPECT_EQ(canonical_of(body, {}, &raw), body);
  EXPECT_TRUE(raw);
  const auto fp = fingerprint_request(Endpoint::kChat, parse(body), body, golden_config());
  EXPECT_TRUE(fp.raw_fallback);
  EXPECT_EQ(fp.chain, naive_chain(body, 64));
}

TEST(CanonicalFallback, NestingBeyondTheLimitFallsBack) {
  std::string deep = R"({"messages":[{"role":"user","content":)";
  for (int i = 0; i < 10; ++i) deep += "[";
  for (int i = 0; i < 10; ++i) deep += "]";
  deep += "}]}";
  FingerprintConfig c;
  c.limits.max_depth = 10;
  bool raw = true;
  canonical_of(deep, c, &raw);
  EXPECT_FALSE(raw);
  c.limits.max_depth = 9;
  EXPECT_EQ(canonical_of(deep, c, &raw), deep);
  EXPECT_TRUE(raw);
}

TEST(CanonicalTruncation, CanonicalBytesStopAtMaxPrefixBytes) {
  const std::string body =
      R"({"messages":[{"role":"user","content":")" + std::string(5000, 'z') + R"("}]})";
  FingerprintConfig c;
  c.chunk_bytes = 64;
  c.max_prefix_bytes = 1000;
  const std::string full = canonical_of(body, FingerprintConfig{});
  EXPECT_EQ(canonical_of(body, c), full.substr(0, 1000));
  const auto fp = fingerprint_request(Endpoint::kChat, parse(body), body, c);
  EXPECT_EQ(fp.canonical_bytes, 1000u);
  EXPECT_EQ(fp.chain.size(), 16u);  // ceil(1000 / 64)
  EXPECT_EQ(fp.chain, naive_chain(full.substr(0, 1000), 64));
}

TEST(CanonicalTruncation, RawFallbackIsTruncatedToo) {
  const std::string body(300, 'r');
  FingerprintConfig c;
  c.chunk_bytes = 64;
  c.max_prefix_bytes = 128;
  const auto fp = fingerprint_request(Endpoint::kOther, parse(body), body, c);
  EXPECT_TRUE(fp.raw_fallback);
  EXPECT_EQ(fp.canonical_bytes, 128u);
  EXPECT_EQ(fp.chain, naive_chain(body.substr(0, 128), 64));
}

// ---- the streaming hasher equals hashing the materialised bytes ----

std::string random_json_value(std::mt19937_64& rng, int depth) {
  std::uniform_int_distribution<int> kind(0, depth > 3 ? 5 : 7);
  auto str = [&] {
    static const char* pieces[] = {"a", "b", "\\\"", "\\\\", "\\n", "\\u0003",
                                   "é", "😀", "/",    "zz",   " "};
    std::string s = "\"";
    for (int n = std::uniform_int_distribution<int>(0, 12)(rng); n > 0; --n)
      s += pieces[rng() % 11];
    return s + "\"";
  };
  switch (kind(rng)) {
    case 0:
      return "null";
    case 1:
      return rng() % 2 ? "true" : "false";
    case 2:
      return std::to_string(static_cast<int64_t>(rng()));
    case 3:
      return std::to_string(std::uniform_real_distribution<double>(-1e6, 1e6)(rng));
    case 4:
    case 5:
      return str();
    case 6: {
      std::string a = "[";
      for (int n = static_cast<int>(rng() % 4); n > 0; --n)
        a += random_json_value(rng, depth + 1) + (n > 1 ? "," : "");
      return a + "]";
    }
    default: {
      std::string o = "{";
      for (int n = static_cast<int>(rng() % 4); n > 0; --n)
        o += str() + ":" + random_json_value(rng, depth + 1) + (n > 1 ? "," : "");
      return o + "}";
    }
  }
}

TEST(CanonicalStreaming, HashingWhileSerialisingEqualsHashingTheBytesForRandomBodies) {
  std::mt19937_64 rng(42);
  static const char* roles[] = {"system", "developer", "user", "assistant", "tool"};
  static const char* keys[] = {"role",      "name",       "content",       "reasoning_content",
                               "reasoning", "tool_calls", "function_call", "tool_call_id",
                               "other"};
  for (int iter = 0; iter < 400; ++iter) {
    std::string body = "{";
    if (rng() % 3 == 0) body += "\"system\":" + random_json_value(rng, 1) + ",";
    if (rng() % 2) body += "\"tools\":" + random_json_value(rng, 1) + ",";
    body += "\"messages\":[";
    for (int m = static_cast<int>(rng() % 6); m > 0; --m) {
      body += "{\"role\":\"" + std::string(roles[rng() % 5]) + "\"";
      for (int f = static_cast<int>(rng() % 4); f > 0; --f)
        body += ",\"" + std::string(keys[rng() % 9]) + "\":" + random_json_value(rng, 1);
      body += m > 1 ? "}," : "}";
    }
    body += "]}";
    const json::value root = parse(body);
    ASSERT_TRUE(root.is_object()) << body;
    for (uint64_t chunk : {1u, 7u, 64u, 2048u}) {
      FingerprintConfig c;
      c.chunk_bytes = chunk;
      c.max_prefix_bytes = rng() % 2 ? (2u << 20) : rng() % 300;
      const std::string bytes = canonical_prompt_bytes(root, body, c);
      const auto fp = fingerprint_request(Endpoint::kChat, root, body, c);
      ASSERT_EQ(fp.chain, naive_chain(bytes, chunk)) << body;
      ASSERT_EQ(fp.canonical_bytes, bytes.size());
      ASSERT_LE(bytes.size(), c.max_prefix_bytes);
    }
  }
}

TEST(NamespaceFingerprints, TheDefaultNamespaceKeepsTheFingerprintsAsTheyAre) {
  const std::string body = R"({"messages":[{"role":"user","content":")" + std::string(300, 'q') + R"("}]})";
  Fingerprints f = fingerprint_request(Endpoint::kChat, parse(body), body, golden_config());
  const std::vector<uint64_t> plain = f.chain;
  ASSERT_GE(plain.size(), 4u);
  namespace_fingerprints(f, "", "");
  EXPECT_EQ(f.chain, plain);
}

TEST(NamespaceFingerprints, EachAdapterAndSaltIsANamespaceOfItsOwn) {
  const std::vector<uint64_t> plain = chain_fingerprints(std::string(640, 'p'), 64);
  auto in = [&](std::string_view adapter, std::string_view salt) {
    Fingerprints f;
    f.chain = plain;
    namespace_fingerprints(f, adapter, salt);
    return f.chain;
  };
  const std::vector<std::vector<uint64_t>> spaces = {plain, in("sql", ""), in("", "sql"), in("sql", "t1"),
                                                     in("sq", "lt1"), in("chat", ""), in("", "t1")};
  for (size_t a = 0; a < spaces.size(); ++a) {
    for (size_t b = 0; b < spaces.size(); ++b) {
      if (a == b) continue;
      for (size_t k = 0; k < plain.size(); ++k) EXPECT_NE(spaces[a][k], spaces[b][k]) << a << " " << b << " " << k;
    }
  }
  EXPECT_EQ(in("sql", "t1"), in("sql", "t1"));  // a namespace's requests still match each other
}

}  // namespace
}  // namespace ramjet::request
