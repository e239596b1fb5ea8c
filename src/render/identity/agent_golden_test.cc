// Responses and Anthropic Messages requests rendered and encoded by ramjet's local pipeline
// (api_conversion → the chat payload → the Qwen3 template → the tokenizer) reproduce the prompt
// text and token ids in test/golden/agent_apis.jsonl, which were made without ramjet
// (test/oracle/make_agent_goldens.py: a Python port of vLLM's conversion, python3-jinja2 and the
// HF tokenizers crate).
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <fstream>
#include <string>

#include "model/model_profile.h"
#include "render/prompt/prompt.h"
#include "render/identity/tokenize_payload.h"
#include "render/template/api_conversion.h"

namespace ramjet::render {
namespace {

namespace json = boost::json;

class AgentGoldens : public ::testing::TestWithParam<const char*> {};

// With the Jinja template and with the native Qwen3 formatter the profile selects.
TEST_P(AgentGoldens, ResponsesAndMessagesRequestsRenderAndEncodeLikeVllm) {
  PromptSources src;
  src.tokenizer_path = std::string(RAMJET_TESTDATA_DIR) + "/models/qwen3/tokenizer.json";
  src.template_path = std::string(RAMJET_TESTDATA_DIR) + "/models/qwen3/chat_template.jinja";
  src.template_formatter = GetParam();
  auto renderer = PromptRenderer::load(src);
  ASSERT_TRUE(renderer.ok()) << renderer.error().message;
  const model::ModelProfile* qwen = model::find_profile("qwen3");
  ASSERT_NE(qwen, nullptr);
  std::ifstream in(std::string(RAMJET_GOLDEN_DIR) + "/agent_apis.jsonl");
  ASSERT_TRUE(in.good());
  std::string line;
  int rows = 0, responses = 0, messages = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json::object row = json::parse(line).as_object();
    const std::string id(row.at("id").as_string());
    const bool is_responses = row.at("api").as_string() == "responses";
    auto payload = build_tokenize_payload(*qwen, is_responses ? PromptApi::kResponses : PromptApi::kMessages,
                                          row.at("request").as_object());
    ASSERT_TRUE(payload) << id;
    ASSERT_FALSE(payload->local_refusal) << id;
    auto rendered = (*renderer)->chat_parsed(payload->request);
    ASSERT_TRUE(rendered.ok()) << id << ": " << rendered.error().message;
    EXPECT_EQ(rendered->text, row.at("rendered").as_string()) << id;
    std::vector<uint32_t> want;
    for (const json::value& t : row.at("token_ids").as_array()) want.push_back(static_cast<uint32_t>(t.to_number<int64_t>()));
    EXPECT_EQ(rendered->ids, want) << id;
    // The remote form is the same chat request: the engine's /tokenize renders it alike.
    EXPECT_EQ(json::parse(payload->json).as_object().at("messages"), payload->request.at("messages")) << id;
    ++rows;
    (is_responses ? responses : messages)++;
  }
  EXPECT_GE(responses, 4);
  EXPECT_GE(messages, 4);
  EXPECT_EQ(rows, responses + messages);
  if (std::string_view(GetParam()) == "qwen3") {
    const NativeRenderStats stats = (*renderer)->native_stats();
    EXPECT_TRUE(stats.active);
    EXPECT_EQ(stats.native, static_cast<uint64_t>(rows)) << stats.fallbacks << " fell back to the template";
  }
}

INSTANTIATE_TEST_SUITE_P(Formatters, AgentGoldens, ::testing::Values("", "qwen3"));

// The refusals of chat hold for both APIs: media, kwargs the profile does not know, efforts it
// cannot express, and what only the engine can render.
TEST(AgentRefusals, TheLocalPipelineRefusesWhatItRefusesForChat) {
  const model::ModelProfile* qwen = model::find_profile("qwen3");
  const model::ModelProfile* qwen38 = model::find_profile("qwen3.8-27b");
  ASSERT_NE(qwen, nullptr);
  ASSERT_NE(qwen38, nullptr);
  struct Case {
    const model::ModelProfile* profile;
    PromptApi api;
    const char* body;
    ShadowOutcome want;
  };
  const Case cases[] = {
      {qwen, PromptApi::kResponses,
       R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,AA"}]}]})",
       ShadowOutcome::kUnsupported},
      {qwen, PromptApi::kMessages,
       R"({"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x/y.png"}},
                                                 {"type":"text","text":"what is this?"}]}]})",
       ShadowOutcome::kUnsupported},
      {qwen, PromptApi::kMessages, R"({"messages":[{"role":"user","content":"q"}],"chat_template_kwargs":{"custom":1}})",
       ShadowOutcome::kUnsupported},
      {qwen38, PromptApi::kMessages, R"({"messages":[{"role":"user","content":"q"}],"output_config":{"effort":"max"}})",
       ShadowOutcome::kUnsupported},
      {qwen38, PromptApi::kResponses, R"({"input":"q","reasoning":{"effort":"high"}})", ShadowOutcome::kUnsupported},
      {qwen, PromptApi::kResponses, R"({"input":"q","previous_response_id":"resp_1"})", ShadowOutcome::kUnsupported},
      {qwen, PromptApi::kResponses,
       R"({"input":[{"type":"message","role":"assistant","status":"incomplete","content":"Half"}]})",
       ShadowOutcome::kUnsupported},  // continue_final_message: vLLM's tail trimming is not reproduced
      {qwen, PromptApi::kMessages, R"({"messages":{"role":"user"}})", ShadowOutcome::kDecodeError},
  };
  for (const Case& c : cases) {
    auto p = build_tokenize_payload(*c.profile, c.api, json::parse(c.body).as_object());
    ASSERT_TRUE(p) << c.body;
    ASSERT_TRUE(p->local_refusal) << c.body;
    EXPECT_EQ(*p->local_refusal, c.want) << c.body;
  }
  // And what it renders for chat it renders for them: a supported effort on Qwen3.8.
  auto ok = build_tokenize_payload(*qwen38, PromptApi::kResponses,
                                   json::parse(R"({"input":"q","reasoning":{"effort":"low"}})").as_object());
  ASSERT_TRUE(ok);
  EXPECT_FALSE(ok->local_refusal);
}

}  // namespace
}  // namespace ramjet::render
