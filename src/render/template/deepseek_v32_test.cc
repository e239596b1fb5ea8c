// render::deepseek_v32: every line of test/data/testdata/goldens/deepseek-v3.2.jsonl renders to
// its `rendered` text and, with the DeepSeek-V3 tokenizer plus the V3.1 added-token override,
// to its `token_ids`; the encoder's rules one at a time; bad input is a typed error.
#include "render/template/deepseek_v32.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>
#include <simdjson.h>

#include "render/tokenize/tokenizer.h"

#ifndef RAMJET_TESTDATA_DIR
#define RAMJET_TESTDATA_DIR "test/data/testdata"
#endif

namespace ramjet::render::deepseek_v32 {
namespace {

namespace fs = std::filesystem;
const fs::path kTestdata = RAMJET_TESTDATA_DIR;

struct Golden {
  std::string id, request, rendered;
  std::vector<uint32_t> token_ids;
};

std::vector<Golden> goldens() {
  std::vector<Golden> out;
  simdjson::dom::parser parser;
  std::ifstream in(kTestdata / "goldens/deepseek-v3.2.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    simdjson::dom::element e = parser.parse(line);
    Golden g;
    g.id = std::string(std::string_view(e["id"]));
    g.request = simdjson::minify(e["request"]);
    g.rendered = std::string(std::string_view(e["rendered"]));
    for (auto id : e["token_ids"].get_array()) g.token_ids.push_back(static_cast<uint32_t>(uint64_t(id)));
    out.push_back(std::move(g));
  }
  return out;
}

std::string render(std::string_view request) {
  auto r = encode(request);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : std::string();
}

RenderErrc failure(std::string_view request) {
  auto r = encode(request);
  EXPECT_FALSE(r.ok());
  return r.ok() ? RenderErrc::kBadJson : r.error().code;
}

TEST(DeepseekV32, EveryGoldenLineRendersItsTextAndTokenIds) {
  if (!fs::exists(kTestdata / "goldens/deepseek-v3.2.jsonl")) GTEST_SKIP() << "no testdata";
  auto tok = Tokenizer::from_file((kTestdata / "models/deepseek-v3/tokenizer.json").string(), {},
                                  (kTestdata / "models/deepseek-v3.1/added_tokens_override.json").string());
  ASSERT_TRUE(tok.ok());
  const auto lines = goldens();
  ASSERT_EQ(lines.size(), 25u);
  size_t rendered_ok = 0, ids_ok = 0;
  for (const Golden& g : lines) {
    auto r = encode(g.request);
    ASSERT_TRUE(r.ok()) << g.id << ": " << r.error().message;
    EXPECT_EQ(*r, g.rendered) << g.id;
    rendered_ok += *r == g.rendered;
    auto ids = (*tok)->encode(*r);
    ASSERT_TRUE(ids.ok()) << g.id;
    EXPECT_EQ(*ids, g.token_ids) << g.id;
    ids_ok += *ids == g.token_ids;
  }
  EXPECT_EQ(rendered_ok, lines.size());
  EXPECT_EQ(ids_ok, lines.size());
}

TEST(DeepseekV32, ThinkingIsTheThinkingKwargByPythonTruthiness) {
  const std::string base = R"({"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":)";
  EXPECT_EQ(render(base + R"({"thinking":"yes"}})"), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>");
  EXPECT_EQ(render(base + R"({"thinking":0}})"), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>");
  EXPECT_EQ(render(base + R"({"thinking":""}})"), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>");
  EXPECT_EQ(render(base + R"({"enable_thinking":true}})"), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>");
}

TEST(DeepseekV32, ReasoningIsWrittenOnlyAfterTheLastUserTurnInThinkingMode) {
  const std::string req =
      R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a","reasoning":"r"},)"
      R"({"role":"user","content":"q2"},{"role":"assistant","content":"a2","reasoning_content":"r2"}],)"
      R"("chat_template_kwargs":{"thinking":true}})";
  EXPECT_EQ(render(req),
            "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think>a<｜end▁of▁sentence｜>"
            "<｜User｜>q2<｜Assistant｜><think>r2</think>a2<｜end▁of▁sentence｜>");
}

TEST(DeepseekV32, ThinkingAssistantAfterLastUserNeedsReasoningOrToolCalls) {
  EXPECT_EQ(failure(R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}],)"
                    R"("chat_template_kwargs":{"thinking":true}})"),
            RenderErrc::kInvalid);
}

TEST(DeepseekV32, DeveloperTurnsWrapTheUserMessage) {
  EXPECT_EQ(render(R"({"messages":[{"role":"developer","content":"d"}]})"),
            "<｜begin▁of▁sentence｜><｜User｜>\n\n# The user's message is: d<｜Assistant｜></think>");
  EXPECT_EQ(failure(R"({"messages":[{"role":"developer","content":""}]})"), RenderErrc::kInvalid);
  // Thinking mode without tools drops a developer turn before the last user turn; vLLM then fails.
  EXPECT_EQ(failure(R"({"messages":[{"role":"developer","content":"d"},{"role":"user","content":"u"}],)"
                    R"("chat_template_kwargs":{"thinking":true}})"),
            RenderErrc::kInvalid);
}

TEST(DeepseekV32, ToolArgumentsUsePythonJsonForNonStrings) {
  const std::string req =
      R"({"messages":[{"role":"user","content":"u"},{"role":"assistant","content":null,"tool_calls":[)"
      R"({"id":"1","type":"function","function":{"name":"f","arguments":)"
      R"("{\"a\": 1.0, \"b\": [true, null, 1e20], \"c\": {\"x\": \"é\"}, \"a\": 2.50, \"d\": -0}"}}]}]})";
  EXPECT_EQ(render(req),
            "<｜begin▁of▁sentence｜><｜User｜>u<｜Assistant｜></think>\n\n<｜DSML｜function_calls>\n"
            "<｜DSML｜invoke name=\"f\">\n"
            "<｜DSML｜parameter name=\"a\" string=\"false\">2.5</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"b\" string=\"false\">[true, null, 1e+20]</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"c\" string=\"false\">{\"x\": \"é\"}</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"d\" string=\"false\">0</｜DSML｜parameter>\n"
            "</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of▁sentence｜>");
}

TEST(DeepseekV32, PythonJsonDumpsFormatting) {
  auto dumps = [](std::string_view j) {
    auto r = python_json_dumps(j);
    return r.ok() ? *r : "error:" + std::string(to_string(r.error().code));
  };
  EXPECT_EQ(dumps("[0.0001, 0.00001, 1e16, 1e15, 123.0, -0.0, 1.5e-7, 3.14159, 100]"),
            "[0.0001, 1e-05, 1e+16, 1000000000000000.0, 123.0, -0.0, 1.5e-07, 3.14159, 100]");
  EXPECT_EQ(dumps(R"({"s": "a\"b\\c\n\u0001\u007f\ud83d\ude80"})"), "{\"s\": \"a\\\"b\\\\c\\n\\u0001\x7f🚀\"}");
  EXPECT_EQ(dumps("123456789012345678901234567890"), "123456789012345678901234567890");
  EXPECT_EQ(dumps("NaN"), "error:unsupported");
  EXPECT_EQ(dumps(R"("\ud800")"), "error:unsupported");
  EXPECT_EQ(dumps("1e999"), "error:unsupported");
  EXPECT_EQ(dumps("[1,]"), "error:bad_json");
}

// Differential: /usr/bin/python3's json.loads + json.dumps(ensure_ascii=False) on random floats
// (all bit patterns, wide exponents, short decimals), non-ASCII strings and duplicate keys.
TEST(DeepseekV32, JsonDumpsMatchesPythonOnGeneratedDocuments) {
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  const fs::path dir = fs::temp_directory_path() / ("ds32_dumps_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path script = dir / "gen.py", out = dir / "cases.jsonl";
  {
    std::ofstream py(script);
    py << R"PY(import json, random, struct, sys
random.seed(7)
docs = []
for i in range(6000):
    k = random.random()
    if k < 0.4:
        d = struct.unpack('d', struct.pack('Q', random.getrandbits(64)))[0]
        if d != d or d in (float('inf'), float('-inf')): continue
        docs.append(json.dumps(d))
    elif k < 0.7:
        docs.append(json.dumps(random.uniform(-1e6, 1e6) * 10 ** random.randint(-25, 25)))
    elif k < 0.85:
        docs.append(json.dumps(round(random.uniform(-1000, 1000), random.randint(0, 6))))
    else:
        s = "".join(chr(random.choice([random.randint(0, 0x7f), random.randint(0x80, 0xd7ff),
                                       random.randint(0xe000, 0x10ffff)])) for _ in range(random.randint(0, 8)))
        docs.append(json.dumps({"s": s, "n": [1, -0, 10 ** 30, 1e300, None, True], "s": s[::-1]}))
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for d in docs:
        f.write(json.dumps([d, json.dumps(json.loads(d), ensure_ascii=False)], ensure_ascii=False) + "\n")
)PY";
  }
  ASSERT_EQ(std::system(("/usr/bin/python3 " + script.string() + " " + out.string()).c_str()), 0);
  simdjson::dom::parser parser;
  std::ifstream in(out);
  std::string line;
  size_t n = 0, bad = 0;
  while (std::getline(in, line)) {
    simdjson::dom::array pair = parser.parse(line).get_array();
    const std::string doc(std::string_view(pair.at(0)));
    const std::string expected(std::string_view(pair.at(1)));
    auto got = python_json_dumps(doc);
    ++n;
    if (!got.ok() || *got != expected) {
      if (++bad < 5) ADD_FAILURE() << doc << " -> " << (got.ok() ? *got : got.error().message) << " != " << expected;
    }
  }
  fs::remove_all(dir);
  EXPECT_GT(n, 5000u);
  EXPECT_EQ(bad, 0u);
}

TEST(DeepseekV32, ToolMessagesMustAnswerToolCalls) {
  EXPECT_EQ(failure(R"({"messages":[{"role":"user","content":"u"},{"role":"tool","content":"x"}]})"),
            RenderErrc::kInvalid);
  EXPECT_EQ(failure(R"({"messages":[{"role":"user","content":"u"},{"role":"assistant","content":"",)"
                    R"("tool_calls":[{"function":{"name":"f","arguments":"{}"}}]},)"
                    R"({"role":"tool","content":"1"},{"role":"tool","content":"2"}]})"),
            RenderErrc::kInvalid);
}

TEST(DeepseekV32, BadInputIsATypedErrorNeverACrash) {
  EXPECT_EQ(failure(""), RenderErrc::kBadJson);
  EXPECT_EQ(failure("{\"messages\": [}"), RenderErrc::kBadJson);
  EXPECT_EQ(failure("[]"), RenderErrc::kBadRequest);
  EXPECT_EQ(failure(R"({"messages":[{"content":"x"}]})"), RenderErrc::kBadRequest);
  EXPECT_EQ(failure(R"({"messages":[{"role":"wizard","content":"x"}]})"), RenderErrc::kInvalid);
  EXPECT_EQ(failure(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})"),
            RenderErrc::kUnsupported);
  EXPECT_EQ(failure(R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"[1]"}}]}]})"),
            RenderErrc::kInvalid);
  EXPECT_EQ(failure(R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{"}}]}]})"),
            RenderErrc::kBadRequest);
  EXPECT_EQ(failure(R"({"messages":[],"tools":[{"type":"function","function":{"description":"no name"}}]})"),
            RenderErrc::kBadRequest);
  EXPECT_EQ(failure("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}"), RenderErrc::kBadJson);
  std::string deep(10000, '[');
  EXPECT_EQ(failure(deep), RenderErrc::kLimit);
  Options small;
  small.limits.max_output_bytes = 10;
  auto r = encode(R"({"messages":[{"role":"user","content":"a long enough message"}]})", small);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, RenderErrc::kLimit);
}

TEST(DeepseekV32, ToolsWithoutDescriptionDumpNullLikePydantic) {
  const std::string out = render(R"({"messages":[{"role":"user","content":"u"}],)"
                                 R"("tools":[{"type":"function","function":{"parameters":{"type":"object"},"name":"f"}}]})");
  EXPECT_NE(out.find("<functions>\n{\"name\": \"f\", \"description\": null, \"parameters\": {\"type\": \"object\"}}\n</functions>\n<｜User｜>"),
            std::string::npos);
  // Fields whose dump differs between vLLM versions (strict, defer_loading) are left to the engine.
  EXPECT_EQ(failure(R"({"messages":[{"role":"user","content":"u"}],)"
                    R"("tools":[{"type":"function","function":{"name":"f","strict":true}}]})"),
            RenderErrc::kUnsupported);
}

}  // namespace
}  // namespace ramjet::render::deepseek_v32
