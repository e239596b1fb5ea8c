#include "request/prepare/prepare.h"

#include <string>

#include <tuple>

#include <gtest/gtest.h>
#include <boost/json.hpp>

namespace ramjet::request {
namespace {

namespace json = boost::json;

PreparedRequest chat(std::string body, uint64_t strip = 100000) {
  PrepareConfig config;
  config.max_tokens_strip = strip;
  return prepare(Endpoint::kChat, std::move(body), config);
}

json::object parsed(const PreparedRequest& p) {
  return json::parse(p.body).as_object();
}

// --- max_tokens / max_completion_tokens ---

TEST(PrepareShims, MaxTokensAtTheThresholdIsStripped) {
  auto p = chat(R"({"messages":[],"max_tokens":100000,"stream":true})");
  EXPECT_TRUE(p.rewritten);
  EXPECT_TRUE(p.shims.max_tokens_stripped);
  EXPECT_FALSE(p.shims.max_completion_tokens_stripped);
  EXPECT_FALSE(parsed(p).contains("max_tokens"));
  EXPECT_EQ(p.body, R"({"messages":[],"stream":true})");  // key order kept
}

TEST(PrepareShims, MaxCompletionTokensAboveTheThresholdIsStripped) {
  auto p = chat(R"({"max_completion_tokens":262144,"messages":[]})");
  EXPECT_TRUE(p.shims.max_completion_tokens_stripped);
  EXPECT_FALSE(p.shims.max_tokens_stripped);
  EXPECT_EQ(p.body, R"({"messages":[]})");
}

TEST(PrepareShims, BothLimitsAreStrippedIndependently) {
  auto p = chat(R"({"max_tokens":1e6,"max_completion_tokens":18446744073709551615})");
  EXPECT_TRUE(p.shims.max_tokens_stripped);
  EXPECT_TRUE(p.shims.max_completion_tokens_stripped);
  EXPECT_EQ(p.body, "{}");
}

TEST(PrepareShims, DoubleLimitsAreComparedAsNumbers) {
  EXPECT_TRUE(chat(R"({"max_tokens":100000.0})").shims.max_tokens_stripped);
  EXPECT_FALSE(chat(R"({"max_tokens":99999.5})").shims.max_tokens_stripped);
}

TEST(PrepareShims, LimitsBelowTheThresholdOrNotNumbersAreKept) {
  for (const char* body :
       {R"({"max_tokens":99999})", R"({"max_tokens":-5})", R"({"max_tokens":"200000"})",
        R"({"max_tokens":null})", R"({"max_tokens":[200000]})"}) {
    auto p = chat(body);
    EXPECT_FALSE(p.rewritten) << body;
    EXPECT_EQ(p.body, body);
  }
}

TEST(PrepareShims, ThresholdComesFromTheConfig) {
  EXPECT_TRUE(chat(R"({"max_tokens":4096})", 4096).shims.max_tokens_stripped);
  EXPECT_FALSE(chat(R"({"max_tokens":4095})", 4096).shims.max_tokens_stripped);
}

// --- content flattening ---

TEST(PrepareShims, AllTextContentPartsAreConcatenatedWithoutSeparator) {
  auto p = chat(R"({"messages":[{"role":"user","content":[{"type":"text","text":"Hello, "},)"
                R"({"type":"text","text":"world"}]},{"role":"assistant","content":"plain"}]})");
  EXPECT_TRUE(p.rewritten);
  EXPECT_EQ(p.shims.contents_flattened, 1u);
  EXPECT_EQ(p.body, R"({"messages":[{"role":"user","content":"Hello, world"},)"
                    R"({"role":"assistant","content":"plain"}]})");
}

TEST(PrepareShims, EveryAllTextMessageIsCounted) {
  auto p = chat(
      R"({"messages":[{"role":"system","content":[{"type":"text","text":"a"}]},)"
      R"({"role":"user","content":[{"type":"text","text":"b","cache_control":{"type":"x"}}]}]})");
  EXPECT_EQ(p.shims.contents_flattened, 2u);
  auto messages = parsed(p).at("messages").as_array();
  EXPECT_EQ(messages[0].at("content").as_string(), "a");
  EXPECT_EQ(messages[1].at("content").as_string(), "b");
}

TEST(PrepareShims, ImageUrlPartSurvivesByteForByte) {
  const std::string body =
      "{\"model\":\"m\",  \"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
      "\"image_url\":{\"url\":\"data:image/png;base64,iVBORw0KGgo=\"}}]}]}\n";
  auto p = chat(body);
  EXPECT_FALSE(p.rewritten);
  EXPECT_EQ(p.shims.contents_flattened, 0u);
  EXPECT_EQ(p.body, body);
}

TEST(PrepareShims, MixedTextAndImageContentIsUntouched) {
  const std::string body =
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},)"
      R"({"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]})";
  auto p = chat(body);
  EXPECT_FALSE(p.rewritten);
  EXPECT_EQ(p.body, body);
}

TEST(PrepareShims, MixedContentIsKeptWhileAnotherMessageIsFlattened) {
  auto p = chat(R"({"messages":[{"role":"user","content":[{"type":"text","text":"t"},)"
                R"({"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]},)"
                R"({"role":"user","content":[{"type":"text","text":"x"}]}]})");
  EXPECT_EQ(p.shims.contents_flattened, 1u);
  auto messages = parsed(p).at("messages").as_array();
  EXPECT_TRUE(messages[0].at("content").is_array());
  EXPECT_EQ(messages[0].at("content").as_array().size(), 2u);
  EXPECT_EQ(messages[1].at("content").as_string(), "x");
}

TEST(PrepareShims, NonTextPartsLeaveContentUntouched) {
  for (const char* body : {
           R"({"messages":[{"content":[{"type":"video_url","video_url":{"url":"u"}}]}]})",
           R"({"messages":[{"content":[{"type":"text","text":"a"},{"type":"future","x":1}]}]})",
           R"({"messages":[{"content":[{"type":"text","text":"a"},"bare string"]}]})",
           R"({"messages":[{"content":[{"type":"text"}]}]})",
           R"({"messages":[{"content":[{"text":"no type"}]}]})",
           R"({"messages":[{"content":[{"type":"text","text":42}]}]})",
           R"({"messages":[{"content":[]}]})",
           R"({"messages":[{"content":null},"not an object",7]})",
           R"({"messages":{"content":[{"type":"text","text":"not an array of messages"}]}})",
       }) {
    auto p = chat(body);
    EXPECT_FALSE(p.rewritten) << body;
    EXPECT_EQ(p.body, body);
  }
}

// --- reasoning_effort ---

TEST(PrepareShims, SupportedReasoningEffortsAreKept) {
  for (const char* effort : {"none", "minimal", "low", "medium", "high", "xhigh", "max"}) {
    std::string body = std::string(R"({"messages":[],"reasoning_effort":")") + effort + "\"}";
    auto p = chat(body);
    EXPECT_FALSE(p.rewritten) << effort;
    EXPECT_EQ(p.body, body);
  }
}

TEST(PrepareShims, UnsupportedOrNonStringReasoningEffortIsDropped) {
  for (const char* body :
       {R"({"reasoning_effort":"extreme","messages":[]})",
        R"({"reasoning_effort":"HIGH","messages":[]})", R"({"reasoning_effort":3,"messages":[]})",
        R"({"reasoning_effort":{"level":"high"},"messages":[]})"}) {
    auto p = chat(body);
    EXPECT_TRUE(p.shims.reasoning_effort_dropped) << body;
    EXPECT_EQ(p.body, R"({"messages":[]})");
  }
}

TEST(PrepareShims, NullReasoningEffortIsLeftAlone) {
  const std::string body = R"({"messages":[],"reasoning_effort":null})";
  auto p = chat(body);
  EXPECT_FALSE(p.shims.reasoning_effort_dropped);
  EXPECT_EQ(p.body, body);
}

// --- byte-for-byte forwarding ---

TEST(PrepareRequest, UnchangedBodyIsForwardedByteForByte) {
  const std::string body =
      "\n  {\"stream\" : true ,\t\"z\":1.50, \"a\":\"\\u00e9\\/\", \"messages\":[ "
      "{\"role\":\"user\","
      "\"content\":\"hi\"} ],\"max_tokens\":  512 , \"n\":1e2}  \r\n";
  auto p = chat(body);
  EXPECT_TRUE(p.json_object);
  EXPECT_FALSE(p.rewritten);
  EXPECT_FALSE(p.shims.any());
  EXPECT_EQ(p.body, body);
  EXPECT_EQ(p.stream, true);
  EXPECT_EQ(p.max_output_tokens, 512u);
}

TEST(PrepareRequest, RewrittenBodyKeepsEveryOtherField) {
  auto p = chat(R"({"model":"m","temperature":0.5,"tools":[{"type":"function"}],)"
                R"("max_tokens":500000,"seed":-3,"stream":false})");
  ASSERT_TRUE(p.rewritten);
  auto o = parsed(p);
  EXPECT_EQ(o.at("model").as_string(), "m");
  EXPECT_EQ(o.at("temperature").as_double(), 0.5);
  EXPECT_EQ(o.at("tools").as_array().size(), 1u);
  EXPECT_EQ(o.at("seed").as_int64(), -3);
  EXPECT_EQ(o.at("stream").as_bool(), false);
  EXPECT_EQ(o.size(), 5u);
}

TEST(PrepareRequest, OverflowingNumberElsewhereKeepsTheOriginalBytes) {
  // 1e400 parses as infinity, which cannot be serialised as JSON: forward as sent.
  const std::string body = R"({"temperature":1e400,"max_tokens":100000,"stream":true})";
  auto p = chat(body);
  EXPECT_TRUE(p.json_object);
  EXPECT_FALSE(p.rewritten);
  EXPECT_FALSE(p.shims.any());
  EXPECT_EQ(p.body, body);
  EXPECT_EQ(p.max_output_tokens, 100000u);
  EXPECT_EQ(p.stream, true);
}

TEST(PrepareRequest, OverflowingLimitIsStrippedLikeAnyHugeNumber) {
  auto p = chat(R"({"max_tokens":1e400,"n":1})");
  EXPECT_TRUE(p.shims.max_tokens_stripped);
  EXPECT_EQ(p.body, R"({"n":1})");
}

TEST(PrepareRequest, CompletionsEndpointGetsTheSameShims) {
  auto p = prepare(Endpoint::kCompletions,
                   R"({"prompt":"x","max_tokens":100000,"reasoning_effort":"turbo"})", {});
  EXPECT_TRUE(p.rewritten);
  EXPECT_TRUE(p.shims.max_tokens_stripped);
  EXPECT_TRUE(p.shims.reasoning_effort_dropped);
  EXPECT_EQ(p.body, R"({"prompt":"x"})");
  EXPECT_EQ(p.max_output_tokens, std::nullopt);
}

TEST(PrepareRequest, ResponsesAndMessagesBodiesAreNeverModified) {
  const std::string body =
      R"({"max_tokens":999999,"max_completion_tokens":999999,"reasoning_effort":"bogus",)"
      R"("messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]})";
  for (Endpoint e : {Endpoint::kResponses, Endpoint::kMessages, Endpoint::kOther}) {
    auto p = prepare(e, body, {});
    EXPECT_TRUE(p.json_object);
    EXPECT_FALSE(p.rewritten);
    EXPECT_FALSE(p.shims.any());
    EXPECT_EQ(p.body, body);
  }
}

TEST(PrepareRequest, MalformedJsonOnAnInferenceEndpointIsFlaggedAndUnchanged) {
  for (const char* body : {"", "{", R"({"a":1,})", "[1,2]", "\"str\"", "42", "null",
                           "{\"a\":\"\xff\"}", R"({"a":1} trailing)"}) {
    for (Endpoint e :
         {Endpoint::kChat, Endpoint::kCompletions, Endpoint::kResponses, Endpoint::kMessages}) {
      auto p = prepare(e, body, {});
      EXPECT_FALSE(p.json_object) << body;
      EXPECT_TRUE(p.malformed_json) << body;
      EXPECT_FALSE(p.rewritten);
      EXPECT_EQ(p.body, body);
      EXPECT_EQ(p.stream, std::nullopt);
      EXPECT_EQ(p.max_output_tokens, std::nullopt);
    }
  }
}

TEST(PrepareRequest, NonInferenceEndpointsAreNeverMalformed) {
  for (Endpoint e : {Endpoint::kModels, Endpoint::kHealth, Endpoint::kOther}) {
    auto p = prepare(e, "not json", {});
    EXPECT_FALSE(p.json_object);
    EXPECT_FALSE(p.malformed_json);
    EXPECT_EQ(p.body, "not json");
  }
}

TEST(PrepareRequest, BodiesDeeperThanTheLimitAreMalformed) {
  PrepareConfig config;
  config.limits.max_json_depth = 8;
  std::string shallow = R"({"a":[[[[[[1]]]]]],"max_tokens":100000})";
  std::string deep = R"({"a":[[[[[[[[1]]]]]]]],"max_tokens":100000})";
  EXPECT_TRUE(prepare(Endpoint::kChat, shallow, config).rewritten);
  auto p = prepare(Endpoint::kChat, deep, config);
  EXPECT_TRUE(p.malformed_json);
  EXPECT_FALSE(p.rewritten);
  EXPECT_EQ(p.body, deep);
}

// --- the parse's memory (kParseBytesPerBodyByte, ParseMemory) ---

// A chat body with a `pad` array of `n` copies of `value` after its messages.
std::string padded(size_t n, std::string_view value, std::string_view tail = "") {
  std::string body = R"({"model":"m","messages":[{"role":"user","content":"hi"}],"pad":[)";
  body.reserve(body.size() + n * (value.size() + 1) + 64);
  for (size_t i = 0; i < n; ++i) {
    if (i) body += ',';
    body += value;
  }
  body += ']';
  body += tail;
  body += '}';
  return body;
}

// Records what a parse asks for; refuses past `limit`.
struct Recorder final : ParseMemory {
  uint64_t limit = UINT64_MAX;
  uint64_t asked = 0;
  size_t calls = 0;
  bool grow_to(uint64_t bytes) override {
    ++calls;
    EXPECT_GT(bytes, asked) << "asked again for what was granted";
    asked = bytes;
    return bytes <= limit;
  }
};

TEST(PrepareMemory, DenseBodiesAreRefusedOnBothPathsAndTheNextRequestReadsAsBefore) {
  PrepareConfig config;
  config.fingerprint = true;
  // 1.5 and 6 MiB of one-digit numbers (the tape: 12 bytes a body byte), then 2 MiB behind a
  // number only Boost.JSON reads (the tape gives up at once; Boost's heap is the one that says no).
  for (const std::string& body :
       {padded(768 << 10, "0"), padded(3 << 20, "0"), R"({"x":1e400,)" + padded(1 << 20, "7").substr(1)}) {
    Recorder memory;
    const PreparedRequest p = prepare(Endpoint::kChat, body, config, &memory);
    EXPECT_EQ(p.parse_refused, ParseRefusal::kTooDense) << body.size();
    EXPECT_FALSE(p.json_object);
    EXPECT_TRUE(p.fingerprints.chain.empty());
    EXPECT_LE(memory.asked, 3 * kParseBytesPerBodyByte * body.size());
    const PreparedRequest next = prepare(Endpoint::kChat, R"({"model":"m","messages":[]})", config);
    EXPECT_EQ(next.parse_refused, ParseRefusal::kNone);
    EXPECT_TRUE(next.json_object);
    EXPECT_EQ(next.model, "m");
  }
}

// The chain takes the storage it is lent (a connection's previous request's) and none of its
// contents, on the tape's path and on Boost's (a shim to apply), and when nothing is hashed.
TEST(PrepareFingerprints, TheChainTakesTheStorageItIsLentAndNoneOfItsContents) {
  PrepareConfig config;
  config.fingerprint = true;
  for (const std::string& body :
       {std::string(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})"),
        std::string(R"({"model":"m","max_tokens":100000,"messages":[{"role":"user","content":"hi"}]})")}) {
    const PreparedRequest fresh = prepare(Endpoint::kChat, body, config);
    ASSERT_EQ(fresh.fingerprints.chain.size(), 1u);
    std::vector<uint64_t> lent;
    lent.reserve(64);
    lent.assign({1, 2, 3});
    const uint64_t* const storage = lent.data();
    const PreparedRequest p = prepare(Endpoint::kChat, body, config, nullptr, std::move(lent));
    EXPECT_EQ(p.fingerprints.chain, fresh.fingerprints.chain);
    if (!p.rewritten) {
      EXPECT_EQ(p.fingerprints.chain.data(), storage);  // (Boost's path makes its own)
    }
  }
  PrepareConfig off;
  const PreparedRequest p = prepare(Endpoint::kChat, R"({"model":"m","messages":[]})", off, nullptr, {7, 8});
  EXPECT_TRUE(p.fingerprints.chain.empty());
}

TEST(PrepareMemory, TokenIdPromptsPassAndAskTheirMemoryAsTheyGrow) {
  PrepareConfig config;
  config.fingerprint = true;
  // Token IDs as a client sends them (six digits and a comma): ~3.4 bytes of tape a body byte
  // (2 and 5 MiB), held in a tape up to twice that (its capacity doubles); on the Boost path (a
  // shim to apply) the document and parser stack take more.
  // Three-digit numbers (6 bytes of tape a byte) pass on both paths too.
  for (const auto& [n, value, tail, per_byte] :
       {std::tuple{size_t{300'000}, "151644", "", 8}, std::tuple{size_t{750'000}, "151644", "", 8},
        std::tuple{size_t{750'000}, "151644", R"(,"max_tokens":100000)", 24},
        std::tuple{size_t{1'000'000}, "123", "", 12}, std::tuple{size_t{1'000'000}, "123", R"(,"max_tokens":100000)", 24}}) {
    const std::string body = padded(n, value, tail);
    Recorder memory;
    const PreparedRequest p = prepare(Endpoint::kChat, body, config, &memory);
    EXPECT_EQ(p.parse_refused, ParseRefusal::kNone) << n;
    EXPECT_TRUE(p.json_object);
    EXPECT_EQ(p.rewritten, *tail != 0);
    EXPECT_TRUE(p.rewritten || p.body == body);
    EXPECT_FALSE(p.fingerprints.chain.empty());
    EXPECT_GT(memory.calls, 0u);
    EXPECT_GT(memory.asked, kParseFreeBytes);
    EXPECT_LE(memory.asked, per_byte * body.size()) << n << tail;
    // The same body when the budget cannot give more than the free share: memory full.
    Recorder tight;
    tight.limit = kParseFreeBytes;
    EXPECT_EQ(prepare(Endpoint::kChat, body, config, &tight).parse_refused, ParseRefusal::kMemory) << n;
  }
  // A small body never asks.
  Recorder memory;
  EXPECT_TRUE(prepare(Endpoint::kChat, padded(1000, "151644"), config, &memory).json_object);
  EXPECT_EQ(memory.calls, 0u);
}

TEST(PrepareMemory, AShimmedBodyOnTheBoostPathIsCountedToo) {
  // max_tokens past the strip threshold sends the request down the Boost path (a rewrite), after
  // the tape: a 6 MiB body of one-digit numbers is refused on the tape before Boost reads it.
  PrepareConfig config;
  const PreparedRequest p =
      prepare(Endpoint::kChat, padded(3 << 20, "1", R"(,"max_tokens":100000)"), config);
  EXPECT_EQ(p.parse_refused, ParseRefusal::kTooDense);
  const PreparedRequest ok = prepare(Endpoint::kChat, padded(1000, "1", R"(,"max_tokens":100000)"), config);
  EXPECT_TRUE(ok.rewritten);
  EXPECT_TRUE(ok.shims.max_tokens_stripped);
}

TEST(PrepareRequest, StreamIsReadOnlyWhenBoolean) {
  EXPECT_EQ(chat(R"({"stream":true})").stream, true);
  EXPECT_EQ(chat(R"({"stream":false})").stream, false);
  EXPECT_EQ(chat(R"({"stream":null})").stream, std::nullopt);
  EXPECT_EQ(chat(R"({"stream":"true"})").stream, std::nullopt);
  EXPECT_EQ(chat(R"({"stream":1})").stream, std::nullopt);
  EXPECT_EQ(chat(R"({})").stream, std::nullopt);
  EXPECT_EQ(prepare(Endpoint::kMessages, R"({"stream":true})", {}).stream, true);
}

// --- max_output_tokens per endpoint ---

TEST(PrepareOutputLimit, ChatPrefersMaxCompletionTokensThenMaxTokens) {
  EXPECT_EQ(chat(R"({"max_completion_tokens":300,"max_tokens":200})").max_output_tokens, 300u);
  EXPECT_EQ(chat(R"({"max_tokens":200})").max_output_tokens, 200u);
  EXPECT_EQ(chat(R"({"max_completion_tokens":null,"max_tokens":200})").max_output_tokens, 200u);
  EXPECT_EQ(chat(R"({"max_completion_tokens":0})").max_output_tokens, 0u);
  EXPECT_EQ(chat(R"({})").max_output_tokens, std::nullopt);
}

TEST(PrepareOutputLimit, MalformedPreferredFieldIsInvalidWithoutFallback) {
  EXPECT_EQ(chat(R"({"max_completion_tokens":"300","max_tokens":200})").max_output_tokens,
            std::nullopt);
  EXPECT_EQ(chat(R"({"max_completion_tokens":-1,"max_tokens":200})").max_output_tokens,
            std::nullopt);
  EXPECT_EQ(chat(R"({"max_tokens":12.0})").max_output_tokens, std::nullopt);
}

TEST(PrepareOutputLimit, IsReadAfterTheShims) {
  auto p = chat(R"({"max_completion_tokens":500000,"max_tokens":1024})");
  EXPECT_TRUE(p.shims.max_completion_tokens_stripped);
  EXPECT_EQ(p.max_output_tokens, 1024u);
  EXPECT_EQ(chat(R"({"max_tokens":500000})").max_output_tokens, std::nullopt);
}

TEST(PrepareOutputLimit, EachEndpointReadsItsOwnField) {
  const std::string body = R"({"max_tokens":10,"max_completion_tokens":20,"max_output_tokens":30})";
  EXPECT_EQ(prepare(Endpoint::kChat, body, {}).max_output_tokens, 20u);
  EXPECT_EQ(prepare(Endpoint::kCompletions, body, {}).max_output_tokens, 10u);
  EXPECT_EQ(prepare(Endpoint::kMessages, body, {}).max_output_tokens, 10u);
  EXPECT_EQ(prepare(Endpoint::kResponses, body, {}).max_output_tokens, 30u);
  EXPECT_EQ(prepare(Endpoint::kOther, body, {}).max_output_tokens, std::nullopt);
  EXPECT_EQ(prepare(Endpoint::kResponses, R"({"max_tokens":10})", {}).max_output_tokens,
            std::nullopt);
}

// --- /v1/models ---

TEST(RewriteModelsContext, ShrinksNestedContextFieldsInEveryModel) {
  auto out = rewrite_models_context(
      R"({"object":"list","data":[{"id":"a","max_model_len":393216,)"
      R"("nested":{"context_length":393216,"deeper":[{"max_context_length":200000}]}},)"
      R"({"id":"b","max_model_len":262144}]})",
      131072);
  ASSERT_TRUE(out.has_value());
  auto v = json::parse(*out);
  auto& a = v.at("data").at(0);
  EXPECT_EQ(a.at("max_model_len").as_int64(), 262144);
  EXPECT_EQ(a.at("nested").at("context_length").as_int64(), 262144);
  EXPECT_EQ(a.at("nested").at("deeper").at(0).at("max_context_length").as_int64(), 68928);
  EXPECT_EQ(v.at("data").at(1).at("max_model_len").as_int64(), 131072);
  EXPECT_EQ(v.at("object").as_string(), "list");
}

TEST(RewriteModelsContext, OnlyIntegerValuesAboveTheMarginChange) {
  auto out = rewrite_models_context(
      R"({"data":[{"max_model_len":16384,"context_length":16385,"max_context_length":"99999",)"
      R"("other_len":99999,"max_model_len_x":99999}]})",
      16384);
  ASSERT_TRUE(out.has_value());
  auto m = json::parse(*out).at("data").at(0).as_object();
  EXPECT_EQ(m.at("max_model_len").as_int64(), 16384);
  EXPECT_EQ(m.at("context_length").as_int64(), 1);
  EXPECT_EQ(m.at("max_context_length").as_string(), "99999");
  EXPECT_EQ(m.at("other_len").as_int64(), 99999);
  EXPECT_EQ(m.at("max_model_len_x").as_int64(), 99999);
}

TEST(RewriteModelsContext, NothingToChangeGivesNullopt) {
  EXPECT_EQ(rewrite_models_context(R"({"data":[{"max_model_len":8192}]})", 16384), std::nullopt);
  EXPECT_EQ(rewrite_models_context(R"({"data":[{"max_model_len":65536.0}]})", 16384), std::nullopt);
  EXPECT_EQ(rewrite_models_context(R"({"max_model_len":65536,"data":[]})", 16384), std::nullopt);
  EXPECT_EQ(rewrite_models_context(R"({"data":{"max_model_len":65536}})", 16384), std::nullopt);
  EXPECT_EQ(rewrite_models_context(R"({"data":[{"max_model_len":65536}]})", 0), std::nullopt);
}

TEST(RewriteModelsContext, NotJsonGivesNullopt) {
  EXPECT_EQ(rewrite_models_context("", 16384), std::nullopt);
  EXPECT_EQ(rewrite_models_context("<html>502</html>", 16384), std::nullopt);
  EXPECT_EQ(rewrite_models_context(R"([{"max_model_len":65536}])", 16384), std::nullopt);
  EXPECT_EQ(rewrite_models_context(R"({"data":[{"max_model_len":65536})", 16384), std::nullopt);
}

TEST(RewriteModelsContext, BodyWithAnOverflowingNumberIsLeftAlone) {
  EXPECT_EQ(rewrite_models_context(R"({"data":[{"max_model_len":65536,"x":-1e999}]})", 16384),
            std::nullopt);
}

TEST(RewriteModelsContext, HugeUnsignedContextIsReducedWithoutOverflow) {
  auto out = rewrite_models_context(R"({"data":[{"max_model_len":18446744073709551615}]})", 15);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(json::parse(*out).at("data").at(0).at("max_model_len").as_uint64(),
            18446744073709551600u);
}

}  // namespace
}  // namespace ramjet::request

namespace ramjet::request {
namespace {

TEST(PrepareSession, TheUserFieldKeysTheSessionOnlyWhenAskedOnBothParsePaths) {
  PrepareConfig on;
  on.session_user_field = true;
  // fast path (no shim applies)
  PreparedRequest a = prepare(Endpoint::kChat, R"({"messages":[],"user":"u-1"})", on);
  EXPECT_EQ(a.session.source, SessionSource::kUser);
  EXPECT_EQ(a.session.value, "u-1");
  // Boost path (a shim rewrites the body): the same fact
  PreparedRequest b = prepare(Endpoint::kChat, R"({"messages":[],"user":"u-2","max_tokens":999999})", on);
  EXPECT_TRUE(b.shims.max_tokens_stripped);
  EXPECT_EQ(b.session.value, "u-2");
  // Anthropic metadata.user_id
  PreparedRequest c = prepare(Endpoint::kMessages, R"({"messages":[],"metadata":{"user_id":"u-3"}})", on);
  EXPECT_EQ(c.session.value, "u-3");
  // empty, too long, not a string, or not asked: no session
  EXPECT_EQ(prepare(Endpoint::kChat, R"({"user":""})", on).session.source, SessionSource::kNone);
  EXPECT_EQ(prepare(Endpoint::kChat, "{\"user\":\"" + std::string(257, 'x') + "\"}", on).session.source,
            SessionSource::kNone);
  EXPECT_EQ(prepare(Endpoint::kChat, R"({"user":7})", on).session.source, SessionSource::kNone);
  EXPECT_EQ(prepare(Endpoint::kChat, R"({"user":"u"})", PrepareConfig{}).session.source, SessionSource::kNone);
}

TEST(PrepareCacheSalt, AStringSaltIsReadOnBothParsePaths) {
  PrepareConfig config;
  EXPECT_EQ(prepare(Endpoint::kChat, R"({"messages":[],"cache_salt":"tenant-a"})", config).cache_salt, "tenant-a");
  PreparedRequest b = prepare(Endpoint::kChat, R"({"messages":[],"cache_salt":"tenant-b","max_tokens":999999})", config);
  EXPECT_TRUE(b.shims.max_tokens_stripped);
  EXPECT_EQ(b.cache_salt, "tenant-b");
  EXPECT_EQ(prepare(Endpoint::kResponses, R"({"input":"x","cache_salt":"s"})", config).cache_salt, "s");
  // empty or not a string: none (vLLM refuses the request); a long one is kept whole
  EXPECT_EQ(prepare(Endpoint::kChat, R"({"cache_salt":""})", config).cache_salt, "");
  EXPECT_EQ(prepare(Endpoint::kChat, R"({"cache_salt":7})", config).cache_salt, "");
  EXPECT_EQ(prepare(Endpoint::kChat, "{\"cache_salt\":\"" + std::string(5000, 'x') + "\"}", config).cache_salt,
            std::string(5000, 'x'));
}

}  // namespace
}  // namespace ramjet::request
