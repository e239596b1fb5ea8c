// json_tape against the frozen simdjson reader (oracle/usage_reference): every document is
// accepted or refused alike, and an accepted one reads as the same Usage, for every endpoint,
// two nesting limits and both phases of a stream (before and after the first generated token).
// The documents are event-shaped JSON from a seeded generator (the accounting keys, escapes,
// surrogate pairs, multi-byte UTF-8, numbers at the edges of 64 bits and of a double) and the
// same documents with bytes flipped, inserted or removed.
#include "common/json_tape.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "oracle/usage_reference.h"
#include "request/usage/usage.h"

namespace ramjet::request {
namespace {

using json_tape::Kind;
using json_tape::Tape;

bool parses(std::string_view json, size_t max_depth = 64) {
  Tape t;
  return t.parse(json, max_depth);
}

bool reference_parses(std::string_view json, size_t max_depth = 64) {
  Usage u;
  bool failed = false;
  oracle::usage_reference_event(json, Endpoint::kChat, max_depth, u, failed);
  return !failed;
}

TEST(EventJson, AcceptsAndRefusesAsSimdjsonDoes) {
  const std::vector<std::string> cases = {
      "1e400", "-1e400", "1e-400", "99999999999999999999", "18446744073709551615", "18446744073709551616",
      "-9223372036854775808", "-9223372036854775809", "-0", "-0.0", "0.0", "1E2", "01", "1.", "-", ".5",
      "[\"\\ud800\"]", "[\"\\udc00\"]", "[\"\\ud800\\u0041\"]", "[\"\\ud800\\udc00\"]", "[\"a\x01\"]",
      "[\"\\u00zz\"]", "[1,]", "{\"a\":1,}", " ", "", "[\"\\u0000\"]", "[\"\x7f\"]", "1 2", "[]]", "[1]x",
      "\xef\xbb\xbf[1]", "[\"\\/\"]", "[\"\xed\xa0\x80\"]", "[\"\xf4\x90\x80\x80\"]", "[\"\xc0\x80\"]",
      "[\"\xe2\x82\xac\xf0\x9f\x98\x80\"]", "[1.5e1]", "[ -1 ]", "[\t1\n]", "[\x0c" "1]",
      "[123456789012345678901234567890.5]", "[0e5]", "[1e+5]", "[1E-5]", "[-12.0e0]", "nul", "[true,false,null]",
      "\"x\"", "[\"\\ud800\\ud800\"]", "[\"\\uDBFF\\uDFFF\"]", "[\"\\uD800\\uE000\"]", "[truex]", "[1x]",
      "{\"a\" 1}", "{\"a\":}", "{1:2}", "[\"abc", "[\"\\", "[\"\\u12\"]", "{\"k\":[{\"k\":{}}]}", "[[],{}]",
      "{\"a\":1}{", "\"\\q\"", "[1.5.3]", "[-01]", "[2.4703282292062327e-324]", "[1.7976931348623159e308]",
  };
  for (const auto& c : cases) {
    EXPECT_EQ(parses(c), reference_parses(c)) << c;
  }
  // Nesting: simdjson counts the non-empty containers around a value.
  for (size_t limit : {1u, 2u, 6u}) {
    for (int d = 1; d <= 8; ++d) {
      const std::string arrays = std::string(d, '[') + std::string(d, ']');
      std::string objects;
      for (int i = 0; i < d; ++i) objects += "{\"a\":";
      objects += "1" + std::string(d, '}');
      EXPECT_EQ(parses(arrays, limit), reference_parses(arrays, limit)) << arrays << " limit " << limit;
      EXPECT_EQ(parses(objects, limit), reference_parses(objects, limit)) << objects << " limit " << limit;
    }
  }
}

TEST(EventJson, ReadsValuesAndUnescapesOnlyWhenAsked) {
  Tape t;
  ASSERT_TRUE(t.parse(R"({"a\u0062":"x\n\u00e9\ud83d\ude00","n":-3,"u":18446744073709551615,"d":12.0,"e":[],"o":{"k":null}})",
                      64));
  ASSERT_EQ(t.kind(Tape::root()), Kind::kObject);
  std::vector<std::string> keys;
  for (auto k = Tape::first_member(Tape::root()); k != t.end(Tape::root()); k = t.next_member(k)) {
    keys.emplace_back(t.string(k));
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"ab", "n", "u", "d", "e", "o"}));
  const auto v = Tape::first_member(Tape::root()) + 1;
  EXPECT_EQ(t.string(v), "x\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_FALSE(t.string_empty(v));
  const auto n = t.next_member(v - 1) + 1;
  EXPECT_EQ(t.kind(n), Kind::kNegInt);
  const auto u = t.next_member(n - 1) + 1;
  EXPECT_EQ(t.uint_value(u), UINT64_MAX);
  const auto d = t.next_member(u - 1) + 1;
  EXPECT_EQ(t.kind(d), Kind::kDouble);
  EXPECT_EQ(t.double_value(d), 12.0);
  const auto e = t.next_member(d - 1) + 1;
  EXPECT_TRUE(t.container_empty(e));
  const auto o = t.next_member(e - 1) + 1;
  EXPECT_FALSE(t.container_empty(o));
  EXPECT_EQ(t.next_member(o - 1), t.end(Tape::root()));
}

// What prepare's view reads besides accounting: negative integers, strings as the input spells
// them, and every unescaped string's view alive at once until the next parse (the canonical
// writer sorts keys by them), also when the tape is reused.
TEST(EventJson, KeepsNegativeIntegersRawStringsAndEveryUnescapedView) {
  Tape t;
  ASSERT_TRUE(t.parse(R"([-1,-9223372036854775808,"a\nb","plain","\u00e9\ud83d\ude00","x\/y"])", 64));
  const auto a = Tape::root();
  auto e = Tape::first_element(a);
  EXPECT_EQ(t.kind(e), Kind::kNegInt);
  EXPECT_EQ(t.negative_value(e), -1);
  e = t.next(e);
  EXPECT_EQ(t.negative_value(e), INT64_MIN);
  const auto s1 = t.next(e), s2 = t.next(s1), s3 = t.next(s2), s4 = t.next(s3);
  EXPECT_TRUE(t.escaped(s1));
  EXPECT_FALSE(t.escaped(s2));
  EXPECT_EQ(t.raw_string(s1), R"(a\nb)");
  EXPECT_EQ(t.raw_string(s2), "plain");
  const std::string_view v1 = t.string(s1), v3 = t.string(s3), v4 = t.string(s4);
  EXPECT_EQ(t.string(s1).data(), v1.data());  // made once
  EXPECT_EQ(v1, "a\nb");
  EXPECT_EQ(v3, "\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v4, "x/y");
  EXPECT_EQ(v1, "a\nb");  // still valid after the others were made
  // Reused: the new document's escaped strings are unescaped afresh.
  ASSERT_TRUE(t.parse(R"(["c\td","\u0041"])", 64));
  const auto n1 = Tape::first_element(Tape::root());
  EXPECT_EQ(t.string(n1), "c\td");
  EXPECT_EQ(t.string(t.next(n1)), "A");
}

// A seeded generator of event-shaped JSON.
class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}

  std::string document() {
    std::string out;
    value(out, 0, /*root=*/true);
    return out;
  }

 private:
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool chance(int percent) { return pick(100) < static_cast<size_t>(percent); }

  void ws(std::string& out) {
    static const char* kWs[] = {"", "", "", " ", "\n", "\t", "\r\n ", "  "};
    out += kWs[pick(8)];
  }

  void key(std::string& out) {
    static const char* kKeys[] = {
        "usage", "choices", "delta", "message", "response", "status", "stop_reason", "finish_reason",
        "prompt_tokens", "input_tokens", "completion_tokens", "output_tokens", "cached_tokens",
        "prompt_tokens_details", "input_tokens_details", "cache_read_input_tokens",
        "cache_creation_input_tokens", "content", "reasoning_content", "reasoning", "tool_calls", "text",
        "thinking", "partial_json", "id", "model", "index", "logprobs", "type", "u\\u0073age",
        "finish\\u005freason", "\\u0063ontent", "",
    };
    out += '"';
    out += kKeys[pick(sizeof(kKeys) / sizeof(*kKeys))];
    out += '"';
  }

  void string(std::string& out) {
    static const char* kStrings[] = {
        "", "stop", "length", "tool_calls", "end_turn", "completed", "incomplete", "cancelled", "Hello",
        "a\\nb", "\\u00e9t\\u00e9", "\\ud83d\\ude00", "caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
        "\\\"q\\\"", "\\/\\b\\f\\r\\t", "\\u0000", "x\\u0041y", "0123456789abcdef0123456789abcdef-long-token",
        "a long string of plain ASCII that spans more than sixteen bytes with \\n an escape in it",
    };
    static const char* kInvalid[] = {"\\ud800", "\\udc00", "\\u12", "\\x", "\xc0\x80", "\xed\xa0\x80", "\x01"};
    out += '"';
    out += chance(3) ? kInvalid[pick(sizeof(kInvalid) / sizeof(*kInvalid))]
                     : kStrings[pick(sizeof(kStrings) / sizeof(*kStrings))];
    out += '"';
  }

  void number(std::string& out) {
    static const char* kNumbers[] = {
        "0", "1", "12", "1200", "1024", "-1", "-0", "12.0", "12.5", "1e2", "1.5e1", "-3.0", "0.0",
        "18446744073709551615", "9223372036854775807", "-9223372036854775808",
        "1e-400", "18446744073709551616.0", "1.8446744073709552e19", "4.9e-324", "2E+3", "7e-1",
    };
    static const char* kInvalid[] = {"18446744073709551616", "-9223372036854775809", "1e400", "01", "1.", "-"};
    out += chance(3) ? kInvalid[pick(sizeof(kInvalid) / sizeof(*kInvalid))]
                     : kNumbers[pick(sizeof(kNumbers) / sizeof(*kNumbers))];
  }

  void value(std::string& out, int depth, bool root = false) {
    ws(out);
    const size_t kind = root ? (chance(95) ? 0 : pick(6)) : pick(depth > 5 ? 4 : 9);
    switch (kind) {
      case 0:
      case 6:
      case 7: {  // object
        out += '{';
        const size_t n = root ? 2 + pick(6) : pick(5);
        for (size_t i = 0; i < n; ++i) {
          if (i) out += ',';
          ws(out);
          key(out);
          ws(out);
          out += ':';
          value(out, depth + 1);
        }
        ws(out);
        out += '}';
        break;
      }
      case 1:
        string(out);
        break;
      case 2:
        number(out);
        break;
      case 3: {
        static const char* kAtoms[] = {"null", "true", "false"};
        out += kAtoms[pick(3)];
        break;
      }
      default: {  // array
        out += '[';
        const size_t n = pick(4);
        for (size_t i = 0; i < n; ++i) {
          if (i) out += ',';
          value(out, depth + 1);
        }
        ws(out);
        out += ']';
        break;
      }
    }
    ws(out);
  }

  std::mt19937_64 rng_;
};

std::string mutate(std::string s, std::mt19937_64& rng) {
  if (s.empty()) return s;
  const size_t edits = 1 + rng() % 3;
  static const char kBytes[] = "{}[]:,\"\\ -0123456789eEu.tfn\x80\xc3\xff\x01";
  for (size_t i = 0; i < edits && !s.empty(); ++i) {
    const size_t at = rng() % s.size();
    switch (rng() % 3) {
      case 0:
        s[at] = kBytes[rng() % (sizeof(kBytes) - 1)];
        break;
      case 1:
        s.insert(at, 1, kBytes[rng() % (sizeof(kBytes) - 1)]);
        break;
      default:
        s.erase(at, 1);
        break;
    }
  }
  return s;
}

void expect_same_usage(const Usage& u, const Usage& ref, const std::string& doc) {
  EXPECT_EQ(u.prompt_tokens, ref.prompt_tokens) << doc;
  EXPECT_EQ(u.cached_tokens, ref.cached_tokens) << doc;
  EXPECT_EQ(u.completion_tokens, ref.completion_tokens) << doc;
  EXPECT_EQ(u.finish_reason, ref.finish_reason) << doc;
  EXPECT_EQ(u.generated, ref.generated) << doc;
}

// A JSON body, and the same document as an SSE event after one that carried a generated token
// (the reading of a stream's later events), both against the reference.
void expect_same_reading(const std::string& doc, size_t* accepted) {
  std::string line = doc;  // one SSE line: its line breaks (whitespace or not) become spaces
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  const bool line_has_json = line.find_first_not_of(" \t") != std::string::npos;
  for (Endpoint e : {Endpoint::kChat, Endpoint::kCompletions, Endpoint::kResponses, Endpoint::kMessages}) {
    for (size_t depth : {64u, 3u}) {
      UsageLimits limits;
      limits.max_json_depth = static_cast<uint32_t>(depth);
      limits.parse_every_event = true;
      {
        Usage ref;
        bool failed = false;
        oracle::usage_reference_event(doc, e, depth, ref, failed);
        UsageAccumulator acc(e, /*sse=*/false, limits);
        acc.feed(doc);
        acc.finish();
        ASSERT_EQ(acc.parse_failures(), failed ? 1u : 0u) << doc;
        if (!failed) {
          if (e == Endpoint::kChat && depth == 64) ++*accepted;
          expect_same_usage(acc.usage(), ref, doc);
        }
      }
      if (!line_has_json) continue;
      {
        Usage ref;
        ref.generated = true;
        bool failed = false;
        oracle::usage_reference_event(line, e, depth, ref, failed);
        UsageAccumulator acc(e, /*sse=*/true, limits);
        acc.feed("data: {\"delta\":{\"text\":\"x\"}}\n\ndata: " + line + "\n\n");
        acc.finish();
        ASSERT_EQ(acc.parse_failures(), failed ? 1u : 0u) << line;
        if (!failed) expect_same_usage(acc.usage(), ref, line);
      }
    }
  }
}

TEST(EventJson, NumbersAtTheEdgesAndLargeDocumentsReadAsTheReference) {
  size_t accepted = 0;
  for (const char* count : {"1e-310", "1e-400", "-0", "-0.0", "12.0", "1.8446744073709552e19", "18446744073709551615",
                            "4.9e-324", "1E2", "0.5"}) {
    expect_same_reading(std::string(R"({"choices":[{"finish_reason":"st\u006fp","delta":{"content":"x"}}],)") +
                            R"("usage":{"prompt_tokens":)" + count + R"(,"completion_tokens":)" + count +
                            R"(,"prompt_tokens_details":{"cached_tokens":)" + count + "}}}",
                        &accepted);
  }
  EXPECT_EQ(accepted, 10u);
  // More entries than the per-thread tape keeps (4096): it grows, then frees them; a small
  // document after it reads as before.
  std::string big = R"({"pad":[)";
  for (int i = 0; i < 20000; ++i) big += (i ? "," : "") + std::to_string(i);
  big += R"(],"s":")" + std::string(70000, 'a') + R"(\n","usage":{"prompt_tokens":7,"completion_tokens":3}})";
  expect_same_reading(big, &accepted);
  expect_same_reading(R"({"usage":{"prompt_tokens":1}})", &accepted);
  EXPECT_EQ(accepted, 12u);
}

// A double is read from the input when asked for; parse() decides only whether it is past
// DBL_MAX (refused, as simdjson refuses it), at once where it has no exponent and at most 308
// digits before the point. Each reads as strtod reads it (below the smallest subnormal: 0, signed),
// and usage reads the same counts from them as the reference.
TEST(EventJson, DoublesAreReadWhenAskedAndRefusedPastTheLargest) {
  const std::string zeros(400, '0');
  const std::string nines308(308, '9'), nines309(309, '9');
  const std::string one309 = "1" + std::string(308, '0');
  struct Case {
    std::string number;
    bool accepted;
  };
  const std::vector<Case> cases = {
      {"0.5", true},          {"-0.0", true},          {"12.0", true},
      {"0." + zeros + "1", true},  {"-0." + zeros + "1", true},  // below the smallest subnormal: 0
      {nines308 + ".5", true},    {"-" + nines308 + ".5", true}, {one309 + ".5", true},  // 1e308 < DBL_MAX
      {nines309 + ".5", false},   {"-" + nines309 + ".0", false}, {"1e309", false},
      {"2.5e-3", true},       {"1e-400", true},
  };
  Tape t;
  size_t accepted = 0;
  for (const Case& c : cases) {
    const std::string doc = "[" + c.number + "]";
    EXPECT_EQ(reference_parses(doc), c.accepted) << c.number.substr(0, 40);
    ASSERT_EQ(t.parse(doc, 64), c.accepted) << c.number.substr(0, 40);
    if (!c.accepted) continue;
    const auto e = Tape::first_element(Tape::root());
    ASSERT_EQ(t.kind(e), Kind::kDouble);
    const double want = std::strtod(c.number.c_str(), nullptr);
    EXPECT_EQ(t.double_value(e), want) << c.number.substr(0, 40);
    EXPECT_EQ(std::signbit(t.double_value(e)), std::signbit(want)) << c.number.substr(0, 40);
    expect_same_reading(R"({"usage":{"prompt_tokens":)" + c.number + R"(,"completion_tokens":2}})", &accepted);
  }
  EXPECT_EQ(accepted, 10u);
}

// Grants growth up to `limit` bytes in all; counts the asking.
struct Limit final : json_tape::Allowance {
  size_t limit;
  size_t asked = 0;
  explicit Limit(size_t l) : limit(l) {}
  bool allow(size_t needed, size_t bytes) override {
    EXPECT_LE(needed, bytes);
    asked = bytes;
    return bytes <= limit;
  }
};

TEST(EventJson, AnAllowanceStopsTheTapeWhereverItRefusesAndTheNextParseReadsAsBefore) {
  // Documents of 65..2,000 entries (the first 64 are never asked for): every shape of container
  // open or closing at the refusal, every limit from nothing to enough.
  std::vector<std::string> docs;
  std::string flat = "[";
  for (int i = 0; i < 300; ++i) flat += (i ? "," : "") + std::to_string(i);
  docs.push_back(flat + "]");
  std::string nested = R"({"a":[)";
  for (int i = 0; i < 200; ++i) nested += (i ? "," : "") + std::string(R"({"k":[1,{"x":"y\n"}],"e":[],"o":{}})");
  docs.push_back(nested + "]}");
  std::string deep;
  for (int i = 0; i < 30; ++i) deep += R"({"k":[)";
  for (int i = 0; i < 100; ++i) deep += "[1,2],";
  deep += "3";
  for (int i = 0; i < 30; ++i) deep += "]}";
  docs.push_back(deep);
  for (const std::string& doc : docs) {
    Tape whole;
    ASSERT_TRUE(whole.parse(doc, 64)) << doc.substr(0, 40);
    ASSERT_GT(whole.next(Tape::root()), 64u);
    ASSERT_FALSE(whole.refused());
    size_t refusals = 0;
    for (size_t limit = 0; limit < 8 * 1024 * Tape::kEntryBytes; limit = limit * 5 / 4 + Tape::kEntryBytes) {
      Tape t;
      Limit allowance(limit);
      const bool ok = t.parse(doc, 64, &allowance);
      EXPECT_EQ(ok, !t.refused());
      if (!ok) {
        ++refusals;
        EXPECT_GT(allowance.asked, limit);
      }
      // The same tape reads the document whole afterwards, and without an allowance.
      ASSERT_TRUE(t.parse(doc, 64)) << limit;
      EXPECT_FALSE(t.refused());
      EXPECT_EQ(t.next(Tape::root()), whole.next(Tape::root()));
      t.trim(0);
    }
    EXPECT_GT(refusals, 0u) << doc.substr(0, 40);
  }
}

TEST(EventJson, ReadsEveryDocumentAsTheSimdjsonReference) {
  std::mt19937_64 rng(20261206);
  size_t accepted = 0;
  size_t documents = 0;
  for (uint64_t seed = 0; seed < 4000; ++seed) {
    Gen gen(seed);
    const std::string doc = gen.document();
    expect_same_reading(doc, &accepted);
    expect_same_reading(mutate(doc, rng), &accepted);
    documents += 2;
    if (HasFailure()) return;
  }
  // The generator must produce both kinds: valid documents and refused ones.
  EXPECT_GT(accepted, documents / 4);
  EXPECT_LT(accepted, documents);
}

}  // namespace
}  // namespace ramjet::request
