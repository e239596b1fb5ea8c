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
  EXPECT_EQ(classify("GET", "/v1/chat/completions"), Endpoint::kOther);
}

TEST(Endpoint, SubPathsAreForwardedAsOther) {
  EXPECT_EQ(classify("POST", "/v1/chat/completions/render"), Endpoint::kOther);
  EXPECT_EQ(classify("POST", "/tokenize"), Endpoint::kOther);
}

TEST(Endpoint, ModelsAndHealthAreGetPaths) {
  EXPECT_EQ(classify("GET", "/v1/models"), Endpoint::kModels);
  EXPECT_EQ(classify("GET", "/health"), Endpoint::kHealth);
  EXPECT_EQ(classify("POST", "/health"), Endpoint::kOther);
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
