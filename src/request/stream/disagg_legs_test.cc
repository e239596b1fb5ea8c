#include "request/stream/disagg_legs.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "request/stream/owned_body.h"

namespace ramjet::request {
namespace {

namespace json = boost::json;

// The body a leg sends for `client`, parsed.
json::object leg(std::string_view client, BodyEdit edit, std::string members, bool priority = false) {
  const OwnedMembers f = find_owned_members(client, owned_names(edit, priority), 128);
  if (!members.empty() && f.members_left) members.push_back(',');
  std::string out;
  edited_body(client, f, members, [&](std::string_view p) { out.append(p); });
  EXPECT_EQ(out.size(), edited_body_size(client, f, members));
  return json::parse(out).as_object();
}

TEST(DisaggLegs, ThePrefillLegAsksForRemoteDecodeOfOneTokenNotStreamed) {
  const std::string client =
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},)"
      R"("max_tokens":300,"max_completion_tokens":200,"min_tokens":5,"temperature":0.5,)"
      R"("kv_transfer_params":{"remote_host":"evil","remote_port":1}})";
  const json::object o = leg(client, BodyEdit::kPrefillLeg, prefill_leg_members(Endpoint::kChat, std::nullopt));
  EXPECT_EQ(o.at("kv_transfer_params"), json::parse(R"({"do_remote_decode":true,"do_remote_prefill":false,)"
                                                     R"("remote_engine_id":null,"remote_block_ids":null,)"
                                                     R"("remote_host":null,"remote_port":null})"));
  EXPECT_EQ(o.at("stream"), json::value(false));
  EXPECT_EQ(o.at("max_tokens"), json::value(1));
  EXPECT_EQ(o.at("max_completion_tokens"), json::value(1));
  EXPECT_FALSE(o.contains("stream_options"));
  EXPECT_FALSE(o.contains("min_tokens"));
  EXPECT_EQ(o.at("temperature"), json::value(0.5));
  EXPECT_EQ(o.at("messages"), json::parse(client).as_object().at("messages"));
  EXPECT_EQ(o.size(), 7u);  // model, messages, temperature + ramjet's four
}

TEST(DisaggLegs, EachApiNamesItsOneToken) {
  const json::object r = leg(R"({"model":"m","input":"x","max_output_tokens":99})", BodyEdit::kPrefillLeg,
                             prefill_leg_members(Endpoint::kResponses, std::nullopt));
  EXPECT_EQ(r.at("max_output_tokens"), json::value(1));
  EXPECT_FALSE(r.contains("max_tokens"));
  const json::object c = leg(R"({"model":"m","prompt":"x"})", BodyEdit::kPrefillLeg,
                             prefill_leg_members(Endpoint::kCompletions, std::nullopt));
  EXPECT_EQ(c.at("max_tokens"), json::value(1));
  EXPECT_FALSE(c.contains("max_completion_tokens"));
  const json::object m = leg(R"({"model":"m","messages":[],"max_tokens":64})", BodyEdit::kPrefillLeg,
                             prefill_leg_members(Endpoint::kMessages, std::nullopt));
  EXPECT_EQ(m.at("max_tokens"), json::value(1));
}

TEST(DisaggLegs, TheClientsPriorityStaysUnlessRamjetWritesItsOwn) {
  const std::string client = R"({"model":"m","prompt":"x","priority":-10})";
  EXPECT_EQ(leg(client, BodyEdit::kPrefillLeg, prefill_leg_members(Endpoint::kCompletions, std::nullopt)).at("priority"),
            json::value(-10));
  EXPECT_EQ(leg(client, BodyEdit::kPrefillLeg, prefill_leg_members(Endpoint::kCompletions, 1), true).at("priority"),
            json::value(1));
  EXPECT_EQ(leg(client, BodyEdit::kDecodeLeg, decode_leg_members("", std::nullopt)).at("priority"), json::value(-10));
  EXPECT_EQ(leg(client, BodyEdit::kDecodeLeg, decode_leg_members("", 0), true).at("priority"), json::value(0));
}

TEST(DisaggLegs, TheDecodeLegCarriesThePrefillAnswersParametersAndNeverTheClients) {
  const std::string client = R"({"kv_transfer_params":{"remote_host":"evil"},"model":"m","prompt":"x","stream":true})";
  const json::object d = leg(client, BodyEdit::kDecodeLeg, decode_leg_members(R"({"remote_host":"p","remote_port":5600})", std::nullopt));
  EXPECT_EQ(d.at("kv_transfer_params"), json::parse(R"({"remote_host":"p","remote_port":5600})"));
  EXPECT_EQ(d.at("stream"), json::value(true));
  // Served whole: the client's parameters are left out, nothing is put in.
  const json::object w = leg(client, BodyEdit::kDecodeLeg, decode_leg_members("", std::nullopt));
  EXPECT_FALSE(w.contains("kv_transfer_params"));
  EXPECT_EQ(w.size(), 3u);
  // A body of ramjet's members alone.
  EXPECT_EQ(leg(R"({"kv_transfer_params":1})", BodyEdit::kDecodeLeg, decode_leg_members("{}", std::nullopt)).size(), 1u);
}

TEST(DisaggLegs, TheTransferParametersOfAPrefillAnswer) {
  const std::string answer =
      R"({"id":"cmpl-1","choices":[{"text":"a"}],"usage":{"prompt_tokens":170},"kv_transfer_params":)"
      R"({"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[1,2,3]],"remote_engine_id":"e",)"
      R"("remote_host":"127.0.0.1","remote_port":5611,"remote_prefill_cached_tokens":160}})";
  const TransferParams p = transfer_params(answer);
  ASSERT_EQ(p.error, ParamsError::kNone);
  EXPECT_EQ(json::parse(p.json), json::parse(answer).as_object().at("kv_transfer_params"));
  EXPECT_EQ(p.cached_tokens, 160u);
}

TEST(DisaggLegs, AnAnswerWithoutUsableParametersSaysWhy) {
  EXPECT_EQ(transfer_params("not json").error, ParamsError::kNotJson);
  EXPECT_EQ(transfer_params("[1]").error, ParamsError::kNotJson);
  EXPECT_EQ(transfer_params(R"({"id":1})").error, ParamsError::kMissing);
  EXPECT_EQ(transfer_params(R"({"kv_transfer_params":null})").error, ParamsError::kMissing);
  EXPECT_EQ(transfer_params(R"({"kv_transfer_params":"x"})").error, ParamsError::kNotObject);
  EXPECT_EQ(transfer_params(R"({"kv_transfer_params":{"do_remote_prefill":false}})").error, ParamsError::kNotRemote);
  EXPECT_EQ(transfer_params(R"({"kv_transfer_params":{}})").error, ParamsError::kNotRemote);
  std::string big = R"({"kv_transfer_params":{"do_remote_prefill":true,"x":")" + std::string(70000, 'a') + "\"}}";
  EXPECT_EQ(transfer_params(big).error, ParamsError::kTooLarge);
  EXPECT_EQ(transfer_params(std::string(kMaxPrefillAnswerBytes + 1, ' ')).error, ParamsError::kTooLarge);
  std::string deep = R"({"kv_transfer_params":{"do_remote_prefill":true,"x":)" + std::string(100, '[') +
                     std::string(100, ']') + "}}";
  EXPECT_EQ(transfer_params(deep).error, ParamsError::kNotJson);
}

}  // namespace
}  // namespace ramjet::request
