// render::manifest: parsing (schema, limits, unknown fields, digests) and the engine identity
// checks against /v1/models and /version bodies.
#include "render/identity/manifest.h"

#include <set>
#include <string>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "render/prompt/prompt.h"

namespace ramjet::render {
namespace {

const std::string kSha(64, 'a');

std::string golden(const std::string& id, const std::string& extra = "") {
  return R"({"id":")" + id + R"(","endpoint":"chat","request":{"messages":[{"role":"user","content":"hi"}]},)" +
         R"("token_count":9,"token_ids_sha256":")" + kSha + "\"" + extra + "}";
}

std::string manifest(const std::string& goldens, const std::string& extra = "") {
  return R"({"schema":1,"model":{"id":"m","root":"org/m","max_model_len":4096},)"
         R"("engine":{"version":"0.26.0"},"tokenizer":{"sha256":")" + kSha +
         R"("},"chat_template":{"sha256":")" + std::string(64, 'B') + R"("},"renderer":{"profile":"qwen3"},)"
         R"("goldens":[)" + goldens + "]" + extra + "}";
}

TEST(Manifest, ParsesEveryField) {
  auto m = parse_manifest(manifest(golden("a") + "," + golden("b")));
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->model_id, "m");
  EXPECT_EQ(m->model_root, "org/m");
  EXPECT_EQ(m->max_model_len, 4096u);
  EXPECT_EQ(m->engine_version, "0.26.0");
  EXPECT_EQ(m->tokenizer_sha256, kSha);
  EXPECT_EQ(m->chat_template_sha256, std::string(64, 'b'));  // lower-cased
  EXPECT_EQ(m->profile, "qwen3");
  ASSERT_EQ(m->goldens.size(), 2u);
  EXPECT_EQ(m->goldens[0].id, "a");
  EXPECT_TRUE(m->goldens[0].chat);
  EXPECT_EQ(m->goldens[0].token_count, 9u);
  EXPECT_EQ(m->goldens[0].request, R"({"messages":[{"role":"user","content":"hi"}]})");
}

TEST(Manifest, RejectsWhatItDoesNotKnow) {
  struct Case {
    std::string text, error_part;
  };
  const std::string one = golden("a");
  const Case cases[] = {
      {manifest(one, R"(,"extra":1)"), "manifest: unknown field \"extra\""},
      {manifest(golden("a", R"(,"note":"x")")), "goldens[0]: unknown field \"note\""},
      {manifest(one + "," + golden("a")), "goldens[1].id: duplicate"},
      {manifest(""), "manifest.goldens: a list of 1 to 64"},
      {R"({"schema":2})", "manifest.schema: must be 1"},
      {"[1]", "not a JSON object"},
      {"{", "not JSON"},
      {manifest([] {
         std::string g = golden("a");
         return g.replace(g.find("\"chat\""), 6, "\"embed\"");
       }()),
       "endpoint: chat or completions"},
  };
  for (const auto& c : cases) {
    auto m = parse_manifest(c.text);
    ASSERT_FALSE(m.ok()) << c.text;
    EXPECT_NE(m.error().message.find(c.error_part), std::string::npos) << m.error().message;
  }
  std::string bad_digest = manifest(one);
  bad_digest.replace(bad_digest.find(kSha), 64, std::string(63, 'a') + "z");
  EXPECT_FALSE(parse_manifest(bad_digest).ok());
  std::string many;
  for (int i = 0; i < 65; ++i) many += (i ? "," : "") + golden("g" + std::to_string(i));
  EXPECT_FALSE(parse_manifest(manifest(many)).ok());
  EXPECT_FALSE(parse_manifest(std::string(2u << 20, ' ')).ok());
  // Nesting: a golden request 10 deep parses, 70 deep (over the limit of 64) is refused.
  auto nested = [&](int depth) {
    std::string g = golden("a");
    const std::string messages = std::string(depth, '[') + std::string(depth, ']');
    return manifest(g.replace(g.find("[{\"role\""), std::string(R"([{"role":"user","content":"hi"}])").size(),
                              messages));
  };
  EXPECT_TRUE(parse_manifest(nested(10)).ok());
  auto too_deep = parse_manifest(nested(70));
  ASSERT_FALSE(too_deep.ok());
  EXPECT_NE(too_deep.error().message.find("not JSON"), std::string::npos) << too_deep.error().message;
}

TEST(Manifest, AttestsModelsAndVersion) {
  auto m = parse_manifest(manifest(golden("a")));
  ASSERT_TRUE(m.ok());
  auto models = [](const std::string& cards) { return R"({"object":"list","data":[)" + cards + "]}"; };
  const std::string good = R"({"id":"m","root":"org/m","max_model_len":4096})";
  EXPECT_EQ(attest_models(*m, models(good)), Attestation::kMatch);
  EXPECT_EQ(attest_models(*m, models(R"({"id":"lora","root":"x","max_model_len":1},)" + good)), Attestation::kMatch);
  EXPECT_EQ(attest_models(*m, models(good + "," + good)), Attestation::kModelAmbiguous);
  EXPECT_EQ(attest_models(*m, models(R"({"id":"other","root":"org/m","max_model_len":4096})")),
            Attestation::kModelMissing);
  EXPECT_EQ(attest_models(*m, models(R"({"id":"m","root":"org/m2","max_model_len":4096})")),
            Attestation::kModelRootMismatch);
  EXPECT_EQ(attest_models(*m, models(R"({"id":"m","root":"org/m","max_model_len":8192})")),
            Attestation::kModelContextMismatch);
  EXPECT_EQ(attest_models(*m, "not json"), Attestation::kModelsDecode);
  EXPECT_EQ(attest_models(*m, R"({"data":{}})"), Attestation::kModelsDecode);
  EXPECT_EQ(attest_version(*m, R"({"version":"0.26.0"})"), Attestation::kMatch);
  EXPECT_EQ(attest_version(*m, R"({"version":"0.26.1"})"), Attestation::kVersionMismatch);
  EXPECT_EQ(attest_version(*m, R"({"v":1})"), Attestation::kVersionDecode);
}

TEST(Manifest, AnEngineIdentityIsItsCardsAndVersionInAnyOrder) {
  auto models = [](const std::string& cards) { return R"({"object":"list","data":[)" + cards + "]}"; };
  const std::string a = R"({"id":"m","root":"org/m","max_model_len":4096,"created":1})";
  const std::string b = R"({"id":"lora","root":"/adapters/x","parent":"m"})";
  const std::string v = R"({"version":"0.32.0"})";
  auto ab = engine_identity(models(a + "," + b), v);
  ASSERT_TRUE(ab.ok());
  // The order of the cards and fields outside the identity (created) do not change it.
  auto ba = engine_identity(models(b + "," + R"({"created":7,"id":"m","root":"org/m","max_model_len":4096})"), v);
  ASSERT_TRUE(ba.ok());
  EXPECT_EQ(ab.value(), ba.value());
  // Another context length, root, adapter set or version is another identity.
  for (const auto& [cards, version] :
       {std::pair{models(R"({"id":"m","root":"org/m","max_model_len":2048},)" + b), v},
        std::pair{models(R"({"id":"m","root":"org/m2","max_model_len":4096},)" + b), v}, std::pair{models(a), v},
        std::pair{models(a + "," + b), std::string(R"({"version":"0.32.1"})")}}) {
    auto other = engine_identity(cards, version);
    ASSERT_TRUE(other.ok());
    EXPECT_NE(other.value(), ab.value()) << cards << version;
  }
  EXPECT_EQ(engine_identity("not json", v).error(), Attestation::kModelsDecode);
  EXPECT_EQ(engine_identity(models(""), v).error(), Attestation::kModelsDecode);  // no card
  EXPECT_EQ(engine_identity(models(R"({"root":"x"})"), v).error(), Attestation::kModelsDecode);
  EXPECT_EQ(engine_identity(models(a), R"({"version":3})").error(), Attestation::kVersionDecode);
}

TEST(Manifest, BuiltinGoldensAreDistinctRequests) {
  auto goldens = builtin_goldens();
  ASSERT_GE(goldens.size(), 4u);
  std::set<std::string> ids;
  for (const ManifestGolden& g : goldens) {
    EXPECT_TRUE(ids.insert(g.id).second) << g.id;
    boost::system::error_code ec;
    auto v = boost::json::parse(g.request, ec);
    ASSERT_FALSE(ec) << g.id;
    EXPECT_TRUE(v.as_object().contains(g.chat ? "messages" : "prompt")) << g.id;
  }
}

TEST(Digests, TokenIdsAreHashedAsBigEndianU32) {
  // sha256 of the 8 bytes 00 00 00 01 00 01 00 00.
  EXPECT_EQ(token_ids_sha256({1, 65536}), sha256_hex(std::string("\0\0\0\1\0\1\0\0", 8)));
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_TRUE(is_sha256_hex(kSha));
  EXPECT_FALSE(is_sha256_hex(kSha + "a"));
}

}  // namespace
}  // namespace ramjet::render
