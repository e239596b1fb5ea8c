// render::Tokenizer: the goldens of test/data/testdata (tokenizer and chat lines with token
// ids), HF semantics on small hand-made tokenizers, limits and typed errors.
#include "render/tokenize/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <simdjson.h>
#include <utf8proc.h>

namespace ramjet::render {
namespace {

namespace fs = std::filesystem;

const fs::path kTestdata = RAMJET_TESTDATA_DIR;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Loaded once per process: the two tokenizers of the goldens (plus V3.1's added tokens).
std::shared_ptr<const Tokenizer> load(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const Tokenizer>> cache;
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  TokResult<std::shared_ptr<const Tokenizer>> r =
      name == "qwen3"         ? Tokenizer::from_file(kTestdata / "models/qwen3/tokenizer.json")
      : name == "deepseek-v3" ? Tokenizer::from_file(kTestdata / "models/deepseek-v3/tokenizer.json")
                              : Tokenizer::from_file(
                                    kTestdata / "models/deepseek-v3/tokenizer.json", {},
                                    kTestdata / "models/deepseek-v3.1/added_tokens_override.json");
  if (!r) {
    ADD_FAILURE() << name << ": " << r.error().message;
    return nullptr;
  }
  cache[name] = *r;
  return *r;
}

std::string nfc(std::string_view s) {
  utf8proc_uint8_t* p = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &p,
                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::string out(reinterpret_cast<const char*>(p), n < 0 ? 0 : static_cast<size_t>(n));
  std::free(p);
  return out;
}

// Which tokenizer a golden line names.
std::string tokenizer_of(std::string_view field) {
  if (field.rfind("qwen3/", 0) == 0) return "qwen3";
  if (field.find("added_tokens_override") != std::string_view::npos) return "deepseek-v3.1";
  if (field.rfind("deepseek-v3/", 0) == 0) return "deepseek-v3";
  return "";
}

struct GoldenCount {
  size_t lines = 0, checked = 0, passed = 0;
};

// Encodes `text_key` of every line with token_ids and compares.
GoldenCount check_golden(const std::string& file, const std::string& text_key) {
  GoldenCount count;
  const fs::path path = kTestdata / "goldens" / file;
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::string line;
  simdjson::dom::parser parser;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++count.lines;
    simdjson::dom::element doc;
    EXPECT_EQ(parser.parse(line).get(doc), simdjson::SUCCESS);
    std::string_view id, tokenizer, text;
    EXPECT_EQ(doc["id"].get_string().get(id), simdjson::SUCCESS);
    simdjson::dom::array ids;
    if (doc["token_ids"].get_array().get(ids) != simdjson::SUCCESS) continue;  // null: no vocab
    EXPECT_EQ(doc["tokenizer"].get_string().get(tokenizer), simdjson::SUCCESS) << id;
    EXPECT_EQ(doc[text_key].get_string().get(text), simdjson::SUCCESS) << id;
    bool add_special = false;
    if (doc["add_special_tokens"].get_bool().get(add_special) != simdjson::SUCCESS) {
      add_special = false;
    }
    const std::string name = tokenizer_of(tokenizer);
    EXPECT_FALSE(name.empty()) << id << ": unknown tokenizer " << tokenizer;
    auto tok = load(name);
    if (!tok) continue;
    std::vector<uint32_t> want;
    for (const auto v : ids) want.push_back(static_cast<uint32_t>(uint64_t(v)));
    ++count.checked;
    auto got = tok->encode(text, add_special);
    EXPECT_TRUE(got) << id;
    if (!got) continue;
    if (*got == want) {
      ++count.passed;
      // Decoding gives the normalized text (Qwen's normalizer is NFC).
      EXPECT_EQ(tok->decode(*got), name == "qwen3" ? nfc(text) : std::string(text))
          << id << ": decode does not round-trip";
      continue;
    }
    size_t k = 0;
    while (k < got->size() && k < want.size() && (*got)[k] == want[k]) ++k;
    ADD_FAILURE() << id << ": first difference at token " << k << " of " << want.size()
                  << " (got " << (k < got->size() ? std::to_string((*got)[k]) : "end")
                  << ", want " << (k < want.size() ? std::to_string(want[k]) : "end") << ")";
  }
  std::printf("%s: %zu lines, %zu with token ids, %zu pass\n", file.c_str(), count.lines,
              count.checked, count.passed);
  return count;
}

class Goldens : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kTestdata / "goldens")) GTEST_SKIP() << "no " << kTestdata;
  }
};

TEST_F(Goldens, EveryQwen3TokenizeLineEncodesToItsIds) {
  const auto c = check_golden("qwen3-tokenize.jsonl", "text");
  EXPECT_EQ(c.passed, c.lines);
  EXPECT_GT(c.lines, 100u);
}

TEST_F(Goldens, EveryDeepSeekV3TokenizeLineEncodesToItsIds) {
  const auto c = check_golden("deepseek-v3-tokenize.jsonl", "text");
  EXPECT_EQ(c.passed, c.lines);
  EXPECT_GT(c.lines, 100u);
}

TEST_F(Goldens, EveryLlamaCppQwen2VocabLineEncodesToItsIds) {
  const auto c = check_golden("qwen2-llamacpp-vocab-test.jsonl", "text");
  EXPECT_EQ(c.passed, c.lines);
  EXPECT_EQ(c.lines, 47u);
}

TEST_F(Goldens, EveryRenderedChatLineWithIdsEncodesToThem) {
  for (const char* file : {"qwen3.jsonl", "qwen3.6.jsonl", "deepseek-v3.1.jsonl",
                           "deepseek-v3.2.jsonl"}) {
    const auto c = check_golden(file, "rendered");
    EXPECT_EQ(c.passed, c.checked) << file;
    if (std::string(file) != "qwen3.6.jsonl") {
      EXPECT_EQ(c.checked, c.lines) << file;
    }
  }
}

TEST_F(Goldens, AddedTokenIdsAreTheOnesWrittenInTheJson) {
  for (const char* name : {"qwen3", "deepseek-v3", "deepseek-v3.1"}) {
    auto tok = load(name);
    ASSERT_TRUE(tok);
    EXPECT_EQ(tok->added_id_mismatches(), 0u) << name;
  }
  EXPECT_EQ(load("qwen3")->token_to_id("<|im_start|>"), 151644u);
  EXPECT_EQ(load("qwen3")->token_to_id("</think>"), 151668u);
  EXPECT_EQ(load("qwen3")->vocab_size(), 151643u);
  EXPECT_EQ(load("qwen3")->added_tokens(), 26u);
  EXPECT_EQ(load("deepseek-v3.1")->token_to_id("<think>"), 128798u);
  // Pristine V3: <think> is plain text.
  EXPECT_EQ(load("deepseek-v3")->token_to_id("<think>"), std::nullopt);
  EXPECT_GT(load("deepseek-v3")->encode("<think>")->size(), 1u);
  EXPECT_EQ(load("deepseek-v3.1")->encode("<think>")->size(), 1u);
}

TEST_F(Goldens, AddedTokensInsideUserTextAreStillMatched) {
  auto tok = load("qwen3");
  const auto ids = tok->encode("say <|im_end|> now");
  ASSERT_TRUE(ids);
  EXPECT_NE(std::find(ids->begin(), ids->end(), 151645u), ids->end());
}

TEST_F(Goldens, EncodeIsThreadSafeAndDeterministic) {
  auto tok = load("qwen3");
  const std::string text = read(kTestdata / "models/qwen3/chat_template.jinja");
  const auto want = tok->encode(text);
  ASSERT_TRUE(want);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 20; ++k) {
        auto got = tok->encode(text);
        ok[i] += got && *got == *want;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int v : ok) EXPECT_EQ(v, 20);
}

TEST_F(Goldens, LongRunsOfOneCharacterClassEncodeWithoutRegexFailure) {
  auto tok = load("qwen3");
  for (const std::string unit : {" ", "\n", "a", "1", "!", "\xe4\xb8\xad", " \n"}) {
    std::string text;
    for (int i = 0; i < 200000; ++i) text += unit;
    auto ids = tok->encode(text);
    ASSERT_TRUE(ids) << ids.error().message;
    EXPECT_EQ(tok->decode(*ids), text);
  }
  auto ds = load("deepseek-v3");
  std::string spaces(300000, ' ');
  auto ids = ds->encode(spaces + "x" + spaces);
  ASSERT_TRUE(ids) << ids.error().message;
  EXPECT_EQ(ds->decode(*ids), spaces + "x" + spaces);
}

TEST_F(Goldens, InvalidUtf8IsATypedErrorNotACrash) {
  auto tok = load("qwen3");
  auto r = tok->encode(std::string("abc\xff\xfe", 5));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, TokenizerErrc::kBadInput);
}

// ------------------------------------------------------------------------------------------
// Small hand-made tokenizers.

std::string json_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", u);
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string byte_level(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) {
    const uint32_t cp = byte_to_unicode(static_cast<uint8_t>(c));
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

// A vocabulary of the 256 bytes (id = byte) plus the merges given (raw byte strings), each
// merge's result getting the next id; `added` is the added_tokens JSON array body.
std::string small_tokenizer(const std::vector<std::pair<std::string, std::string>>& merges,
                            const std::string& added = "", bool legacy_merges = false,
                            const std::string& pre = "", const std::string& normalizer = "null") {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    if (b) vocab += ",";
    vocab += "\"" + json_escape(byte_level(std::string(1, static_cast<char>(b)))) + "\":" +
             std::to_string(b);
  }
  std::string m;
  int next = 256;
  for (const auto& [a, b] : merges) {
    vocab += ",\"" + json_escape(byte_level(a + b)) + "\":" + std::to_string(next++);
    if (!m.empty()) m += ",";
    m += legacy_merges ? "\"" + json_escape(byte_level(a)) + " " + json_escape(byte_level(b)) + "\""
                       : "[\"" + json_escape(byte_level(a)) + "\",\"" +
                             json_escape(byte_level(b)) + "\"]";
  }
  const std::string pre_tok =
      pre.empty() ? R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":true})" : pre;
  return R"({"version":"1.0","added_tokens":[)" + added + R"(],"normalizer":)" + normalizer +
         R"(,"pre_tokenizer":)" + pre_tok +
         R"(,"post_processor":null,"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{)" +
         vocab + R"(},"merges":[)" + m + "]}}";
}

std::vector<uint32_t> enc(const std::shared_ptr<const Tokenizer>& t, std::string_view s) {
  auto r = t->encode(s);
  EXPECT_TRUE(r) << (r ? "" : r.error().message);
  return r ? *r : std::vector<uint32_t>{};
}

TEST(Tokenizer, MergesApplyLowestRankFirstAndLeftmostAmongEqualRanks) {
  // "aaa": (a,a) merges the first pair, leaving "aa a".
  auto t = Tokenizer::from_json(small_tokenizer({{"a", "a"}, {"b", "c"}, {"ab", "c"}, {"a", "b"}}));
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(enc(*t, "aaa"), (std::vector<uint32_t>{256, 'a'}));
  // "abc": (b,c) has a lower rank than (a,b), so a + bc; (ab,c) never applies.
  EXPECT_EQ(enc(*t, "abc"), (std::vector<uint32_t>{'a', 257}));
}

TEST(Tokenizer, WordCachesOfTokenizersSharingAThreadStaySeparate) {
  // Same word, different merges: each tokenizer keeps its own answer however calls interleave,
  // also when more tokenizers than cache slots take turns.
  std::vector<std::shared_ptr<const Tokenizer>> toks;
  toks.push_back(*Tokenizer::from_json(small_tokenizer({{"a", "b"}})));
  toks.push_back(*Tokenizer::from_json(small_tokenizer({{"b", "c"}})));
  for (int i = 0; i < 5; ++i) toks.push_back(*Tokenizer::from_json(small_tokenizer({})));
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(enc(toks[0], "abc"), (std::vector<uint32_t>{256, 'c'}));
    EXPECT_EQ(enc(toks[1], "abc"), (std::vector<uint32_t>{'a', 256}));
    for (size_t k = 2; k < toks.size(); ++k) {
      EXPECT_EQ(enc(toks[k], "abc"), (std::vector<uint32_t>{'a', 'b', 'c'}));
    }
  }
  // A tokenizer loaded after another was destroyed never sees the old one's cache.
  toks[0].reset();
  auto fresh = *Tokenizer::from_json(small_tokenizer({{"c", "a"}}));
  EXPECT_EQ(enc(fresh, "abca"), (std::vector<uint32_t>{'a', 'b', 256}));
}

TEST(Tokenizer, LegacyStringMergesAndPairMergesEncodeTheSame) {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {" ", "t"}, {"h", "e"}, {" t", "he"}, {"1", "2"}};
  auto pairs = Tokenizer::from_json(small_tokenizer(merges));
  auto legacy = Tokenizer::from_json(small_tokenizer(merges, "", true));
  ASSERT_TRUE(pairs && legacy);
  for (const char* s : {"the the  12 123", " the\n\nthe", ""}) {
    EXPECT_EQ(enc(*pairs, s), enc(*legacy, s)) << s;
  }
  EXPECT_EQ(enc(*pairs, " the"), (std::vector<uint32_t>{258}));
}

TEST(Tokenizer, AddedTokensFollowLstripRstripAndSingleWord) {
  const std::string added =
      R"({"id":300,"content":"XY","single_word":false,"lstrip":true,"rstrip":true,"normalized":false,"special":false},)"
      R"({"id":301,"content":"qqz","single_word":true,"lstrip":false,"rstrip":false,"normalized":false,"special":false})";
  auto t = Tokenizer::from_json(small_tokenizer({}, added));
  ASSERT_TRUE(t) << t.error().message;
  // Ids are assigned as HF does: vocab size (256), then the next free ones.
  EXPECT_EQ((*t)->token_to_id("XY"), 256u);
  EXPECT_EQ((*t)->token_to_id("qqz"), 257u);
  EXPECT_EQ((*t)->added_id_mismatches(), 2u);
  // lstrip/rstrip swallow the surrounding whitespace into the added token.
  EXPECT_EQ(enc(*t, "a  XY  b"), (std::vector<uint32_t>{'a', 256, 'b'}));
  // single_word: only where neither neighbour is a word character (\w: letters, digits, _).
  EXPECT_EQ(enc(*t, ".qqz."), (std::vector<uint32_t>{'.', 257, '.'}));
  EXPECT_EQ(enc(*t, "xqqz").size(), 4u);
  EXPECT_EQ(enc(*t, "qqz_").size(), 4u);
  EXPECT_EQ(enc(*t, "\xc3\xa9qqz").size(), 5u);  // é is a word character
}

TEST(Tokenizer, LongestAddedTokenWinsAtTheSamePosition) {
  const std::string added =
      R"({"id":300,"content":"<a>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},)"
      R"({"id":301,"content":"<a><b>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true})";
  auto t = Tokenizer::from_json(small_tokenizer({}, added));
  ASSERT_TRUE(t);
  EXPECT_EQ(enc(*t, "<a><b><a>"), (std::vector<uint32_t>{257, 256}));
  EXPECT_EQ((*t)->decode({257, 'x', 256}), "<a><b>x<a>");
  EXPECT_EQ((*t)->decode({257, 'x', 256}, true), "x");
}

TEST(Tokenizer, ByteLevelAddPrefixSpaceAppliesToEveryPiece) {
  const std::string pre =
      R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":","},"behavior":"Isolated","invert":false},)"
      R"({"type":"ByteLevel","add_prefix_space":true,"use_regex":false}]})";
  auto t = Tokenizer::from_json(small_tokenizer({}, "", false, pre));
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(enc(*t, "a,b"), (std::vector<uint32_t>{' ', 'a', ' ', ',', ' ', 'b'}));
}

TEST(Tokenizer, SplitBehavioursCutAsHfDoes) {
  auto with = [](const char* behavior, bool invert) {
    const std::string pre =
        std::string(R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"String":"-"},"behavior":")") +
        behavior + R"(","invert":)" + (invert ? "true" : "false") +
        R"(},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]})";
    // One merge per adjacent pair so a word's ids show how it was cut.
    auto t = Tokenizer::from_json(small_tokenizer({{"a", "-"}, {"-", "b"}, {"a", "b"}}, "", false, pre));
    EXPECT_TRUE(t) << t.error().message;
    return enc(*t, "a-b");
  };
  EXPECT_EQ(with("Isolated", false), (std::vector<uint32_t>{'a', '-', 'b'}));
  EXPECT_EQ(with("Removed", false), (std::vector<uint32_t>{'a', 'b'}));
  EXPECT_EQ(with("Removed", true), (std::vector<uint32_t>{'-'}));
  EXPECT_EQ(with("MergedWithPrevious", false), (std::vector<uint32_t>{256, 'b'}));
  EXPECT_EQ(with("MergedWithNext", false), (std::vector<uint32_t>{'a', 257}));
  EXPECT_EQ(with("Contiguous", false), (std::vector<uint32_t>{'a', '-', 'b'}));
}

TEST(Tokenizer, NfcNormalizerComposesBeforeBpe) {
  auto t = Tokenizer::from_json(
      small_tokenizer({{"\xc3", "\xa9"}}, "", false, "", R"({"type":"NFC"})"));
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(enc(*t, "e\xcc\x81"), (std::vector<uint32_t>{256}));  // e + U+0301 -> é
}

TEST(Tokenizer, ByteMapIsTheGpt2Alphabet) {
  EXPECT_EQ(byte_to_unicode('!'), 0x21u);
  EXPECT_EQ(byte_to_unicode(' '), 0x120u);   // Ġ
  EXPECT_EQ(byte_to_unicode('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(byte_to_unicode(0xAD), 0x143u);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(unicode_to_byte(byte_to_unicode(static_cast<uint8_t>(b))), b);
  }
  EXPECT_EQ(unicode_to_byte(0x20), std::nullopt);
}

TEST(Tokenizer, BadDocumentsAreTypedErrors) {
  struct Case {
    std::string json;
    TokenizerErrc code;
  };
  const std::vector<Case> cases = {
      {"", TokenizerErrc::kBadJson},
      {"[1,2]", TokenizerErrc::kBadJson},
      {R"({"version":"2.0"})", TokenizerErrc::kUnsupported},
      {R"({"pre_tokenizer":{"type":"ByteLevel"}})", TokenizerErrc::kMissing},
      {R"({"pre_tokenizer":{"type":"Metaspace"}})", TokenizerErrc::kUnsupported},
      {R"({"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(?<!"},"behavior":"Isolated"}})",
       TokenizerErrc::kBadRegex},
      {R"({"normalizer":{"type":"Lowercase"},"pre_tokenizer":{"type":"ByteLevel"}})",
       TokenizerErrc::kUnsupported},
      {R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"WordPiece"}})",
       TokenizerErrc::kUnsupported},
      {R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"vocab":{"a":0},"merges":["a b"]}})",
       TokenizerErrc::kBadVocab},
      {R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"vocab":{"a":-1},"merges":[]}})",
       TokenizerErrc::kBadVocab},
      {R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"vocab":{"a":99999999},"merges":[]}})",
       TokenizerErrc::kTooLarge},
      {R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"vocab":{"a":0},"merges":["a  a"]}})",
       TokenizerErrc::kBadVocab},
  };
  for (const auto& c : cases) {
    auto t = Tokenizer::from_json(c.json);
    ASSERT_FALSE(t) << c.json;
    EXPECT_EQ(t.error().code, c.code) << c.json << ": " << t.error().message;
  }
  EXPECT_EQ(Tokenizer::from_file("/nonexistent/tokenizer.json").error().code, TokenizerErrc::kIo);
}

TEST(Tokenizer, LimitsBoundFileVocabMergesAndInput) {
  const std::string json = small_tokenizer({{"a", "b"}, {"c", "d"}});
  TokenizerLimits lim;
  lim.max_file_bytes = 100;
  EXPECT_EQ(Tokenizer::from_json(json, lim).error().code, TokenizerErrc::kTooLarge);
  lim = {};
  lim.max_vocab = 200;
  EXPECT_EQ(Tokenizer::from_json(json, lim).error().code, TokenizerErrc::kTooLarge);
  lim = {};
  lim.max_merges = 1;
  EXPECT_EQ(Tokenizer::from_json(json, lim).error().code, TokenizerErrc::kTooLarge);
  lim = {};
  lim.max_input_bytes = 4;
  auto t = Tokenizer::from_json(json, lim);
  ASSERT_TRUE(t);
  EXPECT_TRUE((*t)->encode("abcd"));
  EXPECT_EQ((*t)->encode("abcde").error().code, TokenizerErrc::kTooLarge);
}

}  // namespace
}  // namespace ramjet::render

namespace ramjet::render {
namespace {

// The NFC normalizer runs on the non-ASCII runs only (with the ASCII base before each): the ids
// equal those of the whole-text NFC form, wherever the marks sit.
TEST(Normalizer, NfcOfNonAsciiRunsEqualsNfcOfTheWholeText) {
  auto tok = load("qwen3");
  ASSERT_TRUE(tok);
  const std::string cases[] = {
      "Cafe\xcc\x81 and n\xcc\x83o",                        // e + U+0301, n + U+0303 after ASCII
      "\xcc\x81leading mark",                               // a mark with no base
      "o\xcc\x88\xcc\x81 x \xe1\x84\x80\xe1\x85\xa1 y",     // two marks; Hangul jamo L + V
      "plain ascii only",
      "\xe4\xb8\xad\xe6\x96\x87 mixed e\xcc\x81\xcc\xa3 end\xcc\x81",  // reordering (ccc 230 vs 220)
  };
  for (const std::string& text : cases) {
    auto got = tok->encode(text);
    auto want = tok->encode(nfc(text));
    ASSERT_TRUE(got.ok() && want.ok());
    EXPECT_EQ(*got, *want) << text;
  }
}

}  // namespace
}  // namespace ramjet::render
