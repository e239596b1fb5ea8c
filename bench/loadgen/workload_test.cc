#include "workload.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include <map>
#include <set>

namespace ramjet::bench {
namespace {

namespace json = boost::json;

SharedPrefixParams params(uint32_t apps, double kib, uint32_t turns) {
  SharedPrefixParams p;
  p.apps = apps;
  p.prefix_kib = kib;
  p.turns = turns;
  p.user_words = 16;
  p.max_tokens = MaxTokens({64}, 1);
  p.seed = 11;
  return p;
}

json::array messages(const WorkRequest& r) { return json::parse(r.messages).as_array(); }

TEST(SharedPrefix, EachAppHasItsOwnDeterministicSystemPromptOfTheRequestedSize) {
  SharedPrefixWorkload a(params(3, 2, 2)), b(params(3, 2, 2));
  std::set<std::string> prompts;
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a.system_prompt(i), b.system_prompt(i));
    std::string text(json::parse(a.system_prompt(i)).as_string());
    EXPECT_GE(text.size(), 2048u);
    EXPECT_LT(text.size(), 2048u + 8);
    prompts.insert(text);
  }
  EXPECT_EQ(prompts.size(), 3u);
}

TEST(SharedPrefix, SessionsAreSpreadOverAppsRoundRobin) {
  SharedPrefixWorkload w(params(4, 0.5, 3));
  w.begin_step(8);
  std::map<std::string, int> per_system;
  for (int i = 0; i < 8; ++i) {
    auto r = w.next();
    ASSERT_TRUE(r);
    per_system[json::serialize(messages(*r)[0])]++;
  }
  ASSERT_EQ(per_system.size(), 4u);
  for (const auto& [k, n] : per_system) EXPECT_EQ(n, 2);
}

TEST(SharedPrefix, EveryTurnExtendsThePreviousPromptWithTheAnswerAndANewUserMessage) {
  SharedPrefixWorkload w(params(2, 1, 3));
  w.begin_step(1);
  auto t1 = w.next();
  ASSERT_TRUE(t1);
  EXPECT_TRUE(t1->wants_answer);
  auto m1 = messages(*t1);
  ASSERT_EQ(m1.size(), 2u);
  EXPECT_EQ(m1[0].at("role"), "system");
  EXPECT_EQ(m1[1].at("role"), "user");
  w.complete(*t1, true, "Answer \"one\"\n");
  auto t2 = w.next();
  ASSERT_TRUE(t2);
  EXPECT_EQ(t2->session, t1->session);
  EXPECT_EQ(t2->turn, 1u);
  auto m2 = messages(*t2);
  ASSERT_EQ(m2.size(), 4u);
  EXPECT_EQ(m2[2].at("role"), "assistant");
  EXPECT_EQ(m2[2].at("content"), "Answer \"one\"\n");
  // the JSON text of turn 1 (without its closing bracket) is a prefix of turn 2's
  std::string prefix = t1->messages.substr(0, t1->messages.size() - 1);
  EXPECT_EQ(t2->messages.substr(0, prefix.size()), prefix);
  w.complete(*t2, true, "two");
  auto t3 = w.next();
  ASSERT_TRUE(t3);
  EXPECT_FALSE(t3->wants_answer);  // last turn
  w.complete(*t3, true, "");
  auto t4 = w.next();  // the conversation ended: a fresh session takes its place
  ASSERT_TRUE(t4);
  EXPECT_NE(t4->session, t1->session);
  EXPECT_EQ(t4->turn, 0u);
  EXPECT_EQ(messages(*t4).size(), 2u);
}

TEST(SharedPrefix, AFailedTurnEndsTheConversation) {
  SharedPrefixWorkload w(params(1, 0.1, 5));
  w.begin_step(1);
  auto t1 = w.next();
  w.complete(*t1, false, "");
  auto t2 = w.next();
  EXPECT_NE(t2->session, t1->session);
  EXPECT_EQ(t2->turn, 0u);
}

TEST(SharedPrefix, SameSeedSameSessionSameAnswersGiveIdenticalRequests) {
  SharedPrefixWorkload a(params(2, 0.5, 3)), b(params(2, 0.5, 3));
  a.begin_step(2);
  b.begin_step(2);
  for (int i = 0; i < 6; ++i) {
    auto x = a.next(), y = b.next();
    EXPECT_EQ(x->messages, y->messages);
    EXPECT_EQ(x->max_tokens, y->max_tokens);
    a.complete(*x, true, "ans" + std::to_string(i));
    b.complete(*y, true, "ans" + std::to_string(i));
  }
}

TEST(SharedPrefix, OpenLoopCreatesSessionsOnDemandAndUserMessagesDiffer) {
  SharedPrefixWorkload w(params(2, 0.1, 2));
  w.begin_step(0);
  EXPECT_EQ(w.live_sessions(), 0u);
  auto a = w.next(), b = w.next();
  EXPECT_EQ(w.live_sessions(), 2u);
  EXPECT_NE(a->session, b->session);
  EXPECT_NE(w.user_message(0, 0), w.user_message(1, 0));
  EXPECT_NE(w.user_message(0, 0), w.user_message(0, 1));
}

TEST(MaxTokens, FixedValueOrDeterministicPickFromTheList) {
  MaxTokens fixed({128}, 1);
  EXPECT_EQ(fixed.pick(5), 128u);
  MaxTokens mixed({128, 1024}, 3), same({128, 1024}, 3);
  std::map<uint32_t, int> counts;
  for (uint64_t k = 0; k < 10000; ++k) {
    EXPECT_EQ(mixed.pick(k), same.pick(k));
    counts[mixed.pick(k)]++;
  }
  EXPECT_NEAR(counts[128], 5000, 300);
  EXPECT_NEAR(counts[1024], 5000, 300);
  EXPECT_EQ(mixed.describe(), "128,1024");
  EXPECT_EQ(MaxTokens().pick(1), 0u);
}

TEST(Unique, PromptsDifferPerRequestAndAreReproducible) {
  UniqueWorkload a(0.5, MaxTokens({16}, 1), 9), b(0.5, MaxTokens({16}, 1), 9);
  auto r0 = a.next(), r1 = a.next();
  EXPECT_NE(r0->messages, r1->messages);
  EXPECT_EQ(b.at(1).messages, r1->messages);
  std::string text(messages(*r0)[0].at("content").as_string());
  EXPECT_GE(text.size(), 512u);
  EXPECT_EQ(r0->max_tokens, 16u);
}

TEST(ChatBody, IsValidJsonWithStreamOptionsMaxTokensAndIgnoreEos) {
  WorkRequest r;
  r.messages = single_user_messages("hi \"there\"");
  r.max_tokens = 32;
  auto v = json::parse(chat_body("\"m\"", r, true, true)).as_object();
  EXPECT_EQ(v.at("model"), "m");
  EXPECT_EQ(v.at("max_tokens"), 32);
  EXPECT_EQ(v.at("stream"), true);
  EXPECT_EQ(v.at("stream_options").at("include_usage"), true);
  EXPECT_EQ(v.at("ignore_eos"), true);
  EXPECT_EQ(v.at("messages").at(0).at("content"), "hi \"there\"");
  auto n = json::parse(chat_body("\"m\"", r, false, false)).as_object();
  EXPECT_FALSE(n.contains("stream"));
  EXPECT_FALSE(n.contains("ignore_eos"));
}

std::vector<TraceEntry> trace_entries() {
  return {
      {0, 1000, 7, {1, 2}},     // 512 + 488 tokens
      {250, 1100, 9, {1, 2, 3}},  // shares block 1 and the first 488 tokens of block 2
      {1000, 600, 0, {4}},       // 512 from block 4 + 88 unique
  };
}

size_t words(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), ' ')); }

TEST(Trace, PromptsFollowHashIdsSoSharedBlocksGiveSharedPrefixes) {
  TraceParams p;
  p.block_tokens = 512;
  p.seed = 4;
  TraceWorkload w(trace_entries(), p, "t");
  std::string a = w.prompt_text(0), b = w.prompt_text(1), c = w.prompt_text(2);
  EXPECT_EQ(words(a), 1000u);
  EXPECT_EQ(words(b), 1100u);
  EXPECT_EQ(words(c), 600u);
  EXPECT_EQ(b.substr(0, a.size()), a);  // the cut block 2 is a prefix of the full block 2
  EXPECT_NE(c.substr(0, 40), a.substr(0, 40));
  TraceWorkload again(trace_entries(), p, "t");
  EXPECT_EQ(again.prompt_text(2), c);
}

TEST(Trace, ArrivalsAreScaledTimestampsAndMaxTokensIsTheOutputLength) {
  TraceParams p;
  p.time_scale = 0.5;
  TraceWorkload w(trace_entries(), p, "t");
  EXPECT_DOUBLE_EQ(w.at(0).arrival_s, 0);
  EXPECT_DOUBLE_EQ(w.at(1).arrival_s, 0.125);
  EXPECT_DOUBLE_EQ(w.at(2).arrival_s, 0.5);
  EXPECT_EQ(w.at(0).max_tokens, 7u);
  EXPECT_EQ(w.at(2).max_tokens, 1u);  // output_length 0 still asks for one token
  w.begin_step(0);
  EXPECT_TRUE(w.next());
  EXPECT_TRUE(w.next());
  EXPECT_TRUE(w.next());
  EXPECT_FALSE(w.next());
  p.override_max_tokens = true;
  p.max_tokens = MaxTokens({99}, 1);
  TraceWorkload o(trace_entries(), p, "t");
  EXPECT_EQ(o.at(0).max_tokens, 99u);
}

}  // namespace
}  // namespace ramjet::bench
