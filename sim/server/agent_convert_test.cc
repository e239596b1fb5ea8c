// sim/server/agent_convert: the conversions vLLM does, checked against values Python and vLLM
// (commit 0001948b) give for the same input.
#include "sim/server/agent_convert.h"
#include "sim/server/python_json.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace ramjet::sim {
namespace {

namespace json = boost::json;

json::array messages_of(AgentApi api, std::string_view body) {
  auto r = parse_agent_request(api, body);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r->chat.at("messages").as_array() : json::array{};
}

TEST(PythonJsonDumps, UsesPythonsSeparatorsAndEscapesEverythingOutsidePrintableAscii) {
  // json.dumps({"a": 1.5, "b": "é😀\n\x7f", "c": [True, None, 10], "d": 1e20, "e": 2.0, "f": 1e-05})
  const json::value v = json::parse(R"({"a":1.5,"b":"\u00e9\ud83d\ude00\n\u007f","c":[true,null,10],"d":1e20,)"
                                    R"("e":2.0,"f":0.00001})");
  EXPECT_EQ(python_json_dumps(v),
            R"({"a": 1.5, "b": "\u00e9\ud83d\ude00\n\u007f", "c": [true, null, 10], "d": 1e+20, "e": 2.0, )"
            R"("f": 1e-05})");
  EXPECT_EQ(python_json_dumps(json::object{}), "{}");
}

TEST(PythonStr, WritesDictsAndListsAsPythonRepr) {
  EXPECT_EQ(python_str(json::parse(R"([{"type":"text","text":"it's"},true,null])")),
            R"([{'type': 'text', 'text': "it's"}, True, None])");
  EXPECT_EQ(python_str(json::value("plain")), "plain");
}

TEST(AnthropicConversion, JoinsSystemBlocksSkippingTheBillingHeaderAndMapsToolTurns) {
  const auto m = messages_of(AgentApi::kMessages, R"({"model":"m","max_tokens":5,
    "system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=1"},{"type":"text","text":"A"},
              {"type":"text","text":"B"}],
    "messages":[{"role":"user","content":"q"},
      {"role":"assistant","content":[{"type":"thinking","thinking":"t"},{"type":"text","text":"ok"},
                                     {"type":"tool_use","id":"tu1","name":"f","input":{"x":"é"}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu1","content":"42"}]}]})");
  EXPECT_EQ(json::serialize(m),
            R"([{"role":"system","content":"AB"},{"role":"user","content":"q"},)"
            R"({"role":"assistant","reasoning":"t","tool_calls":[{"id":"tu1","type":"function","function":)"
            R"({"name":"f","arguments":"{\"x\": \"\\u00e9\"}"}}],"content":"ok"},)"
            R"({"role":"tool","tool_call_id":"tu1","content":"42"}])");
}

TEST(AnthropicConversion, AnswersAToolTurnWithACallAndATurnAfterTheResultWithText) {
  auto first = parse_agent_request(AgentApi::kMessages, R"({"model":"m","max_tokens":5,
    "tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"q"}]})");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->tool_name, "get_weather");
  EXPECT_EQ(json::serialize(first->chat.at("tool_choice")), R"("auto")");
  auto after = parse_agent_request(AgentApi::kMessages, R"({"model":"m","max_tokens":5,
    "tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"q"},
    {"role":"assistant","content":[{"type":"tool_use","id":"a","name":"get_weather","input":{}}]},
    {"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"sunny"}]}]})");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->tool_name, "");
}

TEST(AnthropicConversion, RefusesMissingMaxTokensAsVllmsFrontAndUnknownBlocksWithItsErrorShape) {
  // A pydantic error comes from vLLM's HTTP front, in the OpenAI shape even on /v1/messages.
  auto r = parse_agent_request(AgentApi::kMessages, R"({"model":"m","messages":[{"role":"user","content":"q"}]})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status, 400u);
  EXPECT_EQ(agent_error_body(AgentApi::kMessages, r.error()),
            R"({"error":{"message":"1 validation error:\n  {'type': 'missing', 'loc': 'body.max_tokens', )"
            R"('msg': 'Field required', 'input': '<dict of 2 items>'}","type":"Bad Request","param":"body.max_tokens",)"
            R"("code":400}})");
  // The conversion's own refusals keep the Anthropic shape.
  auto empty = parse_agent_request(AgentApi::kMessages, R"({"model":"m","max_tokens":1,"messages":[]})");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(agent_error_body(AgentApi::kMessages, empty.error()),
            R"({"type":"error","error":{"type":"BadRequestError","message":"Cannot apply chat template to an empty )"
            R"(conversation. Provide at least one message."}})");
  EXPECT_FALSE(parse_agent_request(AgentApi::kMessages,
                                   R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"x"}]}]})")
                   .ok());
  EXPECT_FALSE(parse_agent_request(AgentApi::kMessages, "[1,2]").ok());
}

TEST(ResponsesConversion, BuildsInstructionsItemsAndMergesCallsIntoTheAssistantMessage) {
  const auto m = messages_of(AgentApi::kResponses, R"({"instructions":"sys","input":[
    {"role":"user","content":[{"type":"input_text","text":"hi"}]},
    {"type":"reasoning","id":"r","summary":[],"content":[{"type":"reasoning_text","text":"think"}]},
    {"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
    {"type":"function_call_output","call_id":"c1","output":"42"},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}]})");
  EXPECT_EQ(json::serialize(m),
            R"([{"role":"system","content":"sys"},{"role":"user","content":[{"type":"input_text","text":"hi"}]},)"
            R"({"role":"assistant","reasoning":"think","tool_calls":[{"id":"c1","function":{"name":"f",)"
            R"("arguments":"{}"},"type":"function"}]},{"role":"tool","content":"42","tool_call_id":"c1"},)"
            R"({"role":"assistant","content":"done"}])");
}

TEST(ResponsesConversion, ContinuesAnIncompleteFinalMessageAndPassesTheReasoningEffort) {
  auto r = parse_agent_request(AgentApi::kResponses, R"({"input":[{"role":"user","content":"q"},
    {"type":"message","role":"assistant","status":"incomplete","content":[{"type":"output_text","text":"par"}]}],
    "reasoning":{"effort":"low"}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->chat.at("add_generation_prompt"), false);
  EXPECT_EQ(r->chat.at("continue_final_message"), true);
  // The chat request's reasoning_effort (Prompter::chat merges it into the template kwargs).
  EXPECT_EQ(r->chat.at("reasoning_effort"), "low");
  EXPECT_FALSE(r->chat.contains("chat_template_kwargs"));
}

TEST(ResponsesConversion, DumpsToolsAsVllm032sFunctionDefinitionAndPassesItsTemplateKwargs) {
  auto r = parse_agent_request(AgentApi::kResponses, R"({"input":"q","chat_template_kwargs":{"enable_thinking":false},
    "tools":[{"type":"function","name":"f","parameters":{"type":"object"},"strict":true,"x":1},
             {"type":"function","name":"g","description":"d"}]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(json::serialize(r->chat.at("tools")),
            R"([{"type":"function","function":{"name":"f","description":null,"parameters":{"type":"object"},)"
            R"("strict":true}},{"type":"function","function":{"name":"g","description":"d","parameters":null}}])");
  EXPECT_EQ(json::serialize(r->chat.at("chat_template_kwargs")), R"({"enable_thinking":false})");
  EXPECT_FALSE(parse_agent_request(AgentApi::kResponses,
                                   R"({"input":"q","tools":[{"type":"function","name":"f","strict":"yes"}]})")
                   .ok());
}

TEST(ResponsesConversion, RefusesANonStringNonArrayInputWithTheOpenAiErrorShape) {
  auto r = parse_agent_request(AgentApi::kResponses, R"({"input":3})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(agent_error_body(AgentApi::kResponses, r.error()),
            R"({"error":{"message":"input must be a string or an array of items","type":"BadRequestError",)"
            R"("param":"input","code":400}})");
}

}  // namespace
}  // namespace ramjet::sim
