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

TEST(ExactPayload, ResponsesAndMessagesAreAskedForAsTheChatRequestVllmRenders) {
  auto r = tokenize_call(Endpoint::kResponses, R"({"model":"m","cache_salt":"s","instructions":"sys",
      "input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"reasoning":{"effort":"none"}})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->cache_salt, "s");
  // vLLM's /tokenize takes chat messages only: the Responses API's input_text parts (read by its
  // chat parser exactly as text) are sent as text parts, or it answers 400 (seen on vLLM 0.32).
  EXPECT_EQ(boost::json::parse(r->payload), boost::json::parse(R"({"model":"m","messages":[{"role":"system","content":"sys"},
      {"role":"user","content":[{"type":"text","text":"hi"}]}],
      "chat_template_kwargs":{"reasoning_effort":"none","enable_thinking":false},"return_token_strs":false})"));
  auto m = tokenize_call(Endpoint::kMessages, R"({"model":"m","max_tokens":9,"system":"sys",
      "messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false}})");
  ASSERT_TRUE(m);
  EXPECT_EQ(boost::json::parse(m->payload), boost::json::parse(R"({"model":"m","messages":[{"role":"system","content":"sys"},
      {"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false},"return_token_strs":false})"));
}

TEST(ExactPayload, WhatExactRoutingCannotTokenizeIsRefused) {
  EXPECT_FALSE(tokenize_call(Endpoint::kChat, "not json"));
  EXPECT_FALSE(tokenize_call(Endpoint::kChat, "[1]"));
  EXPECT_FALSE(tokenize_call(Endpoint::kChat, R"({"model":"m"})"));
  EXPECT_FALSE(tokenize_call(Endpoint::kChat,
                             R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})"));
  EXPECT_TRUE(tokenize_call(Endpoint::kChat, R"({"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]})"));
  EXPECT_FALSE(tokenize_call(Endpoint::kModels, R"({"messages":[]})"));
  EXPECT_FALSE(tokenize_call(Endpoint::kMessages, R"({"messages":"x"})"));
  EXPECT_FALSE(tokenize_call(Endpoint::kResponses, R"({"input":"q","previous_response_id":"resp_1"})"));
  EXPECT_FALSE(tokenize_call(Endpoint::kResponses,
                             R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:"}]}]})"));
  std::string deep(200, '[');
  EXPECT_FALSE(tokenize_call(Endpoint::kChat, R"({"messages":)" + deep));
}

TEST(ExactCanary, ACohortIsStablePerSessionAndKeyAndItsShareIsTheBps) {
  EXPECT_TRUE(canary_treatment("k", "s", 10000));
  EXPECT_FALSE(canary_treatment("k", "s", 0));
  for (uint32_t bps : {100u, 1000u, 5000u}) {
    int in = 0;
    for (int i = 0; i < 20000; ++i) in += canary_treatment("key", "session-" + std::to_string(i), bps) ? 1 : 0;
    EXPECT_NEAR(in / 20000.0, bps / 10000.0, 0.01) << bps;
  }
  for (int i = 0; i < 100; ++i) {
    const std::string s = "session-" + std::to_string(i);
    EXPECT_EQ(canary_treatment("key", s, 1000), canary_treatment("key", s, 1000));
    if (canary_treatment("key", s, 1000)) {
      EXPECT_TRUE(canary_treatment("key", s, 5000)) << "a wider rollout keeps its sessions";
    }
  }
  int differ = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string s = "session-" + std::to_string(i);
    differ += canary_treatment("a", s, 5000) != canary_treatment("b", s, 5000);
  }
  EXPECT_GT(differ, 300) << "another key draws another cohort";
}

}  // namespace
}  // namespace ramjet::request
