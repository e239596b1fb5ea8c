#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "request/stream/exact_tokens.h"

namespace ramjet::request {
namespace {

boost::json::object payload(Endpoint e, std::string_view body) {
  auto call = tokenize_call(e, body);
  EXPECT_TRUE(call.has_value()) << body;
  return call ? boost::json::parse(call->payload).as_object() : boost::json::object{};
}

TEST(ExactPayload, ChatCarriesWhatTheTemplateSeesAndReasoningGoesIntoTheKwargs) {
  const auto p = payload(Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"q"}],
      "tools":[{"type":"function"}],"reasoning_effort":"none","chat_template_kwargs":{"a":1},
      "add_generation_prompt":true,"stream":true,"max_tokens":9,"cache_salt":"s"})");
  EXPECT_EQ(p.at("model"), "m");
  EXPECT_TRUE(p.at("messages").is_array());
  EXPECT_TRUE(p.at("tools").is_array());
  EXPECT_EQ(p.at("add_generation_prompt"), true);
  EXPECT_EQ(p.at("return_token_strs"), false);
  const auto& k = p.at("chat_template_kwargs").as_object();
  EXPECT_EQ(k.at("a"), 1);
  EXPECT_EQ(k.at("reasoning_effort"), "none");
  EXPECT_EQ(k.at("enable_thinking"), false) << "vLLM sets it from the effort unless the caller did";
  EXPECT_FALSE(p.contains("stream"));
  EXPECT_FALSE(p.contains("max_tokens"));
  EXPECT_FALSE(p.contains("cache_salt")) << "the salt names the namespace; it does not change tokens";
  const auto call = tokenize_call(Endpoint::kChat, R"({"model":"lora-a","messages":[],"cache_salt":"s"})");
  ASSERT_TRUE(call);
  EXPECT_EQ(call->model, "lora-a");
  EXPECT_EQ(call->cache_salt, "s");
}

TEST(ExactPayload, TheCallersOwnThinkingSwitchWins) {
  const auto p = payload(Endpoint::kChat, R"({"messages":[],"reasoning_effort":"high",
      "chat_template_kwargs":{"enable_thinking":false}})");
  EXPECT_EQ(p.at("chat_template_kwargs").at("enable_thinking"), false);
  EXPECT_EQ(p.at("chat_template_kwargs").at("reasoning_effort"), "high");
}

TEST(ExactPayload, CompletionsNeedAStringPrompt) {
  const auto p = payload(Endpoint::kCompletions, R"({"model":"m","prompt":"abc","add_special_tokens":false})");
  EXPECT_EQ(p.at("prompt"), "abc");
  EXPECT_EQ(p.at("add_special_tokens"), false);
  EXPECT_FALSE(tokenize_call(Endpoint::kCompletions, R"({"prompt":[1,2,3]})"));
}

TEST(ExactPayload, WhatExactRoutingCannotTokenizeIsRefused) {
  EXPECT_FALSE(tokenize_call(Endpoint::kChat, "not json"));
  EXPECT_FALSE(tokenize_call(Endpoint::kChat, "[1]"));
  EXPECT_FALSE(tokenize_call(Endpoint::kChat, R"({"model":"m"})"));
  EXPECT_FALSE(tokenize_call(Endpoint::kChat,
                             R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})"));
  EXPECT_TRUE(tokenize_call(Endpoint::kChat, R"({"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]})"));
  EXPECT_FALSE(tokenize_call(Endpoint::kMessages, R"({"messages":[]})"));
  std::string deep(200, '[');
  EXPECT_FALSE(tokenize_call(Endpoint::kChat, R"({"messages":)" + deep));
}

}  // namespace
}  // namespace ramjet::request
