// render::TokenizerService: startup checks (profile even when off, path/digest pairs, local-mode
// requirements, manifest pins), the manifest goldens re-rendered at startup (the expected token
// digests come from the independent golden files, so a renderer bug stops startup), the
// tokenize payload built from a request, and offer()'s bounds.
#include "render/service/tokenizer_service.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <functional>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "model/model_profile.h"

#ifndef RAMJET_TESTDATA_DIR
#define RAMJET_TESTDATA_DIR "test/data/testdata"
#endif

namespace ramjet::render {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
const fs::path kTestdata = RAMJET_TESTDATA_DIR;
const fs::path kQwenTok = kTestdata / "models/qwen3/tokenizer.json";
const fs::path kQwenTpl = kTestdata / "models/qwen3/chat_template.jinja";

// Goldens of qwen3.jsonl as manifest entries: request and the digest of the golden token ids.
json::array qwen_goldens(size_t n) {
  json::array out;
  std::ifstream in(kTestdata / "goldens/qwen3.jsonl");
  std::string line;
  while (out.size() < n && std::getline(in, line)) {
    json::object g = json::parse(line).as_object();
    std::vector<uint32_t> ids;
    for (const auto& t : g["token_ids"].as_array()) ids.push_back(static_cast<uint32_t>(t.to_number<uint64_t>()));
    const auto& req = g["request"].as_object();
    if (const auto* kw = req.if_contains("chat_template_kwargs"); kw && kw->as_object().contains("reasoning_effort"))
      continue;  // not a qwen3 template kwarg: the profile would not render it locally
    out.push_back(json::object{{"id", g["id"]},
                               {"endpoint", "chat"},
                               {"request", req},
                               {"token_count", ids.size()},
                               {"token_ids_sha256", token_ids_sha256(ids)}});
  }
  return out;
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rj-tokservice-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  json::object manifest_json(json::array goldens) {
    return json::object{{"schema", 1},
                        {"model", json::object{{"id", "qwen3"}, {"root", "Qwen/Qwen3-8B"}, {"max_model_len", 40960}}},
                        {"engine", json::object{{"version", "0.26.0"}}},
                        {"tokenizer", json::object{{"sha256", *file_sha256_hex(kQwenTok.string())}}},
                        {"chat_template", json::object{{"sha256", *file_sha256_hex(kQwenTpl.string())}}},
                        {"renderer", json::object{{"profile", "qwen3"}}},
                        {"goldens", std::move(goldens)}};
  }
  // A local-shadow config for the qwen3 profile with `manifest` written to a file and pinned.
  TokenizerServiceConfig local_config(const json::object& manifest) {
    const std::string text = json::serialize(manifest);
    const fs::path path = dir_ / "manifest.json";
    std::ofstream(path, std::ios::binary) << text;
    TokenizerServiceConfig c;
    c.mode = TokenizerMode::kLocalShadow;
    c.profile = "qwen3";
    c.tokenizer_path = kQwenTok.string();
    c.tokenizer_sha256 = *file_sha256_hex(c.tokenizer_path);
    c.template_path = kQwenTpl.string();
    c.template_sha256 = *file_sha256_hex(c.template_path);
    c.manifest_path = path.string();
    c.manifest_sha256 = sha256_hex(text);
    c.upstreams.resize(2);
    return c;
  }
  static std::string joined(const std::vector<std::string>& errors) {
    std::string s;
    for (const auto& e : errors) s += e + "\n";
    return s;
  }

  fs::path dir_;
};

TEST_F(ServiceTest, UnknownProfileIsRejectedEvenWhenOff) {
  TokenizerServiceConfig c;
  c.profile = "qwen3.8-27B";  // case matters
  std::vector<std::string> errors;
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("RJ_TOKENIZER_PROFILE: unknown profile 'qwen3.8-27B' (known: deepseek-v4-r34, qwen3.8-27b"),
            std::string::npos)
      << errors[0];
  errors.clear();
  c.profile = "qwen3.8-27b";
  auto s = TokenizerService::create(c, errors);
  ASSERT_NE(s, nullptr) << joined(errors);
  EXPECT_FALSE(s->enabled());
  s->offer(0, true, std::string(40000, 'x'));  // off: nothing happens, nothing counted
  metrics::Exposition x;
  s->write_metrics(x);
  const std::string text = x.take();
  EXPECT_NE(text.find("ramjet_tokenizer_info{mode=\"off\",profile=\"qwen3.8-27b\"} 1"), std::string::npos) << text;
  EXPECT_EQ(text.find("ramjet_tokenizer_shadow_total"), std::string::npos);
}

TEST_F(ServiceTest, PathsAndDigestsGoTogether) {
  TokenizerServiceConfig c;
  c.mode = TokenizerMode::kRemoteShadow;
  c.profile = "qwen3";
  c.tokenizer_path = kQwenTok.string();
  c.template_sha256 = std::string(64, 'a');
  c.manifest_path = "/x";
  c.manifest_sha256 = "nothex";
  std::vector<std::string> errors;
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  const std::string all = joined(errors);
  EXPECT_NE(all.find("RJ_TOKENIZER_PATH is set without RJ_TOKENIZER_SHA256"), std::string::npos) << all;
  EXPECT_NE(all.find("RJ_CHAT_TEMPLATE_SHA256 is set without RJ_CHAT_TEMPLATE_PATH"), std::string::npos) << all;
  EXPECT_NE(all.find("RJ_TOKENIZER_MANIFEST_SHA256: 64 hex digits"), std::string::npos) << all;
  errors.clear();
  c.profile.clear();
  c.tokenizer_path.clear();
  c.template_sha256.clear();
  c.manifest_path.clear();
  c.manifest_sha256.clear();
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  EXPECT_NE(joined(errors).find("RJ_TOKENIZER_PROFILE is required when RJ_TOKENIZER_MODE is remote-shadow"),
            std::string::npos);
}

TEST_F(ServiceTest, LocalModesNeedTheirPinsAndAFormatterThisBuildHas) {
  TokenizerServiceConfig c;
  c.mode = TokenizerMode::kLocal;
  c.profile = "qwen3";
  std::vector<std::string> errors;
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  std::string all = joined(errors);
  EXPECT_NE(all.find("RJ_MODEL_DIR (or RJ_TOKENIZER_PATH and RJ_TOKENIZER_SHA256) is required"), std::string::npos) << all;
  EXPECT_NE(all.find("RJ_TOKENIZER_MANIFEST_PATH and RJ_TOKENIZER_MANIFEST_SHA256 are required"), std::string::npos);
  EXPECT_NE(all.find("profile qwen3 renders with an HF chat template"), std::string::npos) << all;
  errors.clear();
  c.profile = "deepseek-v4-r34";
  c.template_path = kQwenTpl.string();
  c.template_sha256 = std::string(64, '0');
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  all = joined(errors);
  EXPECT_NE(all.find("profile deepseek-v4-r34 has a native formatter: RJ_CHAT_TEMPLATE_PATH must not be set"),
            std::string::npos) << all;
  EXPECT_NE(all.find("needs the native formatter 'deepseek-v4', which this build does not have"), std::string::npos)
      << all;
  // remote-shadow needs no local files, whatever the profile.
  errors.clear();
  TokenizerServiceConfig r;
  r.mode = TokenizerMode::kRemoteShadow;
  r.profile = "deepseek-v4-r34";
  EXPECT_NE(TokenizerService::create(r, errors), nullptr) << joined(errors);
}

// The engines' model folder, as `vllm serve` reads it: the real Qwen3 files plus a config.json.
fs::path model_folder(const fs::path& at, std::string_view config_json, bool with_jinja = true) {
  fs::create_directories(at);
  fs::copy_file(kQwenTok, at / "tokenizer.json");
  fs::copy_file(kTestdata / "models/qwen3/tokenizer_config.json", at / "tokenizer_config.json");
  if (with_jinja) fs::copy_file(kQwenTpl, at / "chat_template.jinja");
  if (!config_json.empty()) std::ofstream(at / "config.json") << config_json;
  return at;
}

TEST_F(ServiceTest, AModelFolderIsTheOneSettingLocalTokensNeed) {
  TokenizerServiceConfig c;
  c.mode = TokenizerMode::kLocal;
  c.model_dirs = {model_folder(dir_ / "m", R"({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]})").string()};
  c.upstreams.resize(2);
  std::vector<std::string> errors;
  auto s = TokenizerService::create(c, errors);
  ASSERT_NE(s, nullptr) << joined(errors);
  const Manifest* m = s->manifest();
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->identity_pinned);  // each engine is proven by the goldens on its own /tokenize
  EXPECT_EQ(m->profile, "qwen3");    // from config.json's model_type
  EXPECT_EQ(m->tokenizer_sha256, *file_sha256_hex(kQwenTok.string()));
  EXPECT_EQ(m->chat_template_sha256, *file_sha256_hex(kQwenTpl.string()));  // chat_template.jinja first
  EXPECT_EQ(m->goldens.size(), builtin_goldens().size());
  for (const ManifestGolden& g : m->goldens) {
    EXPECT_GT(g.token_count, 3u) << g.id;
    EXPECT_TRUE(is_sha256_hex(g.token_ids_sha256)) << g.id;
  }
  EXPECT_EQ(s->attestation(0), Attestation::kUnchecked);
  // The tokens are the pinned-file pipeline's: a request renders as with RJ_TOKENIZER_PATH.
  auto golden = qwen_goldens(1);
  const json::object& g = golden[0].as_object();
  auto r = s->render_routing(PromptApi::kChat, json::serialize(g.at("request")));
  ASSERT_EQ(r.outcome, ShadowOutcome::kSuccess);
  EXPECT_EQ(r.ids.size(), g.at("token_count").to_number<uint64_t>());
  EXPECT_EQ(token_ids_sha256(r.ids), g.at("token_ids_sha256").as_string());

  // Without chat_template.jinja the template in tokenizer_config.json is used.
  c.model_dirs = {model_folder(dir_ / "m2", R"({"model_type": "qwen3_moe"})", false).string()};
  errors.clear();
  s = TokenizerService::create(c, errors);
  ASSERT_NE(s, nullptr) << joined(errors);
  EXPECT_EQ(s->manifest()->chat_template_sha256, *file_sha256_hex((dir_ / "m2/tokenizer_config.json").string()));
}

// Engines serving two models: a folder each, with its own renderer (here two templates of one
// tokenizer), both loaded; what they render differs; settings that describe one model are refused.
TEST_F(ServiceTest, SeveralModelFoldersAreSeveralRenderers) {
  const std::string qwen = R"({"model_type": "qwen3"})";
  const fs::path a = model_folder(dir_ / "a", qwen);
  const fs::path b = model_folder(dir_ / "b", qwen, false);
  {
    std::ifstream in(kQwenTpl);
    std::ofstream(b / "chat_template.jinja") << "{{- 'Model B. ' }}" << in.rdbuf();
  }
  TokenizerServiceConfig c;
  c.mode = TokenizerMode::kLocal;
  c.model_dirs = {a.string(), b.string()};
  c.upstreams.resize(2);
  std::vector<std::string> errors;
  auto s = TokenizerService::create(c, errors);
  ASSERT_NE(s, nullptr) << joined(errors);
  ASSERT_EQ(s->models(), 2u);
  EXPECT_NE(s->manifest(0)->chat_template_sha256, s->manifest(1)->chat_template_sha256);
  EXPECT_EQ(s->manifest(2), nullptr);
  EXPECT_FALSE(s->attesting_model(0).has_value());  // nothing proven before the loops run
  const std::string body = R"({"model":"x","messages":[{"role":"user","content":"Hello there"}]})";
  auto ra = s->render_routing(PromptApi::kChat, body, 0);
  auto rb = s->render_routing(PromptApi::kChat, body, 1);
  ASSERT_EQ(ra.outcome, ShadowOutcome::kSuccess);
  ASSERT_EQ(rb.outcome, ShadowOutcome::kSuccess);
  EXPECT_GT(rb.ids.size(), ra.ids.size());  // B's template says more
  EXPECT_EQ(s->render_routing(PromptApi::kChat, body, 2).outcome, ShadowOutcome::kDecodeError);  // no such model
  metrics::Exposition out;
  s->write_metrics(out);
  const std::string text = out.take();
  EXPECT_NE(text.find("ramjet_tokenizer_info{mode=\"local\",profile=\"qwen3\"} 2"), std::string::npos) << text;

  c.profile = "qwen3";
  c.manifest_path = "/m.json";
  c.model_dirs.push_back(a.string() + "/");
  errors.clear();
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  EXPECT_NE(joined(errors).find("RJ_TOKENIZER_PROFILE: set with 3 RJ_MODEL_DIR folders"), std::string::npos) << joined(errors);
  EXPECT_NE(joined(errors).find("RJ_TOKENIZER_MANIFEST_PATH: a manifest describes one model"), std::string::npos)
      << joined(errors);
  EXPECT_NE(joined(errors).find("is named twice"), std::string::npos) << joined(errors);
}

TEST_F(ServiceTest, AModelFolderWithoutAKnownModelTypeNeedsAProfile) {
  TokenizerServiceConfig c;
  c.mode = TokenizerMode::kLocal;
  c.model_dirs = {model_folder(dir_ / "llama", R"({"model_type": "llama"})").string()};
  std::vector<std::string> errors;
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  EXPECT_NE(joined(errors).find("model_type 'llama' has no profile here: set RJ_TOKENIZER_PROFILE"), std::string::npos)
      << joined(errors);
  c.model_dirs = {model_folder(dir_ / "none", "").string()};
  errors.clear();
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  EXPECT_NE(joined(errors).find("has no config.json with a model_type"), std::string::npos) << joined(errors);
  c.profile = "qwen3";  // a profile named: config.json is not needed
  errors.clear();
  EXPECT_NE(TokenizerService::create(c, errors), nullptr) << joined(errors);
  c.model_dirs = {(dir_ / "missing").string()};
  errors.clear();
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  EXPECT_NE(joined(errors).find("is not a folder"), std::string::npos) << joined(errors);
  // A tokenizer_config.json without a chat_template is not a template.
  fs::create_directories(dir_ / "notemplate");
  fs::copy_file(kQwenTok, dir_ / "notemplate/tokenizer.json");
  std::ofstream(dir_ / "notemplate/tokenizer_config.json") << R"({"eos_token": "<|im_end|>"})";
  c.model_dirs = {(dir_ / "notemplate").string()};
  errors.clear();
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  EXPECT_NE(joined(errors).find("has no chat template"), std::string::npos) << joined(errors);
  fs::create_directories(dir_ / "empty");
  c.model_dirs = {(dir_ / "empty").string()};
  errors.clear();
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  EXPECT_NE(joined(errors).find("has no tokenizer.json"), std::string::npos) << joined(errors);
}

TEST_F(ServiceTest, ManifestGoldensAreReproducedAtStartup) {
  auto goldens = qwen_goldens(64);
  ASSERT_GE(goldens.size(), 20u);
  std::vector<std::string> errors;
  auto s = TokenizerService::create(local_config(manifest_json(goldens)), errors);
  ASSERT_NE(s, nullptr) << joined(errors);
  ASSERT_NE(s->manifest(), nullptr);
  EXPECT_EQ(s->manifest()->goldens.size(), goldens.size());
  EXPECT_FALSE(s->attested(0));  // not checked yet
  EXPECT_EQ(s->attestation(1), Attestation::kUnchecked);
}

TEST_F(ServiceTest, AGoldenThatDoesNotReproduceStopsStartup) {
  auto goldens = qwen_goldens(3);
  // One token more than the engine produced; then the right count with another digest.
  goldens[1].as_object()["token_count"] = goldens[1].as_object()["token_count"].to_number<uint64_t>() + 1;
  goldens[2].as_object()["token_ids_sha256"] = std::string(64, 'f');
  std::vector<std::string> errors;
  EXPECT_EQ(TokenizerService::create(local_config(manifest_json(goldens)), errors), nullptr);
  ASSERT_EQ(errors.size(), 2u) << joined(errors);
  EXPECT_NE(errors[0].find("tokens, the manifest has"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("token ids differ from the manifest's digest"), std::string::npos) << errors[1];
}

TEST_F(ServiceTest, ManifestMustMatchThePinnedFiles) {
  auto m = manifest_json(qwen_goldens(2));
  m["renderer"].as_object()["profile"] = "qwen3.8-27b";
  m["tokenizer"].as_object()["sha256"] = std::string(64, '1');
  auto c = local_config(m);
  std::vector<std::string> errors;
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  std::string all = joined(errors);
  EXPECT_NE(all.find("manifest renderer.profile is 'qwen3.8-27b', RJ_TOKENIZER_PROFILE is 'qwen3'"), std::string::npos);
  EXPECT_NE(all.find("manifest tokenizer.sha256 differs from RJ_TOKENIZER_SHA256"), std::string::npos);
  // A manifest edited after pinning.
  errors.clear();
  c = local_config(manifest_json(qwen_goldens(2)));
  c.manifest_sha256 = std::string(64, 'e');
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  EXPECT_NE(joined(errors).find("SHA-256 differs from RJ_TOKENIZER_MANIFEST_SHA256"), std::string::npos);
  // A manifest path that is a directory, and a manifest over the 1 MiB limit.
  errors.clear();
  c = local_config(manifest_json(qwen_goldens(2)));
  c.manifest_path = dir_.string();
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  EXPECT_NE(joined(errors).find(": is a directory"), std::string::npos) << joined(errors);
  errors.clear();
  std::ofstream(dir_ / "huge.json", std::ios::binary) << std::string((1u << 20) + 1, ' ');
  c.manifest_path = (dir_ / "huge.json").string();
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  EXPECT_NE(joined(errors).find("larger than 1048576 bytes"), std::string::npos) << joined(errors);
  // A tokenizer whose bytes differ from its pin.
  errors.clear();
  c = local_config(manifest_json(qwen_goldens(2)));
  c.tokenizer_sha256 = std::string(64, 'c');
  EXPECT_EQ(TokenizerService::create(c, errors), nullptr);
  EXPECT_NE(joined(errors).find("SHA-256 differs from the pinned digest"), std::string::npos) << joined(errors);
}

TEST(Payload, ChatCarriesTheProfilesTemplateArguments) {
  const auto& qwen38 = *model::find_profile("qwen3.8-27b");
  auto p = build_tokenize_payload(
      qwen38, true,
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"reasoning_effort":"low","max_tokens":5,
          "chat_template_kwargs":{"preserve_thinking":true},"stream":true})");
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->local_refusal);
  auto v = json::parse(p->json).as_object();
  EXPECT_EQ(v["model"], "m");
  EXPECT_EQ(v["add_generation_prompt"], true);
  EXPECT_EQ(v["return_token_strs"], false);
  EXPECT_FALSE(v.contains("max_tokens"));
  EXPECT_FALSE(v.contains("stream"));
  auto& kw = v["chat_template_kwargs"].as_object();
  EXPECT_EQ(kw["preserve_thinking"], true);
  EXPECT_EQ(kw["reasoning_effort"], "low");
  EXPECT_EQ(kw["enable_thinking"], true);
  // An effort the model does not have: nothing local, but the engine is asked with what its chat
  // path renders (the effort and the enable_thinking vLLM derives from it).
  p = build_tokenize_payload(qwen38, true,
                             R"({"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"high",
                                 "chat_template_kwargs":{"custom":1}})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->local_refusal, ShadowOutcome::kUnsupported);
  EXPECT_FALSE(p->multimodal);
  EXPECT_EQ(json::parse(p->json).as_object()["chat_template_kwargs"],
            json::parse(R"({"custom":1,"reasoning_effort":"high","enable_thinking":true})"));
  // Documents go to the template as a kwarg, a per-request template is passed on; neither local.
  p = build_tokenize_payload(qwen38, true,
                             R"({"messages":[{"role":"user","content":"hi"}],"documents":[{"text":"d"}],
                                 "chat_template":"{{ messages }}"})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->local_refusal, ShadowOutcome::kUnsupported);
  auto dv = json::parse(p->json).as_object();
  EXPECT_EQ(dv["chat_template"], "{{ messages }}");
  EXPECT_EQ(dv["chat_template_kwargs"].as_object()["documents"], json::parse(R"([{"text":"d"}])"));
  p = build_tokenize_payload(qwen38, true, R"({"messages":[{"role":"user","content":"hi"}],"truncate_prompt_tokens":5})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->local_refusal, ShadowOutcome::kUnsupported);
  // Images are never tokenized locally; continue_final_message neither.
  p = build_tokenize_payload(qwen38, true,
                             R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->local_refusal, ShadowOutcome::kUnsupported);
  EXPECT_TRUE(p->multimodal);
  p = build_tokenize_payload(qwen38, true,
                             R"({"messages":[{"role":"assistant","content":"a"}],"continue_final_message":true})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->local_refusal, ShadowOutcome::kUnsupported);
  EXPECT_EQ(json::parse(p->json).as_object()["add_generation_prompt"], false);
  // Not a chat request at all.
  EXPECT_FALSE(build_tokenize_payload(qwen38, true, R"({"prompt":"x"})"));
  EXPECT_FALSE(build_tokenize_payload(qwen38, true, "not json"));
}

TEST(Payload, CompletionsTakeAStringPrompt) {
  const auto& qwen = *model::find_profile("qwen3");
  auto p = build_tokenize_payload(qwen, false, R"({"model":"m","prompt":"Hello there","max_tokens":3})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->prompt, "Hello there");
  EXPECT_TRUE(p->add_special_tokens);
  EXPECT_EQ(json::parse(p->json),
            json::parse(R"({"model":"m","prompt":"Hello there","add_special_tokens":true,"return_token_strs":false})"));
  EXPECT_FALSE(build_tokenize_payload(qwen, false, R"({"prompt":[1,2,3]})"));
}

TEST_F(ServiceTest, LocalRenderMatchesTheGoldenTokenIds) {
  auto goldens = qwen_goldens(64);
  std::vector<std::string> errors;
  auto s = TokenizerService::create(local_config(manifest_json(qwen_goldens(2))), errors);
  ASSERT_NE(s, nullptr) << joined(errors);
  const auto& qwen = *model::find_profile("qwen3");
  for (const auto& g : goldens) {
    const auto& o = g.as_object();
    auto p = build_tokenize_payload(qwen, true, json::serialize(o.at("request")));
    ASSERT_TRUE(p);
    auto r = s->render_local(*p);
    ASSERT_EQ(r.outcome, ShadowOutcome::kSuccess) << o.at("id");
    EXPECT_EQ(token_ids_sha256(r.ids), o.at("token_ids_sha256").as_string()) << o.at("id");
  }
}

TEST_F(ServiceTest, OfferIsBoundedAndNeverBlocks) {
  // An engine that accepts connections and never answers.
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  std::vector<boost::asio::ip::tcp::socket> held;
  std::function<void()> accept = [&] {
    acceptor.async_accept([&](boost::system::error_code ec, boost::asio::ip::tcp::socket sock) {
      if (ec) return;
      held.push_back(std::move(sock));
      accept();
    });
  };
  accept();
  std::thread engine([&] { io.run(); });

  TokenizerServiceConfig c;
  c.mode = TokenizerMode::kRemoteShadow;
  c.profile = "qwen3";
  c.min_bytes = 10;
  c.max_bytes = 100;
  c.queue_capacity = 2;
  c.workers = 1;
  c.timeout = std::chrono::milliseconds(30000);
  c.upstreams = {config::UpstreamUrl{"127.0.0.1", acceptor.local_endpoint().port(), ""}};
  std::vector<std::string> errors;
  auto s = TokenizerService::create(c, errors);
  ASSERT_NE(s, nullptr);
  const std::string body = R"({"messages":[{"role":"user","content":"hello there"}]})";
  s->offer(0, true, "tiny");                  // outside the window
  s->offer(0, true, std::string(101, 'x'));   // outside the window
  s->offer(0, true, body);                    // not started: stopping
  s->offer(7, true, body);                    // no such upstream: ignored
  boost::asio::io_context ctx;
  s->start(ctx);
  // The worker takes one job and waits on the silent engine; two more fill the queue; the rest
  // are skipped at once.
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) {
    s->offer(0, true, body);
    // Until the worker has taken the first job (the queue is empty again).
    for (int k = 0; i == 0 && k < 500; ++k) {
      metrics::Exposition q;
      s->write_metrics(q);
      if (q.take().find("ramjet_tokenizer_shadow_queue_depth 0") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "offer() waited";
  metrics::Exposition x;
  s->write_metrics(x);
  const std::string text = x.take();
  EXPECT_NE(text.find("ramjet_tokenizer_shadow_skipped_total{reason=\"outside_size_window\"} 2"), std::string::npos)
      << text;
  EXPECT_NE(text.find("ramjet_tokenizer_shadow_skipped_total{reason=\"stopping\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_tokenizer_shadow_skipped_total{reason=\"queue_full\"} 7"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_tokenizer_shadow_queue_depth 2"), std::string::npos) << text;
  EXPECT_EQ(text.find("backend=\"local\""), std::string::npos);  // remote-shadow: no local series
  // stop() interrupts the call in flight instead of waiting out its 30 s deadline.
  const auto t1 = std::chrono::steady_clock::now();
  s->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::seconds(10)) << "stop() waited for the engine";
  metrics::Exposition y;
  s->write_metrics(y);
  const std::string after = y.take();
  EXPECT_NE(after.find("ramjet_tokenizer_shadow_queue_depth 0"), std::string::npos);
  EXPECT_NE(after.find("outcome=\"timeout\"} 0"), std::string::npos) << "an interrupted call is not counted";
  s->offer(0, true, body);
  EXPECT_NE([&] { metrics::Exposition z; s->write_metrics(z); return z.take(); }().find(
                "ramjet_tokenizer_shadow_skipped_total{reason=\"stopping\"} 2"),
            std::string::npos);
  acceptor.close();
  io.stop();
  engine.join();
}

}  // namespace
}  // namespace ramjet::render

namespace ramjet::render {
namespace {

// Exact routing's local render of the agent APIs: the namespace fields are the ones vLLM reads —
// a Responses or Messages request's cache_salt salts its blocks (vLLM 0.32 passes both on).
TEST_F(ServiceTest, RoutingRendersAgentRequestsWithTheNamespaceVllmUses) {
  std::vector<std::string> errors;
  auto s = TokenizerService::create(local_config(manifest_json(qwen_goldens(1))), errors);
  ASSERT_NE(s, nullptr) << joined(errors);
  auto r = s->render_routing(PromptApi::kResponses, R"({"model":"qwen3","cache_salt":"s1","input":"hi"})");
  ASSERT_EQ(r.outcome, ShadowOutcome::kSuccess);
  EXPECT_EQ(r.cache_salt, "s1");
  EXPECT_EQ(r.model, "qwen3");
  EXPECT_FALSE(r.ids.empty());
  auto m = s->render_routing(PromptApi::kMessages,
                             R"({"model":"qwen3","cache_salt":"s1","max_tokens":8,"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(m.outcome, ShadowOutcome::kSuccess);
  EXPECT_EQ(m.cache_salt, "s1");
  EXPECT_EQ(m.ids, r.ids) << "the same conversation renders alike in both shapes";
  EXPECT_EQ(s->render_routing(PromptApi::kResponses, R"({"input":"hi","previous_response_id":"r"})").outcome,
            ShadowOutcome::kUnsupported);
}

// A conversation growing turn by turn: every turn's local ids equal a full encode without the
// cache, and from the second turn on the cache supplies the prefix.
TEST_F(ServiceTest, FollowUpTurnsReuseTheSessionCacheWithIdenticalIds) {
  std::vector<std::string> errors;
  auto s = TokenizerService::create(local_config(manifest_json(qwen_goldens(1))), errors);
  ASSERT_NE(s, nullptr) << joined(errors);
  PromptSources src;
  src.tokenizer_path = kQwenTok.string();
  src.template_path = kQwenTpl.string();
  auto plain = PromptRenderer::load(src);
  ASSERT_TRUE(plain.ok());
  const auto& qwen = *model::find_profile("qwen3");
  json::array messages{json::object{{"role", "system"}, {"content", "You are terse. Use tools when useful."}}};
  const char* turns[] = {"Hello! 你好 🙂", "List three primes.", "   and whitespace   runs\n\n", "<|im_end|> lookalike",
                         "def f(x):\n    return x*2  # code"};
  for (const char* turn : turns) {
    messages.push_back(json::object{{"role", "user"}, {"content", turn}});
    const std::string body = json::serialize(json::object{{"messages", messages}});
    auto p = build_tokenize_payload(qwen, true, body);
    ASSERT_TRUE(p);
    auto local = s->render_local(*p);
    ASSERT_EQ(local.outcome, ShadowOutcome::kSuccess);
    auto full = (*plain)->chat(p->json);
    ASSERT_TRUE(full.ok());
    EXPECT_EQ(local.ids, full->ids) << turn;
    messages.push_back(json::object{{"role", "assistant"}, {"content", std::string("ok: ") + turn}});
  }
  metrics::Exposition x;
  s->write_metrics(x);
  const std::string text = x.take();
  // The golden at startup found nothing; every turn reused at least the shared
  // "<|im_start|>" (a cut), turns 2..5 the whole earlier conversation.
  EXPECT_NE(text.find("ramjet_tokenizer_session_cache_lookups_total{result=\"miss\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_tokenizer_session_cache_lookups_total{result=\"hit\"} 5\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("ramjet_tokenizer_session_cache_reused_bytes_total 0\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace ramjet::render

namespace ramjet::render {
namespace {

// The parsed-request entry points give what the JSON-text ones give: the same payload from a
// parsed body, the same prompt text and ids from a parsed request, the same error for a bad one.
TEST_F(ServiceTest, ParsedRequestsRenderLikeTheirJsonText) {
  PromptSources src;
  src.tokenizer_path = kQwenTok.string();
  src.template_path = kQwenTpl.string();
  auto renderer = PromptRenderer::load(src);
  ASSERT_TRUE(renderer.ok());
  const auto& qwen = *model::find_profile("qwen3");
  for (const auto& g : qwen_goldens(16)) {
    const json::object& request = g.as_object().at("request").as_object();
    const std::string body = json::serialize(request);
    auto from_text = build_tokenize_payload(qwen, true, body);
    auto from_value = build_tokenize_payload(qwen, true, request);
    ASSERT_TRUE(from_text && from_value);
    EXPECT_EQ(from_text->json, from_value->json);
    EXPECT_EQ(from_value->request, json::parse(from_value->json));
    auto by_text = (*renderer)->chat(from_text->json);
    auto by_value = (*renderer)->chat_parsed(from_value->request);
    ASSERT_TRUE(by_text.ok() && by_value.ok());
    EXPECT_EQ(by_text->text, by_value->text);
    EXPECT_EQ(by_text->ids, by_value->ids);
    EXPECT_EQ(token_ids_sha256(by_value->ids), g.as_object().at("token_ids_sha256").as_string());
  }
  auto bad_text = (*renderer)->chat("{\"messages\": 3}");
  auto bad_value = (*renderer)->chat_parsed(json::parse("{\"messages\": 3}"));
  ASSERT_FALSE(bad_text.ok());
  ASSERT_FALSE(bad_value.ok());
  EXPECT_EQ(bad_text.error().kind, PromptErrc::kDecode);
  EXPECT_EQ(bad_text.error().message, bad_value.error().message);
  auto not_json = (*renderer)->chat("{not json");
  ASSERT_FALSE(not_json.ok());
  EXPECT_EQ(not_json.error().kind, PromptErrc::kDecode);
  EXPECT_EQ(not_json.error().message, "invalid JSON");
}

}  // namespace
}  // namespace ramjet::render
