#include "request/ingress/endpoint.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace ramjet::request {
namespace {

TEST(Endpoint, ClassifiesTheFourInferencePathsOnlyForPost) {
  EXPECT_EQ(classify("POST", "/v1/chat/completions"), Endpoint::kChat);
  EXPECT_EQ(classify("POST", "/v1/completions?x=1"), Endpoint::kCompletions);
  EXPECT_EQ(classify("POST", "/v1/responses"), Endpoint::kResponses);
  EXPECT_EQ(classify("POST", "/v1/messages"), Endpoint::kMessages);
  EXPECT_EQ(classify("GET", "/v1/chat/completions"), Endpoint::kUnknown);
  EXPECT_EQ(allowed_methods("/v1/chat/completions?x"), "POST");
}

TEST(Endpoint, ModelsAndHealthAreGetPaths) {
  EXPECT_EQ(classify("GET", "/v1/models"), Endpoint::kModels);
  EXPECT_EQ(classify("HEAD", "/v1/models"), Endpoint::kModels);
  EXPECT_EQ(classify("GET", "/health"), Endpoint::kHealth);
  EXPECT_EQ(classify("POST", "/health"), Endpoint::kUnknown);
  EXPECT_EQ(allowed_methods("/health"), "GET, HEAD");
}

TEST(Endpoint, EngineAdminAndDebugPathsAreNeverForwardedByDefault) {
  for (const char* path : {"/reset_prefix_cache", "/sleep?level=1", "/wake_up", "/is_sleeping",
                           "/collective_rpc", "/start_profile", "/stop_profile", "/metrics",
                           "/sim/fault", "/tokenize", "/detokenize", "/v1/chat/completions/render",
                           "/version", "/v1/load_lora_adapter", "/pause", "/", "*",
                           "http://engine/v1/chat/completions"}) {
    for (const char* method : {"GET", "POST", "PUT", "DELETE"}) {
      EXPECT_EQ(classify(method, path), Endpoint::kUnknown) << method << " " << path;
    }
    EXPECT_EQ(allowed_methods(path), "") << path;
  }
}

TEST(Endpoint, TokenizeIsServedOnlyWhenEnabled) {
  ServedPaths served{.tokenize = true, .passthrough = {}};
  EXPECT_EQ(classify("POST", "/tokenize", served), Endpoint::kOther);
  EXPECT_EQ(classify("POST", "/detokenize", served), Endpoint::kOther);
  EXPECT_EQ(classify("GET", "/tokenize", served), Endpoint::kUnknown);
  EXPECT_EQ(allowed_methods("/tokenize", served), "POST");
  EXPECT_EQ(classify("POST", "/reset_prefix_cache", served), Endpoint::kUnknown);
}

TEST(Endpoint, PassthroughListsExactPathsAndPrefixesForAnyMethod) {
  ServedPaths served{.tokenize = false, .passthrough = {"/v1/embeddings", "/v1/chat/completions/render", "/pooling/*"}};
  EXPECT_EQ(classify("POST", "/v1/embeddings", served), Endpoint::kOther);
  EXPECT_EQ(classify("GET", "/v1/embeddings?x=1", served), Endpoint::kOther);
  EXPECT_EQ(classify("POST", "/v1/embeddings/x", served), Endpoint::kUnknown);
  EXPECT_EQ(classify("POST", "/v1/chat/completions/render", served), Endpoint::kOther);
  EXPECT_EQ(classify("POST", "/pooling/a/b", served), Endpoint::kOther);
  EXPECT_EQ(classify("POST", "/pooling", served), Endpoint::kUnknown);
}

TEST(Endpoint, PassthroughPrefixesCannotBeEscapedWithDotSegmentsOrEncodings) {
  ServedPaths served{.tokenize = false, .passthrough = {"/pooling/*"}};
  for (const char* path : {"/pooling/../reset_prefix_cache", "/pooling/./x", "/pooling/%2e%2e/sleep",
                           "/pooling/%2E%2E/sleep", "/pooling/a%2fb", "/pooling/a%5cb", "/pooling/a\\b",
                           "/pooling/.."}) {
    EXPECT_EQ(classify("POST", path, served), Endpoint::kUnknown) << path;
  }
}

TEST(Endpoint, CorsPreflightOfServedPathsGoesToAnEngine) {
  EXPECT_EQ(classify("OPTIONS", "/v1/chat/completions"), Endpoint::kOther);
  EXPECT_EQ(classify("OPTIONS", "/v1/models"), Endpoint::kOther);
  EXPECT_EQ(classify("OPTIONS", "/health"), Endpoint::kUnknown);
  EXPECT_EQ(classify("OPTIONS", "/reset_prefix_cache"), Endpoint::kUnknown);
}

TEST(Endpoint, ErrorJsonIsOpenAiShapedAndEscaped) {
  auto v = boost::json::parse(error_json("bad \"thing\"\n", "invalid_request_error", 413));
  auto& e = v.at("error").as_object();
  EXPECT_EQ(e.at("message").as_string(), "bad \"thing\"\n");
  EXPECT_EQ(e.at("type").as_string(), "invalid_request_error");
  EXPECT_TRUE(e.at("param").is_null());
  EXPECT_EQ(e.at("code").as_int64(), 413);
}

}  // namespace
}  // namespace ramjet::request
