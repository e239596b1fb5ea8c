// render::api_conversion: the chat request vLLM builds from Responses and Anthropic Messages
// requests, case by case (each expectation read off vLLM's conversion code; the generated
// differential is test/oracle/api_oracle.py).
#include "render/template/api_conversion.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace ramjet::render {
namespace {

namespace json = boost::json;

json::object convert(PromptApi api, std::string_view body) {
  auto r = to_chat_request(api, json::parse(body).as_object());
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r.value() : json::object();
}

ConversionError::Kind refusal(PromptApi api, std::string_view body) {
  auto r = to_chat_request(api, json::parse(body).as_object());
  EXPECT_FALSE(r.ok());
  return r.ok() ? ConversionError::kBadRequest : r.error().kind;
}

json::value messages(const json::object& chat) { return chat.at("messages"); }

TEST(MessagesToChat, SystemBlocksJoinedWithoutTheBillingHeaderAndSystemRoleMessagesAppended) {
  auto chat = convert(PromptApi::kMessages, R"({"model":"m","max_tokens":8,
    "system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2; cch=1f2e"},
              {"type":"text","text":"You are Claude Code."},{"type":"text","text":""},
              {"type":"text","text":" Be brief."}],
    "messages":[{"role":"system","content":"!"},{"role":"user","content":"hi"}]})");
  EXPECT_EQ(messages(chat), json::parse(R"([{"role":"system","content":"You are Claude Code. Be brief.!"},
                                           {"role":"user","content":"hi"}])"));
  EXPECT_EQ(chat.at("model"), "m");
  EXPECT_FALSE(chat.contains("max_tokens"));  // sampling fields do not shape the prompt
}

TEST(MessagesToChat, AnEmptySystemStringIsNoSystemMessageButAnEmptySystemRoleMessageIs) {
  EXPECT_EQ(messages(convert(PromptApi::kMessages, R"({"system":"","messages":[{"role":"user","content":"q"}]})")),
            json::parse(R"([{"role":"user","content":"q"}])"));
  EXPECT_EQ(messages(convert(PromptApi::kMessages,
                             R"({"messages":[{"role":"system","content":""},{"role":"user","content":"q"}]})")),
            json::parse(R"([{"role":"system","content":""},{"role":"user","content":"q"}])"));
}

TEST(MessagesToChat, AssistantBlocksBecomeReasoningContentAndToolCalls) {
  auto chat = convert(PromptApi::kMessages, R"({"messages":[
    {"role":"user","content":[{"type":"text","text":"list files"}]},
    {"role":"assistant","content":[{"type":"thinking","thinking":"I should ","signature":"s"},
                                   {"type":"redacted_thinking","data":"zz"},
                                   {"type":"thinking","thinking":"call ls.","signature":"s"},
                                   {"type":"text","text":"Listing."},
                                   {"type":"tool_use","id":"toolu_1","name":"ls","input":{"path":"/tmp","all":true}}]}]})");
  EXPECT_EQ(messages(chat), json::parse(R"([{"role":"user","content":"list files"},
      {"role":"assistant","reasoning":"I should call ls.",
       "tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"ls","arguments":"{\"path\":\"/tmp\",\"all\":true}"}}],
       "content":"Listing."}])"));
}

TEST(MessagesToChat, UserToolResultsBecomeToolMessagesAheadOfTheUserText) {
  auto chat = convert(PromptApi::kMessages, R"({"messages":[
    {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.txt"},
                              {"type":"tool_result","tool_use_id":"toolu_2",
                               "content":[{"type":"text","text":"b"},{"type":"text","text":"c"}],"is_error":true},
                              {"type":"text","text":"and now?"}]},
    {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_3"}]}]})");
  EXPECT_EQ(messages(chat), json::parse(R"([
      {"role":"tool","tool_call_id":"toolu_1","content":"a.txt"},
      {"role":"tool","tool_call_id":"toolu_2","content":"b\nc"},
      {"role":"user","content":"and now?"},
      {"role":"tool","tool_call_id":"toolu_3","content":""}])"));
}

// vLLM 0.32's FunctionDefinition dump: strict and defer_loading only when set.
TEST(MessagesToChat, ToolsAsFunctionDumpsWithTheirFlagsAndTheSchemaTypeDefaulted) {
  auto chat = convert(PromptApi::kMessages, R"({"messages":[{"role":"user","content":"q"}],
    "tools":[{"name":"ls","description":"list","input_schema":{"properties":{}},"strict":true},
             {"name":"cat","input_schema":{"type":"object"},"defer_loading":true}],
    "output_config":{"effort":"high"},"chat_template_kwargs":{"enable_thinking":false}})");
  EXPECT_EQ(json::value(chat.at("tools")), json::parse(R"([
      {"type":"function","function":{"name":"ls","description":"list","parameters":{"properties":{},"type":"object"},"strict":true}},
      {"type":"function","function":{"name":"cat","description":null,"parameters":{"type":"object"},"defer_loading":true}}])"));
  EXPECT_EQ(chat.at("reasoning_effort"), "high");
  EXPECT_EQ(json::value(chat.at("chat_template_kwargs")), json::parse(R"({"enable_thinking":false})"));
  // vLLM 0.32 passes a Messages request's cache_salt on to the chat request.
  EXPECT_EQ(convert(PromptApi::kMessages, R"({"messages":[{"role":"user","content":"q"}],"cache_salt":"t"})").at("cache_salt"), "t");
  // Tool changes are valid in vLLM 0.32 but not reproduced: unsupported, not malformed.
  EXPECT_EQ(refusal(PromptApi::kMessages, R"({"messages":[{"role":"user","content":[{"type":"tool_removal","tool":{"type":"tool_reference","name":"x"}}]}]})"),
            ConversionError::kUnsupported);
  // vLLM 0.32: thinking disabled is reasoning_effort "none", over the output config's effort.
  auto off = convert(PromptApi::kMessages, R"({"messages":[{"role":"user","content":"q"}],
    "output_config":{"effort":"high"},"thinking":{"type":"disabled"}})");
  EXPECT_EQ(off.at("reasoning_effort"), "none");
  auto on = convert(PromptApi::kMessages, R"({"messages":[{"role":"user","content":"q"}],
    "thinking":{"type":"enabled","budget_tokens":1024}})");
  EXPECT_FALSE(on.contains("reasoning_effort"));
}

TEST(MessagesToChat, ClaudeCodeRolesAreUsersAndMalformedRequestsAreBadRequests) {
  EXPECT_EQ(messages(convert(PromptApi::kMessages, R"({"messages":[{"role":"ctx","content":"a"},{"role":"msg","content":"b"}]})")),
            json::parse(R"([{"role":"user","content":"a"},{"role":"user","content":"b"}])"));
  EXPECT_EQ(refusal(PromptApi::kMessages, R"({"messages":"hi"})"), ConversionError::kBadRequest);
  EXPECT_EQ(refusal(PromptApi::kMessages, R"({"messages":[{"role":"tool","content":"x"}]})"), ConversionError::kBadRequest);
  EXPECT_EQ(refusal(PromptApi::kMessages, R"({"messages":[{"role":"user","content":[{"type":"video"}]}]})"),
            ConversionError::kBadRequest);
  EXPECT_EQ(refusal(PromptApi::kMessages, R"({"messages":[{"role":"user","content":"q"}],"tools":[{"name":"x"}]})"),
            ConversionError::kBadRequest);
  // vLLM renders Python's str() of an assistant tool_result's block list: not reproduced.
  EXPECT_EQ(refusal(PromptApi::kMessages, R"({"messages":[{"role":"assistant","content":[
              {"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"x"}]}]}]})"),
            ConversionError::kUnsupported);
}

TEST(ResponsesToChat, InstructionsAndAStringInput) {
  auto chat = convert(PromptApi::kResponses, R"({"model":"m","instructions":"Be terse.","input":"hello",
                                                "reasoning":{"effort":"low"},"cache_salt":"s1","store":true})");
  EXPECT_EQ(messages(chat), json::parse(R"([{"role":"system","content":"Be terse."},{"role":"user","content":"hello"}])"));
  EXPECT_EQ(chat.at("reasoning_effort"), "low");
  EXPECT_EQ(chat.at("cache_salt"), "s1");
  EXPECT_FALSE(chat.contains("tools"));
  EXPECT_FALSE(chat.contains("add_generation_prompt"));
}

TEST(ResponsesToChat, ReasoningToolCallsAndTheAnswerMergeIntoOneAssistantMessage) {
  auto chat = convert(PromptApi::kResponses, R"({"input":[
    {"role":"user","content":[{"type":"input_text","text":"weather?"}],"type":"message"},
    {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"short"}],
     "content":[{"type":"reasoning_text","text":"Need the tool."}]},
    {"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","id":"fc_1","status":"completed"},
    {"type":"function_call","call_id":"call_2","name":"lookup","namespace":"crm","arguments":"{}"},
    {"type":"function_call_output","call_id":"call_1","output":"sunny"},
    {"type":"message","role":"assistant","id":"msg_1","status":"completed",
     "content":[{"type":"output_text","text":"It is sunny.","annotations":[]},{"type":"output_text","text":"ignored"}]},
    {"type":"reasoning","id":"rs_2","summary":[{"type":"summary_text","text":"from the summary"}]},
    {"role":"user","content":"thanks"}]})");
  EXPECT_EQ(messages(chat), json::parse(R"([
    {"role":"user","content":[{"type":"input_text","text":"weather?"}]},
    {"role":"assistant","reasoning":"Need the tool.","tool_calls":[
       {"id":"call_1","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"},"type":"function"},
       {"id":"call_2","function":{"name":"crm__lookup","arguments":"{}"},"type":"function"}]},
    {"role":"tool","content":"sunny","tool_call_id":"call_1"},
    {"role":"assistant","content":"It is sunny.","reasoning":"from the summary"},
    {"role":"user","content":"thanks"}])"));
}

TEST(ResponsesToChat, FunctionAndNamespaceToolsAsFunctionDefinitionDumps) {
  auto chat = convert(PromptApi::kResponses, R"({"input":"q","tools":[
    {"type":"function","name":"f","parameters":{"type":"object"},"strict":true,"description":"d","x-extra":1},
    {"type":"web_search_preview"},
    {"type":"namespace","name":"crm","description":"CRM","tools":[
       {"type":"function","name":"lookup","strict":false},{"type":"custom","name":"free"}]}]})");
  EXPECT_EQ(json::value(chat.at("tools")), json::parse(R"([
    {"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"},"strict":true}},
    {"type":"function","function":{"name":"crm__lookup","description":null,"parameters":null,"strict":false}}])"));
  // Flags are read as pydantic's lax mode reads booleans; anything else is refused, as vLLM does.
  auto lax = convert(PromptApi::kResponses, R"({"input":"q","tools":[{"type":"function","name":"f","strict":"yes","defer_loading":0}]})");
  EXPECT_EQ(json::value(lax.at("tools")), json::parse(R"([{"type":"function","function":{"name":"f","description":null,"parameters":null,"strict":true,"defer_loading":false}}])"));
  EXPECT_FALSE(to_chat_request(PromptApi::kResponses, json::parse(R"({"input":"q","tools":[
    {"type":"function","name":"f","strict":"maybe"}]})").as_object()));
}

TEST(ResponsesToChat, APartialFinalMessageIsContinued) {
  auto chat = convert(PromptApi::kResponses, R"({"input":[{"role":"user","content":"q"},
    {"type":"message","role":"assistant","status":"in_progress","content":[{"type":"output_text","text":"Part"}]}]})");
  EXPECT_EQ(chat.at("add_generation_prompt"), false);
  EXPECT_EQ(chat.at("continue_final_message"), true);
}

TEST(ResponsesToChat, StoredStateTemplatesAndUnknownItemsAreRefused) {
  EXPECT_EQ(refusal(PromptApi::kResponses, R"({"input":"q","previous_response_id":"resp_1"})"), ConversionError::kUnsupported);
  EXPECT_EQ(refusal(PromptApi::kResponses, R"({"input":[{"type":"item_reference","id":"x"}]})"), ConversionError::kUnsupported);
  EXPECT_EQ(refusal(PromptApi::kResponses, R"({"input":"q","prompt":{"id":"p"}})"), ConversionError::kBadRequest);
  EXPECT_EQ(refusal(PromptApi::kResponses, R"({"input":42})"), ConversionError::kBadRequest);
  EXPECT_EQ(refusal(PromptApi::kResponses, R"({"input":[{"type":"function_call","name":"f"}]})"), ConversionError::kBadRequest);
  EXPECT_EQ(refusal(PromptApi::kCompletions, R"({"prompt":"q"})"), ConversionError::kBadRequest);
}

}  // namespace
}  // namespace ramjet::render
