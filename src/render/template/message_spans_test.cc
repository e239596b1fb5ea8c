// render::message_spans: the spans it finds are the elements Boost.JSON parses, and it declines
// whatever could make a parser keep another "messages" array than the one it found.
#include "render/template/message_spans.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>

namespace ramjet::render {
namespace {

namespace json = boost::json;

// Each span (after the previous end: ',' and whitespace skipped) parses to the element.
void expect_spans_are_the_elements(const std::string& body) {
  const auto spans = scan_message_spans(body);
  ASSERT_TRUE(spans) << body;
  const json::value doc = json::parse(body);
  const json::array& msgs = doc.as_object().at("messages").as_array();
  ASSERT_EQ(spans->ends.size(), msgs.size()) << body;
  size_t start = spans->open;
  for (size_t i = 0; i < msgs.size(); ++i) {
    while (body[start] == ',' || body[start] == ' ' || body[start] == '\n' || body[start] == '\t' || body[start] == '\r')
      ++start;
    EXPECT_EQ(json::parse(std::string_view(body).substr(start, spans->ends[i] - start)), msgs[i]) << body;
    start = spans->ends[i];
  }
}

TEST(MessageSpans, FindsEveryElementOfTheMessagesArrayWhateverItHolds) {
  expect_spans_are_the_elements(R"({"messages":[]})");
  expect_spans_are_the_elements(R"({"model":"m","messages":[{"role":"user","content":"a]}\"\\"}],"tools":[{"x":[1,{"y":"}"}]}]})");
  expect_spans_are_the_elements(" {\n \"a\" : [\"messages\"] ,\n \"messages\" : [ 1 , -2.5e3 , true,null, \"s\\u0022\" , [ [ ] ] , {\"messages\":[]} ]\n }\n ");
  expect_spans_are_the_elements(R"({"messages":[{"content":"\\"},{"content":"\\\""}],"z":{}})");
}

TEST(MessageSpans, DeclinesEscapedKeysDuplicatesAndNonObjects) {
  EXPECT_FALSE(scan_message_spans(R"({"messag\u0065s":[],"messages":[{}]})"));
  EXPECT_FALSE(scan_message_spans(R"({"messages":[{}],"a\"b":1})"));
  EXPECT_FALSE(scan_message_spans(R"({"messages":[{}],"messages":[{}]})"));
  EXPECT_FALSE(scan_message_spans(R"({"messages":{"a":1}})"));
  EXPECT_FALSE(scan_message_spans(R"({"model":"m"})"));
  EXPECT_FALSE(scan_message_spans(R"([{"messages":[]}])"));
  EXPECT_FALSE(scan_message_spans(R"({"messages":[{}]} x)"));
  EXPECT_FALSE(scan_message_spans(R"({"messages":[{})"));
  EXPECT_FALSE(scan_message_spans(""));
  EXPECT_FALSE(scan_message_spans("{\"messages\":[\"\\"));
}

TEST(MessageSpans, MoreElementsAreTheValuesAfterEachComma) {
  std::vector<uint32_t> ends{7};
  ASSERT_TRUE(scan_more_elements(" , {\"a\":\"]\"} ,[1,2]\n", 100, ends));
  EXPECT_EQ(ends, (std::vector<uint32_t>{7, 112, 119}));
  ASSERT_TRUE(scan_more_elements("  \n", 0, ends));
  EXPECT_EQ(ends.size(), 3u);
  EXPECT_FALSE(scan_more_elements(" {\"a\":1}", 0, ends));  // no comma
  EXPECT_FALSE(scan_more_elements(", {\"a\":1", 0, ends));  // unterminated
  EXPECT_FALSE(scan_more_elements(",", 0, ends));
  EXPECT_EQ(ends.size(), 3u);
}

}  // namespace
}  // namespace ramjet::render
