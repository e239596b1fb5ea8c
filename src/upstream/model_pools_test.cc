#include "upstream/model_pools.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <string>

#include "upstream/engine_catalog.h"

namespace ramjet::upstream {
namespace {

using Verdict = ModelPools::Verdict;

std::vector<ModelCard> cards(const std::string& answer) {
  auto c = decode_models(answer);
  EXPECT_TRUE(c) << answer;
  return c ? *c : std::vector<ModelCard>{};
}

EngineModels listing(const std::string& answer) { return EngineModels{.active = true, .cards = cards(answer)}; }
EngineModels unlisted() { return EngineModels{.active = true}; }

std::vector<size_t> members(const EngineSet* s, size_t n) {
  std::vector<size_t> out;
  for (size_t i = 0; s != nullptr && i < n; ++i) {
    if (s->has(i)) out.push_back(i);
  }
  return out;
}

const std::string kLlama = R"({"object":"list","data":[{"id":"llama","object":"model","parent":null,"max_model_len":8192},
    {"id":"sql","object":"model","parent":"llama","root":"/a/sql"}]})";
const std::string kQwen = R"({"object":"list","data":[{"id":"qwen","object":"model","parent":null,"max_model_len":32768}]})";
const std::string kBoth = R"({"object":"list","data":[{"id":"qwen","object":"model","parent":null,"max_model_len":16384},
    {"id":"llama","object":"model","parent":null,"max_model_len":8192}]})";

TEST(ModelPools, EachModelGoesToTheEnginesThatListIt) {
  std::vector<std::string> labels;
  auto p = ModelPools::build({listing(kLlama), listing(kQwen), listing(kBoth)}, labels);
  auto qwen = p->pick("qwen");
  EXPECT_EQ(qwen.verdict, Verdict::kServed);
  EXPECT_EQ(members(qwen.engines, 3), (std::vector<size_t>{1, 2}));
  auto llama = p->pick("llama");
  EXPECT_EQ(members(llama.engines, 3), (std::vector<size_t>{0, 2}));
  // An adapter goes where it is loaded, and counts under its base model's label.
  auto sql = p->pick("sql");
  EXPECT_EQ(members(sql.engines, 3), (std::vector<size_t>{0}));
  ASSERT_NE(sql.model, nullptr);
  EXPECT_TRUE(sql.model->adapter);
  EXPECT_EQ(sql.model->base, "llama");
  EXPECT_EQ(labels[sql.model->label], "llama");
  EXPECT_EQ(p->pick("gpt-4").verdict, Verdict::kUnknown);
  // No model named while two base models are served: the client must say which.
  EXPECT_EQ(p->pick(std::nullopt).verdict, Verdict::kAmbiguous);
  EXPECT_EQ(p->base_models(), 2u);
}

TEST(ModelPools, OneModelFleetTakesRequestsThatNameNone) {
  std::vector<std::string> labels;
  auto p = ModelPools::build({listing(kQwen), listing(kQwen)}, labels);
  EXPECT_EQ(p->pick(std::nullopt).verdict, Verdict::kAny);
  EXPECT_EQ(p->pick("llama").verdict, Verdict::kUnknown);
}

TEST(ModelPools, EnginesNotListedYetTakeWhatNoListedEngineServes) {
  std::vector<std::string> labels;
  // Nothing known: every engine (the engines answer for themselves).
  auto none = ModelPools::build({unlisted(), unlisted()}, labels);
  EXPECT_EQ(none->pick("anything").verdict, Verdict::kAny);
  EXPECT_FALSE(none->models_json());
  // Engine 2 has not answered yet. In a fleet of one model it serves that model too (it is not
  // left idle until it answers); a model no listed engine serves may be its.
  auto some = ModelPools::build({listing(kQwen), listing(kQwen), unlisted()}, labels);
  EXPECT_EQ(members(some->pick("qwen").engines, 3), (std::vector<size_t>{0, 1, 2}));
  auto other = some->pick("llama");
  EXPECT_EQ(other.verdict, Verdict::kUnlisted);
  EXPECT_EQ(members(other.engines, 3), (std::vector<size_t>{2}));
  // With several models listed, an engine not listed yet could be another model's: a model's
  // requests stay on the engines that list it.
  auto mixed = ModelPools::build({listing(kQwen), listing(kLlama), unlisted()}, labels);
  EXPECT_EQ(members(mixed->pick("qwen").engines, 3), (std::vector<size_t>{0}));
  // An engine that is not active is neither.
  auto gone = ModelPools::build({listing(kQwen), EngineModels{.active = false}}, labels);
  EXPECT_EQ(gone->pick("llama").verdict, Verdict::kUnknown);
}

TEST(ModelPools, DeclaredModelsDecideAndAdaptersFollowThem) {
  std::vector<std::string> labels;
  EngineModels declared{.active = true, .declared = {"llama"}, .cards = cards(kLlama)};
  EngineModels declared_unanswered{.active = true, .declared = {"mistral", "llama"}};
  EngineModels declared_other{.active = true, .declared = {"qwen"}, .cards = cards(kLlama)};
  auto p = ModelPools::build({declared, declared_unanswered, declared_other}, labels);
  EXPECT_EQ(members(p->pick("llama").engines, 3), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(members(p->pick("sql").engines, 3), (std::vector<size_t>{0}));  // listed on a declared model
  EXPECT_EQ(members(p->pick("mistral").engines, 3), (std::vector<size_t>{1}));
  // What an engine lists beyond its declaration is not routed to it.
  EXPECT_EQ(members(p->pick("qwen").engines, 3), (std::vector<size_t>{2}));
  // A declared model nobody described still has a card.
  auto json = p->models_json();
  ASSERT_TRUE(json);
  auto v = boost::json::parse(*json);
  bool mistral = false;
  for (const auto& c : v.at("data").as_array()) {
    if (c.at("id") == "mistral") mistral = c.at("owned_by") == "ramjet" && c.at("parent").is_null();
  }
  EXPECT_TRUE(mistral) << *json;
}

TEST(ModelPools, MergedListHasEveryModelOnceWithTheSmallestContext) {
  std::vector<std::string> labels;
  auto p = ModelPools::build({listing(kQwen), listing(kBoth), listing(kLlama)}, labels);
  auto json = p->models_json();
  ASSERT_TRUE(json);
  auto v = boost::json::parse(*json);
  EXPECT_EQ(v.at("object"), "list");
  std::vector<std::string> ids;
  for (const auto& c : v.at("data").as_array()) {
    ids.emplace_back(c.at("id").as_string());
    if (c.at("id") == "qwen") {
      EXPECT_EQ(c.at("max_model_len").as_int64(), 16384);  // engine 1's, the smaller
    }
    if (c.at("id") == "sql") {
      EXPECT_EQ(c.at("parent"), "llama");
    }
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"qwen", "llama", "sql"}));
}

TEST(ModelPools, LabelsAreBoundedAndStableAcrossRebuilds) {
  std::vector<std::string> labels;
  std::vector<EngineModels> engines;
  for (size_t i = 0; i < kMaxModelLabels + 5; ++i) {
    engines.push_back(listing(R"({"data":[{"id":"m)" + std::to_string(i) + R"("}]})"));
  }
  auto p = ModelPools::build(engines, labels);
  EXPECT_EQ(labels.size(), kMaxModelLabels);
  EXPECT_EQ(p->pick("m68").model->label, kMaxModelLabels);  // beyond the bound: _other
  EXPECT_EQ(p->pick("m3").model->label, 3u);
  // m3's engine leaves and comes back: its label keeps its slot.
  engines[3].active = false;
  ModelPools::build(engines, labels);
  engines[3].active = true;
  EXPECT_EQ(ModelPools::build(engines, labels)->pick("m3").model->label, 3u);
}

TEST(EngineCatalog, DeclaredAndLearnedModelsMakeThePools) {
  std::vector<config::UpstreamUrl> urls(2);
  EngineCatalogConfig cfg;
  cfg.upstreams = urls;
  cfg.declared = {{}, {"mistral"}};
  EngineCatalog catalog(cfg, nullptr);
  // Engine 0 has not answered: while mistral is the one model known, engine 0 may serve it too;
  // a request for another model can only be engine 0's.
  EXPECT_EQ(members(catalog.pools()->pick("mistral").engines, 2), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(catalog.pools()->pick("qwen").verdict, Verdict::kUnlisted);
  catalog.learn_models(0, cards(kQwen));
  EXPECT_EQ(members(catalog.pools()->pick("mistral").engines, 2), (std::vector<size_t>{1}));
  EXPECT_EQ(members(catalog.pools()->pick("qwen").engines, 2), (std::vector<size_t>{0}));
  EXPECT_EQ(catalog.pools()->pick("llama").verdict, Verdict::kUnknown);
  catalog.set_declared(1, {});  // a reload: engine 1 now says for itself, and has not yet
  EXPECT_EQ(catalog.pools()->pick("mistral").verdict, Verdict::kUnlisted);
  metrics::Exposition x;
  catalog.count_request(catalog.pools()->pick("qwen").model->label);
  catalog.write_model_metrics(x, [](size_t) { return true; });
  const std::string text = x.take();
  EXPECT_NE(text.find("ramjet_model_engines{model=\"qwen\",state=\"listed\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_model_requests_total{model=\"qwen\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_model_requests_total{model=\"mistral\"} 0"), std::string::npos) << text;
}

}  // namespace
}  // namespace ramjet::upstream
