#include "render/template/vllm_chat.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace ramjet::render {
namespace {

namespace json = boost::json;

// Chat tools as vLLM 0.32's ChatCompletionToolsParam dumps them for the template: declared fields
// only, flags when set, an outer defer_loading copied into the function.
TEST(VllmToolDump, DeclaredFieldsOnlyAndFlagsWhenSet) {
  auto d = vllm_tool_dump(json::parse(R"({"type":"function","x-tool":1,"defer_loading":true,
    "function":{"name":"f","parameters":{"type":"object"},"strict":null,"x-extra":{"a":1}}})").as_object());
  ASSERT_TRUE(d);
  EXPECT_EQ(json::value(*d), json::parse(R"({"type":"function","function":{"name":"f","description":null,
    "parameters":{"type":"object"},"defer_loading":true},"defer_loading":true})"));
  EXPECT_EQ(json::value(*vllm_tool_dump(json::parse(R"({"function":{"name":"g","description":"d"}})").as_object())),
            json::parse(R"({"type":"function","function":{"name":"g","description":"d","parameters":null}})"));
  for (const char* bad : {R"({"type":"custom","function":{"name":"f"}})", R"({"function":{}})", R"({"type":"function"})",
                          R"({"function":{"name":"f","strict":"maybe"}})", R"({"function":{"name":"f","parameters":[]}})"}) {
    EXPECT_FALSE(vllm_tool_dump(json::parse(bad).as_object())) << bad;
  }
}

// The kwargs vLLM 0.32's chat path gives the template: the request's fields over the kwargs,
// enable_thinking derived from the request's effort unless the caller set it.
TEST(VllmTemplateKwargs, RequestFieldsOverTheKwargsAndThinkingFromTheEffort) {
  EXPECT_EQ(json::value(vllm_template_kwargs(json::parse(R"({"reasoning_effort":"high",
      "chat_template_kwargs":{"reasoning_effort":"low","a":1},"documents":[{"t":"d"}]})").as_object())),
            json::parse(R"({"reasoning_effort":"high","a":1,"documents":[{"t":"d"}],"enable_thinking":true})"));
  EXPECT_EQ(json::value(vllm_template_kwargs(json::parse(R"({"reasoning_effort":"none",
      "chat_template_kwargs":{"enable_thinking":true}})").as_object())),
            json::parse(R"({"enable_thinking":true,"reasoning_effort":"none"})"));
  EXPECT_TRUE(vllm_template_kwargs(json::parse(R"({"reasoning_effort":"auto","documents":null})").as_object()).empty());
}

TEST(VllmChat, ResponsesTextPartsBecomeChatTextParts) {
  json::value m = json::parse(R"([{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"output_text","text":"b"},
      {"type":"image_url","image_url":{"url":"x"}}]},{"role":"assistant","content":"c"}])");
  as_chat_text_parts(m);
  EXPECT_EQ(m, json::parse(R"([{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"},
      {"type":"image_url","image_url":{"url":"x"}}]},{"role":"assistant","content":"c"}])"));
}

}  // namespace
}  // namespace ramjet::render
