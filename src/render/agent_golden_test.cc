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
#include "render/prompt.h"
#include "render/tokenize_payload.h"

namespace ramjet::render {
namespace {

namespace json = boost::json;

TEST(AgentGoldens, ResponsesAndMessagesRequestsRenderAndEncodeLikeVllm) {
  PromptSources src;
  src.tokenizer_path = std::string(RAMJET_TESTDATA_DIR) + "/models/qwen3/tokenizer.json";
  src.template_path = std::string(RAMJET_TESTDATA_DIR) + "/models/qwen3/chat_template.jinja";
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
}

}  // namespace
}  // namespace ramjet::render
