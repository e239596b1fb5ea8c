// render::SessionCache gives exactly Tokenizer::encode's ids: on every chat golden grown turn by
// turn, on generated texts around added tokens with every flag (rstrip, lstrip, single_word,
// normalized, tokens that extend or straddle others), under its byte and entry limits, and from
// several threads. Tokenizer::Cut, the rule it relies on, is checked on its own first.
#include "render/prompt/session_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/json.hpp>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "render/template/chat_template.h"
#include "render/tokenize/tokenizer.h"

namespace ramjet::render {
namespace {

const std::string kData = RAMJET_TESTDATA_DIR;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using Ids = std::vector<uint32_t>;

std::shared_ptr<const Tokenizer> load(const std::string& json,
                                      std::optional<std::string> override_json = std::nullopt) {
  auto t = override_json ? Tokenizer::from_json(json, {}, std::string_view(*override_json))
                         : Tokenizer::from_json(json);
  EXPECT_TRUE(t) << (t ? "" : t.error().message);
  return t ? *t : nullptr;
}

const std::shared_ptr<const Tokenizer>& qwen3() {
  static const auto t = load(slurp(kData + "/models/qwen3/tokenizer.json"));
  return t;
}

const std::shared_ptr<const Tokenizer>& deepseek() {
  static const auto t = load(slurp(kData + "/models/deepseek-v3/tokenizer.json"),
                             slurp(kData + "/models/deepseek-v3.1/added_tokens_override.json"));
  return t;
}

// Qwen3 plus added tokens with every flag the added-token pass knows. "<A>B" extends "<A>" and
// "x<A>B" starts before it; "ZQXEND" ends with a word character, so the single_word "tokzqx"
// right after it is rejected in a whole text but accepted at the start of one. (Contents that
// are not in the vocabulary, so that a token and its BPE encoding differ.)
const std::shared_ptr<const Tokenizer>& flags() {
  static const auto t = load(slurp(kData + "/models/qwen3/tokenizer.json"), R"({"added_tokens":[
    {"id":151669,"content":"<R>","single_word":false,"lstrip":false,"rstrip":true,"normalized":false,"special":true},
    {"id":151670,"content":"<L>","single_word":false,"lstrip":true,"rstrip":false,"normalized":false,"special":true},
    {"id":151671,"content":"<A>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
    {"id":151672,"content":"<A>B","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
    {"id":151673,"content":"x<A>B","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
    {"id":151674,"content":"ZQXEND","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":false},
    {"id":151675,"content":"tokzqx","single_word":true,"lstrip":false,"rstrip":false,"normalized":false,"special":false},
    {"id":151676,"content":"<N>","single_word":false,"lstrip":false,"rstrip":false,"normalized":true,"special":false},
    {"id":151677,"content":"<LR>","single_word":false,"lstrip":true,"rstrip":true,"normalized":false,"special":true}]})");
  return t;
}

Ids full(const Tokenizer& tok, std::string_view text, bool add_special_tokens = false) {
  auto r = tok.encode(text, add_special_tokens);
  EXPECT_TRUE(r) << (r ? "" : r.error().message);
  return r ? *r : Ids{};
}

Ids cached(SessionCache& cache, const Tokenizer& tok, std::string_view text,
           bool add_special_tokens = false) {
  Ids out;
  auto e = cache.encode(tok, text, out, add_special_tokens);
  EXPECT_FALSE(e) << (e ? e->message : "");
  return out;
}

std::vector<Tokenizer::Cut> cuts_of(const Tokenizer& tok, std::string_view text) {
  std::vector<Tokenizer::Cut> cuts;
  EXPECT_FALSE(tok.find_cuts(text, cuts));
  return cuts;
}

std::vector<size_t> bytes_of(const std::vector<Tokenizer::Cut>& cuts) {
  std::vector<size_t> out;
  for (const auto& c : cuts) out.push_back(c.byte);
  return out;
}

Ids concat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Every cut of `text` splits its encoding, with the ids count encode_with_cuts reports; and
// find_cuts and encode_with_cuts agree. Returns the number of cuts.
size_t check_cuts(const Tokenizer& tok, std::string_view text) {
  const Ids whole = full(tok, text);
  Ids ids;
  std::vector<Tokenizer::Cut> with_ids;
  EXPECT_FALSE(tok.encode_with_cuts(text, ids, with_ids));
  EXPECT_EQ(ids, whole);
  const auto cuts = cuts_of(tok, text);
  EXPECT_EQ(bytes_of(cuts), bytes_of(with_ids));
  for (const auto& c : with_ids) {
    const Ids before = full(tok, text.substr(0, c.byte));
    EXPECT_EQ(before.size(), c.ids) << "cut at " << c.byte;
    EXPECT_EQ(concat(before, full(tok, text.substr(c.byte))), whole) << "cut at " << c.byte;
  }
  return with_ids.size();
}

// ---------------------------------------------------------------------------------------------
// The cut rule.

// Pieces of generated texts: added tokens with every flag, pieces of them, words, whitespace,
// CJK, emoji and combining marks.
const std::vector<std::string>& fragments() {
  static const std::vector<std::string> frags = {"<|im_start|>",
                                          "<|im_end|>",
                                          "<think>",
                                          "</think>",
                                          "<tool_call>",
                                          "<R>",
                                          "<L>",
                                          "<LR>",
                                          "<A>",
                                          "<A>B",
                                          "x<A>B",
                                          "x",
                                          "B",
                                          "ZQXEND",
                                          "tokzqx",
                                          "<N>",
                                          " ",
                                          "  ",
                                          "\n",
                                          "\n\n",
                                          "\t",
                                          "hello",
                                          "wor",
                                          "ld",
                                          "'s",
                                          "123",
                                          "你好",
                                          "世界",
                                          "😀",
                                          "👍🏽",
                                          "e\xcc\x81",
                                          "é",
                                          ".",
                                          "<",
                                          "|",
                                          ">",
                                          "im_end",
                                          "user",
                                          "\xe3\x80\x80"};
  return frags;
}

TEST(TokenizerCut, FallsRightAfterEachSpecialTokenOfAChatRendering) {
  const std::string text =
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nok<|im_end|>";
  const auto cuts = cuts_of(*qwen3(), text);
  std::vector<size_t> want;
  for (const char* tok : {"<|im_start|>", "<|im_end|>", "<think>", "</think>"}) {
    for (size_t p = text.find(tok); p != std::string::npos; p = text.find(tok, p + 1)) {
      want.push_back(p + std::strlen(tok));
    }
  }
  std::sort(want.begin(), want.end());
  EXPECT_EQ(bytes_of(cuts), want);
  EXPECT_EQ(check_cuts(*qwen3(), text), want.size());
}

TEST(TokenizerCut, NoneAfterRstripOrSingleWordTokensOrBeforeARejectedSingleWordMatch) {
  const Tokenizer& t = *flags();
  // rstrip absorbs the whitespace after it: split there, the suffix would encode " x".
  EXPECT_EQ(bytes_of(cuts_of(t, "a<R>   x")), std::vector<size_t>{});
  EXPECT_NE(concat(full(t, "a<R>"), full(t, "   x")), full(t, "a<R>   x"));
  EXPECT_EQ(bytes_of(cuts_of(t, "a<LR>  b")), std::vector<size_t>{});
  // lstrip only looks back, and never past the previous token: the cut after <|im_end|> holds.
  EXPECT_EQ(bytes_of(cuts_of(t, "a<|im_end|>  <L>b")), (std::vector<size_t>{11, 16}));
  // The single_word "tokzqx" after "ZQXEND" is rejected in the whole text, accepted alone.
  EXPECT_EQ(bytes_of(cuts_of(t, "ZQXENDtokzqx more")), std::vector<size_t>{});
  EXPECT_NE(concat(full(t, "ZQXEND"), full(t, "tokzqx more")), full(t, "ZQXENDtokzqx more"));
  EXPECT_EQ(bytes_of(cuts_of(t, "ZQXEND tokzqx more")), std::vector<size_t>{6});
  // A normalized token is cut out after the raw pass: no cut after it.
  EXPECT_EQ(bytes_of(cuts_of(t, "a<N>b")), std::vector<size_t>{});
  for (const char* s :
       {"a<R>   x", "a<LR>  b", "a<|im_end|>  <L>b", "ZQXENDtokzqx more", "ZQXEND tokzqx more",
        "a<N>b", "<A>B<A>x<A>B<A>", "tokzqx<|im_end|>tokzqx"}) {
    check_cuts(t, s);
  }
}

TEST(TokenizerCut, OfAPrefixNeedNotBeOneOfTheLongerText) {
  const Tokenizer& t = *flags();
  // "zz<A>" cuts after <A>; in "zz<A>Bq" the longer <A>B is matched instead.
  EXPECT_EQ(bytes_of(cuts_of(t, "zz<A>")), std::vector<size_t>{5});
  EXPECT_EQ(bytes_of(cuts_of(t, "zz<A>Bq")), std::vector<size_t>{6});
  EXPECT_NE(concat(full(t, "zz<A>"), full(t, "Bq")), full(t, "zz<A>Bq"));
  // "x<A>B" starts before the <A> of "zzx<A>" and ends after it.
  EXPECT_EQ(bytes_of(cuts_of(t, "zzx<A>")), std::vector<size_t>{6});
  EXPECT_EQ(bytes_of(cuts_of(t, "zzx<A>B")), std::vector<size_t>{7});
  EXPECT_NE(concat(full(t, "zzx<A>"), full(t, "B")), full(t, "zzx<A>B"));
}

// Tokenizer::cut_reach: a cut c of a text is a cut of any text with the same first c + reach
// bytes, with the same ids before it (render::TurnCache reuses cuts without a scan on this).
TEST(TokenizerCut, StaysACutOfEveryTextSharingItsFirstCutPlusReachBytes) {
  const std::vector<std::string>& frags = fragments();
  for (const auto* tokp : {&flags(), &qwen3()}) {
    const Tokenizer& t = **tokp;
    EXPECT_GE(t.cut_reach(), 12u + 4u);  // "<|im_start|>" is 12 bytes
    std::mt19937 rng(11);
    auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
    size_t checked = 0, near_edge = 0;
    for (int round = 0; round < 3000; ++round) {
      std::string a;
      for (size_t i = 0, n = 4 + pick(28); i < n; ++i) a += frags[pick(frags.size())];
      size_t x = pick(a.size() + 1);
      while (x < a.size() && (static_cast<unsigned char>(a[x]) & 0xC0) == 0x80) ++x;
      std::string b = a.substr(0, x);
      for (size_t i = 0, n = pick(6); i < n; ++i) b += frags[pick(frags.size())];
      Ids ids_a, ids_b;
      std::vector<Tokenizer::Cut> cuts_a, cuts_b;
      ASSERT_FALSE(t.encode_with_cuts(a, ids_a, cuts_a));
      ASSERT_FALSE(t.encode_with_cuts(b, ids_b, cuts_b));
      for (const Tokenizer::Cut& c : cuts_a) {
        if (c.byte + t.cut_reach() > x) continue;
        const bool found = std::any_of(cuts_b.begin(), cuts_b.end(), [&](const Tokenizer::Cut& d) {
          return d.byte == c.byte && d.ids == c.ids;
        });
        ASSERT_TRUE(found) << "cut " << c.byte << " of a text lost in one sharing " << x << " bytes";
        ASSERT_TRUE(std::equal(ids_a.begin(), ids_a.begin() + static_cast<ptrdiff_t>(c.ids), ids_b.begin()));
        ++checked;
        if (c.byte + t.cut_reach() + 4 > x) ++near_edge;
      }
    }
    EXPECT_GT(checked, 1000u) << near_edge;
    EXPECT_GT(near_edge, 20u);
  }
}

TEST(TokenizerCut, ErrorsAndSpecialIdsMatchEncode) {
  std::vector<Tokenizer::Cut> cuts;
  const auto bad = qwen3()->find_cuts("ok\xff", cuts);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->code, TokenizerErrc::kBadInput);
  Ids before, after;
  EXPECT_FALSE(qwen3()->special_ids_around(before, after));
  EXPECT_TRUE(before.empty() && after.empty());
  EXPECT_NE(qwen3()->serial(), deepseek()->serial());
}

// ---------------------------------------------------------------------------------------------
// Goldens grown turn by turn.

SpecialTokens specials_for(const std::string& family) {
  const std::string cfg = family.rfind("deepseek", 0) == 0
                              ? kData + "/models/deepseek-v3/tokenizer_config.json"
                              : kData + "/models/qwen3/tokenizer_config.json";
  auto st = special_tokens_from_config(slurp(cfg));
  EXPECT_TRUE(st.ok());
  return st.ok() ? st.value() : SpecialTokens{};
}

struct Grown {
  size_t texts = 0, render_failures = 0, cuts = 0;
};

// Renders every prefix of each golden's message list (and the whole list), encodes each with
// `cache` and with a full encode.
Grown grow_goldens(const std::string& file, const Tokenizer& tok, SessionCache& cache) {
  Grown g;
  std::ifstream in(kData + "/goldens/" + file);
  EXPECT_TRUE(in) << file;
  std::string line;
  std::map<std::string, ChatTemplate> templates;
  jinja::RenderOptions opt;
  opt.now = [] { return int64_t{1767225600}; };
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto golden = boost::json::parse(line).as_object();
    const std::string id(golden.at("id").as_string());
    const std::string tpl_path(golden.at("template").as_string());
    auto [it, fresh] = templates.try_emplace(tpl_path);
    if (fresh) {
      auto parsed = ChatTemplate::parse(slurp(kData + "/models/" + tpl_path));
      EXPECT_TRUE(parsed.ok()) << tpl_path;
      if (!parsed.ok()) return g;
      it->second = parsed.value();
    }
    const SpecialTokens special = specials_for(std::string(golden.at("family").as_string()));
    const auto& request = golden.at("request").as_object();
    const auto& messages = request.at("messages").as_array();
    for (size_t k = 1; k <= messages.size(); ++k) {
      boost::json::object req = request;
      req["messages"] =
          boost::json::array(messages.begin(), messages.begin() + static_cast<ptrdiff_t>(k));
      auto text = render(it->second, boost::json::serialize(req), special, {}, opt);
      if (!text.ok()) {  // e.g. Qwen3 raises on a conversation with no user message yet
        ++g.render_failures;
        continue;
      }
      EXPECT_EQ(cached(cache, tok, text.value()), full(tok, text.value())) << id << " turn " << k;
      if (k == messages.size()) g.cuts += check_cuts(tok, text.value());
      ++g.texts;
    }
  }
  return g;
}

TEST(SessionCache, Qwen3GoldensGrownTurnByTurnEncodeAsAWhole) {
  SessionCache cache;
  const Grown g = grow_goldens("qwen3.jsonl", *qwen3(), cache);
  const auto st = cache.stats();
  std::printf(
      "qwen3: %zu texts (%zu prefixes did not render), %zu cuts checked; %llu hits, "
      "%llu misses, %llu bytes reused, %llu encoded\n",
      g.texts, g.render_failures, g.cuts, static_cast<unsigned long long>(st.hits),
      static_cast<unsigned long long>(st.misses), static_cast<unsigned long long>(st.reused_bytes),
      static_cast<unsigned long long>(st.encoded_bytes));
  EXPECT_GE(g.texts, 40u);
  EXPECT_GT(g.cuts, 100u);
  EXPECT_EQ(st.hits + st.misses, g.texts);
  EXPECT_GT(st.hits, g.texts / 2);  // the system prompts and earlier turns are shared
  EXPECT_GT(st.reused_bytes, st.encoded_bytes);
  EXPECT_EQ(st.not_stored, 0u);
  EXPECT_EQ(st.mismatches, 0u);
  EXPECT_EQ(st.inconsistent, 0u);
}

TEST(SessionCache, DeepSeekV31GoldensGrownTurnByTurnEncodeAsAWhole) {
  SessionCache cache;
  const Grown g = grow_goldens("deepseek-v3.1.jsonl", *deepseek(), cache);
  const auto st = cache.stats();
  std::printf("deepseek-v3.1: %zu texts, %zu cuts checked; %llu hits, %llu misses\n", g.texts,
              g.cuts, static_cast<unsigned long long>(st.hits),
              static_cast<unsigned long long>(st.misses));
  EXPECT_GE(g.texts, 40u);
  EXPECT_GT(g.cuts, 25u);  // after <｜begin▁of▁sentence｜> and each <｜end▁of▁sentence｜>
  EXPECT_EQ(st.hits + st.misses, g.texts);
  EXPECT_GT(st.hits, 0u);
  EXPECT_EQ(st.not_stored, 0u);
  EXPECT_EQ(st.mismatches, 0u);
  EXPECT_EQ(st.inconsistent, 0u);
}

// ---------------------------------------------------------------------------------------------
// Adversarial texts.

TEST(SessionCache, SuffixTextThatWouldMergeWithThePreviousWordIsNotSplitOff) {
  const Tokenizer& t = *qwen3();
  SessionCache cache;
  // No cut inside "hello world": the second text shares 13 bytes with the first but must be
  // encoded whole from the cut after <|im_start|>.
  const std::string a = "<|im_start|>user\nhello wor";
  const std::string b = "<|im_start|>user\nhello world and more";
  EXPECT_EQ(cached(cache, t, a), full(t, a));
  EXPECT_EQ(cached(cache, t, b), full(t, b));
  EXPECT_NE(concat(full(t, a), full(t, "ld and more")), full(t, b));
  EXPECT_EQ(cache.stats().reused_bytes, 12u);
  // After a special token the next word starts afresh: "ing" after <|im_end|>.
  const std::string c = "<|im_start|>user\nhello world and more<|im_end|>ing  \n\n";
  EXPECT_EQ(cached(cache, t, c), full(t, c));
  const std::string d = c + "<|im_start|>  \n ing<|im_end|>";
  EXPECT_EQ(cached(cache, t, d), full(t, d));
  EXPECT_EQ(cache.stats().reused_bytes, 12u + 12u + c.find("ing"));
}

TEST(SessionCache, CachedEntryThatIsABytePrefixButNotACutOfTheNewTextIsNotUsedThere) {
  const Tokenizer& t = *flags();
  SessionCache cache;
  // "zz<A>" is stored cut after <A>; "zz<A>Bq" completes the longer <A>B.
  EXPECT_EQ(cached(cache, t, "zz<A>"), full(t, "zz<A>"));
  EXPECT_EQ(cached(cache, t, "zz<A>Bq"), full(t, "zz<A>Bq"));
  // "x<A>B" begins before the cached cut.
  EXPECT_EQ(cached(cache, t, "zzx<A>"), full(t, "zzx<A>"));
  EXPECT_EQ(cached(cache, t, "zzx<A>B"), full(t, "zzx<A>B"));
  // "ZQXEND" then single_word "tokzqx": no cut between them.
  EXPECT_EQ(cached(cache, t, "<|im_end|>ZQXEND"), full(t, "<|im_end|>ZQXEND"));
  EXPECT_EQ(cached(cache, t, "<|im_end|>ZQXENDtokzqx more"),
            full(t, "<|im_end|>ZQXENDtokzqx more"));
  // rstrip token: the whitespace that follows later belongs to it.
  EXPECT_EQ(cached(cache, t, "q<|im_end|>a<R>"), full(t, "q<|im_end|>a<R>"));
  EXPECT_EQ(cached(cache, t, "q<|im_end|>a<R>  \n x"), full(t, "q<|im_end|>a<R>  \n x"));
  const auto st = cache.stats();
  EXPECT_EQ(st.reused_bytes, 0u + 0u + 0u + 0u + 0u + 10u + 0u + 11u);
  EXPECT_EQ(st.mismatches, 0u);
  EXPECT_EQ(st.inconsistent, 0u);
}

TEST(SessionCache, WhitespaceCjkAndEmojiAroundSpecialTokens) {
  const Tokenizer& t = *flags();
  SessionCache cache;
  std::string text = "<|im_start|>system\n  \n\t";
  for (const char* part :
       {"<|im_end|>   \n\n  <|im_start|>user\n你好，世界<|im_end|>",
        "😀👍🏽 e\xcc\x81t\xc3\xa9<|im_end|>",
        "\n\n\n<|im_start|>  assistant 中文<think>  </think>\r\n", " <L> 🚀  <LR>  x<R>\n",
        "<|im_end|><|im_end|>", "  \xe3\x80\x80<tool_call>\n{\"a\": 1}</tool_call>  "}) {
    text += part;
    EXPECT_EQ(cached(cache, t, text), full(t, text)) << text;
    check_cuts(t, text);
  }
  EXPECT_GT(cache.stats().hits, 3u);
}

// Texts drawn from fragments around every kind of added token, grown, cut back and regrown;
// every encode through the cache must equal a full one.
TEST(SessionCache, GeneratedSessionsEncodeAsAWhole) {
  const std::vector<std::string>& frags = fragments();
  for (const auto* tokp : {&flags(), &qwen3()}) {
    const Tokenizer& t = **tokp;
    SessionCache cache({64, 1u << 20});
    std::mt19937 rng(7);
    auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
    size_t texts = 0;
    for (int session = 0; session < 60; ++session) {
      std::string text;
      for (int turn = 0; turn < 12; ++turn) {
        if (turn > 0 && pick(4) == 0) text.resize(pick(text.size() + 1));  // cut back
        while (text.size() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80)
          text.pop_back();
        if (!text.empty() && (static_cast<unsigned char>(text.back()) & 0x80)) text.pop_back();
        const size_t n = 1 + pick(12);
        for (size_t i = 0; i < n; ++i) text += frags[pick(frags.size())];
        ASSERT_EQ(cached(cache, t, text), full(t, text))
            << "session " << session << " turn " << turn;
        ++texts;
      }
    }
    const auto st = cache.stats();
    EXPECT_EQ(st.hits + st.misses, texts);
    EXPECT_GT(st.hits, texts / 2);
    EXPECT_EQ(st.not_stored, 0u);
    EXPECT_EQ(st.mismatches, 0u);
    EXPECT_EQ(st.inconsistent, 0u);
  }
}

TEST(SessionCache, AddSpecialTokensAndErrorsMatchEncode) {
  // Qwen3 with a TemplateProcessing post-processor: <|endoftext|> before, <|im_end|> after.
  std::string json = slurp(kData + "/models/qwen3/tokenizer.json");
  const size_t at = json.find("\"post_processor\"");
  ASSERT_NE(at, std::string::npos);
  const size_t end = json.find('}', at);
  json.replace(at, end + 1 - at, R"("post_processor":{"type":"TemplateProcessing",
      "single":[{"SpecialToken":{"id":"B","type_id":0}},{"Sequence":{"id":"A","type_id":0}},
                {"SpecialToken":{"id":"E","type_id":0}}],
      "pair":[],"special_tokens":{"B":{"id":"B","ids":[151643],"tokens":["B"]},
                                   "E":{"id":"E","ids":[151645],"tokens":["E"]}}})");
  const auto t = load(json);
  ASSERT_TRUE(t);
  SessionCache cache;
  const std::string a = "<|im_start|>user\nhi<|im_end|>\n";
  const std::string b = a + "<|im_start|>assistant\n";
  for (const auto& s : {a, b, b}) {
    EXPECT_EQ(cached(cache, *t, s, true), full(*t, s, true));
    EXPECT_EQ(cached(cache, *t, s, false), full(*t, s, false));
  }
  EXPECT_EQ(full(*t, "x", true).front(), 151643u);
  EXPECT_GE(cache.stats().hits, 4u);

  Ids out = {1, 2};
  const auto e = cache.encode(*t, b + "\xc3", out);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, TokenizerErrc::kBadInput);
  EXPECT_EQ(out, (Ids{1, 2}));
  // Appends, like encode_into.
  EXPECT_FALSE(cache.encode(*t, b, out));
  EXPECT_EQ(out, concat({1, 2}, full(*t, b)));
}

TEST(SessionCache, EntriesAreKeptPerTokenizer) {
  SessionCache cache;
  const std::string text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>";
  EXPECT_EQ(cached(cache, *qwen3(), text), full(*qwen3(), text));
  EXPECT_EQ(cached(cache, *flags(), text + "x<A>B"), full(*flags(), text + "x<A>B"));
  EXPECT_EQ(cache.stats().hits, 0u);
  EXPECT_EQ(cache.stats().entries, 2u);
}

// ---------------------------------------------------------------------------------------------
// Limits.

std::string session_text(int session, int turns) {
  std::string s = "<|im_start|>system\nsession " + std::to_string(session) + "<|im_end|>\n";
  for (int i = 0; i < turns; ++i) {
    s += "<|im_start|>user\nturn " + std::to_string(i) + " of " + std::to_string(session) +
         "<|im_end|>\n<|im_start|>assistant\nanswer " + std::to_string(i) + "<|im_end|>\n";
  }
  return s;
}

// The bytes a text's entry is accounted for: the text up to its last cut.
size_t entry_size(const Tokenizer& t, std::string_view text) {
  Ids ids;
  std::vector<Tokenizer::Cut> cuts;
  EXPECT_FALSE(t.encode_with_cuts(text, ids, cuts));
  return cuts.empty() ? 0
                      : SessionCache::entry_bytes(cuts.back().byte, cuts.back().ids, cuts.size());
}

TEST(SessionCache, AGrowingSessionReplacesItsOwnEntry) {
  const Tokenizer& t = *qwen3();
  SessionCache cache;
  for (int turn = 1; turn <= 5; ++turn) {
    EXPECT_EQ(cached(cache, t, session_text(0, turn)), full(t, session_text(0, turn)));
  }
  const auto st = cache.stats();
  EXPECT_EQ(st.entries, 1u);
  EXPECT_EQ(st.replaced, 4u);
  EXPECT_EQ(st.hits, 4u);
  EXPECT_EQ(st.evictions, 0u);
  EXPECT_EQ(st.bytes, entry_size(t, session_text(0, 5)));
  // Each follow-up reused everything up to the last <|im_start|> of the turn before: all but
  // the "\n" after the last <|im_end|>.
  size_t reused = 0;
  for (int turn = 1; turn < 5; ++turn) reused += session_text(0, turn).size() - 1;
  EXPECT_EQ(st.reused_bytes, reused);
}

TEST(SessionCache, EvictsTheLeastRecentlyUsedEntryBeyondMaxEntries) {
  const Tokenizer& t = *qwen3();
  SessionCache cache({2, 1u << 30});
  auto reused_by = [&](const std::string& text) {
    const uint64_t before = cache.stats().reused_bytes;
    EXPECT_EQ(cached(cache, t, text), full(t, text));
    return cache.stats().reused_bytes - before;
  };
  // Sessions share only their first cut (after the first <|im_start|>, 12 bytes).
  EXPECT_EQ(reused_by(session_text(0, 2)), 0u);
  EXPECT_EQ(reused_by(session_text(1, 2)), 12u);
  EXPECT_EQ(reused_by(session_text(0, 2)), session_text(0, 2).size() - 1);  // 0 most recent
  EXPECT_EQ(reused_by(session_text(2, 2)), 12u);                            // evicts 1
  auto st = cache.stats();
  EXPECT_EQ(st.entries, 2u);
  EXPECT_EQ(st.evictions, 1u);
  EXPECT_EQ(reused_by(session_text(0, 3)), session_text(0, 2).size() - 1);
  EXPECT_EQ(reused_by(session_text(1, 3)), 12u);  // 1 was evicted
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_EQ(cache.stats().evictions, 2u);
}

TEST(SessionCache, EvictsBeyondMaxBytesAndSkipsEntriesLargerThanTheLimit) {
  const Tokenizer& t = *qwen3();
  const std::string a = session_text(0, 4), b = session_text(1, 4), c = session_text(2, 4);
  const size_t sa = entry_size(t, a), sb = entry_size(t, b), sc = entry_size(t, c);
  SessionCache cache({100, sa + sb + sc - 1});
  cached(cache, t, a);
  cached(cache, t, b);
  EXPECT_EQ(cache.stats().bytes, sa + sb);
  cached(cache, t, c);
  auto st = cache.stats();
  EXPECT_EQ(st.entries, 2u);
  EXPECT_EQ(st.evictions, 1u);
  EXPECT_EQ(st.bytes, sb + sc);
  EXPECT_EQ(cached(cache, t, a), full(t, a));  // a was the one evicted: only 12 bytes reused
  EXPECT_EQ(cache.stats().reused_bytes, 12u + 12u + 12u);

  SessionCache small({100, sa - 1});
  EXPECT_EQ(cached(small, t, a), full(t, a));
  EXPECT_EQ(small.stats().entries, 0u);
  EXPECT_EQ(small.stats().not_stored, 1u);
  EXPECT_EQ(small.stats().bytes, 0u);

  SessionCache none({0, 1u << 30});
  EXPECT_EQ(cached(none, t, a), full(t, a));
  EXPECT_EQ(none.stats().entries, 0u);
  cache.clear();
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().bytes, 0u);
  EXPECT_EQ(cached(cache, t, c), full(t, c));
  EXPECT_EQ(cache.stats().entries, 1u);
}

// ---------------------------------------------------------------------------------------------
// Threads.

TEST(SessionCache, ThreadsSharingACacheGetTheSameIdsAsAFullEncode) {
  const Tokenizer& t = *flags();
  std::vector<std::string> texts;
  std::vector<Ids> want;
  for (int s = 0; s < 6; ++s) {
    for (int turn = 1; turn <= 8; ++turn) {
      texts.push_back(session_text(s % 3, turn) + (s >= 3 ? "<A>B 😀 <R> x" : "ZQXEND tokzqx"));
      want.push_back(full(t, texts.back()));
    }
  }
  SessionCache cache({8, 1u << 20});  // small: entries are evicted while others read them
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t k = (i * 7 + static_cast<size_t>(th * 11 + round)) % texts.size();
          Ids out;
          if (cache.encode(t, texts[k], out) || out != want[k]) ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  const auto st = cache.stats();
  EXPECT_EQ(st.hits + st.misses, 4u * 20u * texts.size());
  EXPECT_GT(st.hits, 0u);
  EXPECT_LE(st.entries, 8u);
  EXPECT_EQ(st.mismatches, 0u);
  EXPECT_EQ(st.inconsistent, 0u);
}

}  // namespace
}  // namespace ramjet::render
