// sim/server/kv_transfer and the --kv-* flags: kv_transfer_params read as vLLM 0.32's
// NixlConnector reads them, the producer's answer in vLLM's shape, and the flags' checks.
#include "sim/server/kv_transfer.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <regex>

#include "sim/server/options.h"

namespace ramjet::sim {
namespace {

namespace json = boost::json;

Result<KvParams, AgentError> parse(std::string_view text) {
  const json::value v = json::parse(text);
  return parse_kv_params(&v);
}

TEST(KvParams, AbsentNullOrEmptyParamsAskForNothing) {
  EXPECT_EQ(parse_kv_params(nullptr).value().kind, KvTransfer::kNone);
  EXPECT_EQ(parse("null").value().kind, KvTransfer::kNone);
  EXPECT_EQ(parse("{}").value().kind, KvTransfer::kNone);
  EXPECT_EQ(parse(R"({"do_remote_decode": false, "do_remote_prefill": 0})").value().kind, KvTransfer::kNone);
}

TEST(KvParams, TheProxysPrefillLegAsksForARemoteDecodeWhateverItsNullFields) {
  auto p = parse(R"({"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null,
                     "remote_block_ids": null, "remote_host": null, "remote_port": null})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p.value().kind, KvTransfer::kRemoteDecode);
}

TEST(KvParams, ADecodeLegCarriesTheProducersAnswerBack) {
  auto p = parse(R"({"do_remote_prefill": true, "do_remote_decode": false, "remote_block_ids": [[6, 7, 8]],
                     "remote_engine_id": "e-1", "remote_request_id": "cmpl-x-0-0123abcd", "remote_host": "10.0.0.2",
                     "remote_port": 5600, "tp_size": 1, "remote_num_tokens": 40, "remote_prefill_cached_tokens": 32})");
  ASSERT_TRUE(p);
  const KvParams& k = p.value();
  EXPECT_EQ(k.kind, KvTransfer::kRemotePrefill);
  EXPECT_EQ(k.remote.engine_id, "e-1");
  EXPECT_EQ(k.remote.request_id, "cmpl-x-0-0123abcd");
  EXPECT_EQ(k.remote.host, "10.0.0.2");
  EXPECT_EQ(k.remote.port, 5600);
  EXPECT_EQ(k.remote.block_ids, (std::vector<uint32_t>{6, 7, 8}));
  EXPECT_EQ(k.remote.cached_tokens, 32);
  // An older flat block list is read too; a cached count that is not an int is not reported.
  auto flat = parse(R"({"do_remote_prefill": true, "remote_block_ids": [1, 2], "remote_engine_id": "e",
                        "remote_request_id": "r", "remote_host": "h", "remote_port": 1,
                        "remote_prefill_cached_tokens": true})");
  ASSERT_TRUE(flat);
  EXPECT_EQ(flat.value().remote.block_ids, (std::vector<uint32_t>{1, 2}));
  EXPECT_FALSE(flat.value().remote.cached_tokens.has_value());
}

TEST(KvParams, ADecodeLegWithoutWhereToPullFromIsA400NamingTheField) {
  const char* base = R"("do_remote_prefill": true, "remote_engine_id": "e", "remote_request_id": "r",
                        "remote_host": "h", "remote_port": 9, "remote_block_ids": [[1]])";
  ASSERT_TRUE(parse(std::string("{") + base + "}"));
  for (const char* field : {"remote_engine_id", "remote_request_id", "remote_host", "remote_port", "remote_block_ids"}) {
    json::object o = json::parse(std::string("{") + base + "}").as_object();
    o.erase(field);
    const json::value v = o;
    auto p = parse_kv_params(&v);
    ASSERT_FALSE(p) << field;
    EXPECT_EQ(p.error().status, 400u);
    EXPECT_EQ(p.error().type, "BadRequestError");
    EXPECT_EQ(p.error().param, "kv_transfer_params");
    EXPECT_NE(p.error().message.find(field), std::string::npos) << p.error().message;
  }
  EXPECT_FALSE(parse(R"({"do_remote_prefill": true, "remote_engine_id": "e", "remote_request_id": "r",
                          "remote_host": "h", "remote_port": 70000, "remote_block_ids": [[1]]})"));
  EXPECT_FALSE(parse(R"({"do_remote_prefill": true, "remote_engine_id": "e", "remote_request_id": "r",
                          "remote_host": "h", "remote_port": 9, "remote_block_ids": [[-1]]})"));
  EXPECT_FALSE(parse(R"({"do_remote_prefill": true, "do_remote_decode": true})"));
}

TEST(KvParams, TheProducersAnswerHasVllmsKeysInVllmsOrder) {
  const json::object o = producer_params(ProducerAnswer{{1, 2, 3}, "e-1", "cmpl-a-0-00000000", "localhost", 5600, 40, 32});
  std::vector<std::string> keys;
  for (const auto& kv : o) keys.emplace_back(kv.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"do_remote_prefill", "do_remote_decode", "remote_block_ids",
                                            "remote_engine_id", "remote_request_id", "remote_host", "remote_port",
                                            "tp_size", "dcp_size", "pp_size", "remote_num_tokens",
                                            "remote_blocks_expiry_time", "transfer_mode",
                                            "remote_prefill_cached_tokens"}));
  EXPECT_EQ(json::serialize(o.at("remote_block_ids")), "[[1,2,3]]");
  EXPECT_EQ(o.at("transfer_mode").as_string(), "pull");
  EXPECT_TRUE(o.at("remote_blocks_expiry_time").is_null());
  // Read back by a consumer, it names the same request.
  const json::value v = o;
  auto p = parse_kv_params(&v);
  ASSERT_TRUE(p);
  EXPECT_EQ(p.value().remote.request_id, "cmpl-a-0-00000000");
  EXPECT_EQ(p.value().remote.cached_tokens, 32);
}

TEST(KvParams, InternalRequestIdsLookLikeVllms) {
  EXPECT_TRUE(std::regex_match(internal_request_id("cmpl-leg-1", true, 7), std::regex("cmpl-leg-1-0-[0-9a-f]{8}")));
  EXPECT_TRUE(std::regex_match(internal_request_id("chatcmpl-t2", false, 7), std::regex("chatcmpl-t2-[0-9a-f]{8}")));
  EXPECT_NE(internal_request_id("cmpl-a", true, 1), internal_request_id("cmpl-a", true, 2));
  EXPECT_TRUE(std::regex_match(random_engine_id(),
                               std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")));
}

TEST(KvOptions, TheRoleTakesVllmsNamesAndTurnsTheConnectorOn) {
  SimOptions o;
  EXPECT_TRUE(parse_options({"--kv-role", "kv_both", "--kv-lease-seconds", "2", "--kv-load-failure-policy", "recompute"}, o)
                  .empty());
  EXPECT_TRUE(o.engine.kv_connector);
  EXPECT_TRUE(o.engine.kv_load_recompute);
  EXPECT_EQ(o.kv_transfer.lease_s, 2);
  EXPECT_EQ(o.kv_transfer.side_channel_host, "localhost");
  SimOptions bad;
  auto e = parse_options({"--kv-role", "producer"}, bad);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("Unsupported kv_role: producer"), std::string::npos);
  SimOptions none;
  EXPECT_FALSE(none.engine.kv_connector);
  EXPECT_EQ(parse_options({"--kv-lease-seconds", "2"}, none).size(), 1u) << "needs --kv-role";
  SimOptions dp;
  EXPECT_EQ(parse_options({"--kv-role", "kv_producer", "--data-parallel-size", "2"}, dp).size(), 1u);
}

}  // namespace
}  // namespace ramjet::sim
