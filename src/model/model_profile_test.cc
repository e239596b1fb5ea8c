// The registry tests: every profile in PROFILES is exercised by each of them, so a new profile
// is checked the moment it is registered.
#include "model/model_profile.h"

#include <set>
#include <string>

#include <gtest/gtest.h>

namespace ramjet::model {
namespace {

boost::json::object request(std::string_view json) { return boost::json::parse(json).as_object(); }

ramjet::Result<TemplateArgs, LocalFailure> args_for(std::string_view label, std::string_view json) {
  const ModelProfile* p = find_profile(label);
  EXPECT_NE(p, nullptr) << label;
  return local_template_args(*p, request(json));
}

TEST(ModelProfiles, EveryLabelIsUnique) {
  std::set<std::string_view> labels;
  for (const ModelProfile* p : PROFILES) {
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(labels.insert(p->label()).second) << p->label();
  }
  EXPECT_EQ(labels.size(), PROFILES.size());
}

TEST(ModelProfiles, LookingUpEachLabelReturnsThatProfile) {
  for (const ModelProfile* p : PROFILES) EXPECT_EQ(find_profile(p->label()), p);
  EXPECT_EQ(find_profile("qwen3.8"), nullptr);
  EXPECT_EQ(find_profile(""), nullptr);
  EXPECT_EQ(find_profile("DEEPSEEK-V4-R34"), nullptr);
}

TEST(ModelProfiles, AModelFoldersModelTypePicksAtMostOneProfile) {
  EXPECT_EQ(profile_for_model_type("qwen3"), find_profile("qwen3"));
  EXPECT_EQ(profile_for_model_type("qwen3_moe"), find_profile("qwen3"));
  EXPECT_EQ(profile_for_model_type("deepseek_v32"), find_profile("deepseek-v3.2"));
  EXPECT_EQ(profile_for_model_type("llama"), nullptr);
  EXPECT_EQ(profile_for_model_type(""), nullptr);
  // No model_type is claimed by two profiles (it would pick neither).
  std::set<std::string_view> types;
  for (const ModelProfile* p : PROFILES)
    for (std::string_view t : p->model_types()) EXPECT_TRUE(types.insert(t).second) << t;
}

TEST(ModelProfiles, TheFourProfilesAreTheSeedDocumentsOnes) {
  const ModelProfile* ds = find_profile("deepseek-v4-r34");
  const ModelProfile* q27 = find_profile("qwen3.8-27b");
  const ModelProfile* flash = find_profile("qwen3.8-flash-next");
  const ModelProfile* big = find_profile("qwen3.8-2.4t-a95b");
  ASSERT_TRUE(ds && q27 && flash && big);
  EXPECT_EQ(ds->formatter_source(), FormatterSource::kNative);
  EXPECT_EQ(ds->modality(), Modality::kText);
  EXPECT_EQ(ds->template_formatter(), "");
  EXPECT_EQ(q27->template_formatter(), "") << "its template is not one the qwen3 formatter reproduces";
  ASSERT_NE(find_profile("qwen3"), nullptr);
  EXPECT_EQ(find_profile("qwen3")->template_formatter(), "qwen3");
  EXPECT_EQ(q27->formatter_source(), FormatterSource::kHfChatTemplate);
  EXPECT_EQ(q27->modality(), Modality::kImageAndVideo);
  EXPECT_EQ(flash->formatter_source(), FormatterSource::kHfChatTemplate);
  EXPECT_EQ(flash->modality(), Modality::kImageAndVideo);
  EXPECT_EQ(flash->family(), q27->family());
  EXPECT_EQ(big->formatter_source(), FormatterSource::kHfChatTemplate);
  EXPECT_EQ(big->modality(), Modality::kText);
  EXPECT_FALSE(big->thinking_can_be_disabled());
  EXPECT_TRUE(q27->thinking_can_be_disabled());
  EXPECT_TRUE(ds->thinking_can_be_disabled());
}

TEST(ModelProfiles, NoProfileTokenizesAVisionRequestLocally) {
  const std::string parts[] = {
      R"({"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}})",
      R"({"type":"video_url","video_url":{"url":"https://example.com/v.mp4"}})",
      R"({"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}})",
      R"({"image_url":{"url":"x"}})",
  };
  for (const ModelProfile* p : PROFILES) {
    for (const std::string& part : parts) {
      const std::string req = R"({"messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},)" +
                              part + "]}]}";
      auto r = local_template_args(*p, request(req));
      ASSERT_FALSE(r.ok()) << p->label() << " " << part;
      EXPECT_EQ(r.error(), LocalFailure::Multimodal) << p->label();
    }
    // All-text parts are not a vision request.
    EXPECT_TRUE(local_template_args(*p, request(R"({"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]})")).ok())
        << p->label();
  }
}

TEST(ModelProfiles, UnknownChatTemplateKwargsAreRejected) {
  for (const ModelProfile* p : PROFILES) {
    auto r = local_template_args(*p, request(R"({"messages":[],"chat_template_kwargs":{"custom_instructions":"x"}})"));
    ASSERT_FALSE(r.ok()) << p->label();
    EXPECT_EQ(r.error(), LocalFailure::UnknownKwarg);
    // Every listed key is accepted on its own (with a value that keeps thinking on).
    for (const std::string_view key : p->template_kwarg_keys()) {
      boost::json::object req = request(R"({"messages":[]})");
      const std::string_view effort = p->reasoning_class("xhigh") ? "xhigh" : "high";
      boost::json::object kw;
      if (key == "reasoning_effort") kw[key] = effort;
      else kw[key] = true;
      req["chat_template_kwargs"] = kw;
      EXPECT_TRUE(local_template_args(*p, req).ok()) << p->label() << " " << key;
    }
  }
}

TEST(ModelProfiles, QwenListsPreserveThinking) {
  for (const char* label : {"qwen3.8-27b", "qwen3.8-flash-next", "qwen3.8-2.4t-a95b"}) {
    auto r = args_for(label, R"({"messages":[],"chat_template_kwargs":{"preserve_thinking":true}})");
    ASSERT_TRUE(r.ok()) << label;
    EXPECT_EQ(r->at("preserve_thinking"), true);
  }
}

TEST(ModelProfiles, AnUnsupportedEffortIsNotRemapped) {
  // Qwen3.8 has low/medium/xhigh: "high" must not become "xhigh".
  for (const char* label : {"qwen3.8-27b", "qwen3.8-flash-next", "qwen3.8-2.4t-a95b"}) {
    for (const char* effort : {"high", "minimal", "max", "HIGH", ""}) {
      auto r = args_for(label, std::string(R"({"messages":[],"reasoning_effort":")") + effort + "\"}");
      ASSERT_FALSE(r.ok()) << label << " " << effort;
      EXPECT_EQ(r.error(), LocalFailure::Unsupported);
      EXPECT_EQ(find_profile(label)->reasoning_class(effort), std::nullopt);
    }
  }
  // DeepSeek-V4 has high/max: vLLM would turn "low"/"medium" into its own "low"; ramjet defers.
  for (const char* effort : {"low", "minimal", "medium", "xhigh"}) {
    auto r = args_for("deepseek-v4-r34", std::string(R"({"messages":[],"reasoning_effort":")") + effort + "\"}");
    ASSERT_FALSE(r.ok()) << effort;
    EXPECT_EQ(r.error(), LocalFailure::Unsupported);
  }
  // apply_reasoning leaves the arguments untouched when it refuses.
  TemplateArgs args{{"reasoning_effort", "high"}, {"preserve_thinking", true}};
  const TemplateArgs before = args;
  auto applied = find_profile("qwen3.8-27b")->apply_reasoning(args);
  ASSERT_FALSE(applied.ok());
  EXPECT_EQ(applied.error(), LocalFailure::Unsupported);
  EXPECT_EQ(args, before);
}

TEST(ModelProfiles, SupportedEffortsSetEnableThinkingLikeVllm) {
  auto r = args_for("qwen3.8-27b", R"({"messages":[],"reasoning_effort":"xhigh"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->at("reasoning_effort"), "xhigh");
  EXPECT_EQ(r->at("enable_thinking"), true);
  r = args_for("qwen3.8-27b", R"({"messages":[],"reasoning_effort":"none"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->at("enable_thinking"), false);
  // The caller's enable_thinking wins; the request's effort wins over chat_template_kwargs' (vLLM
  // 0.32 merges the request's fields over the kwargs).
  r = args_for("qwen3.8-27b",
               R"({"messages":[],"reasoning_effort":"xhigh","chat_template_kwargs":{"reasoning_effort":"low","enable_thinking":false}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->at("reasoning_effort"), "xhigh");
  EXPECT_EQ(r->at("enable_thinking"), false);
  // An effort given as a kwarg alone reaches the template as it is: vLLM derives enable_thinking
  // from the request's own reasoning_effort only.
  r = args_for("qwen3.8-27b", R"({"messages":[],"chat_template_kwargs":{"reasoning_effort":"xhigh"}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->at("reasoning_effort"), "xhigh");
  EXPECT_FALSE(r->contains("enable_thinking"));
  EXPECT_EQ(find_profile("qwen3.8-27b")->reasoning_class("medium"), "medium");
  EXPECT_EQ(find_profile("deepseek-v4-r34")->reasoning_class("max"), "max");
  EXPECT_EQ(find_profile("deepseek-v4-r34")->reasoning_class("none"), "none");
  r = args_for("deepseek-v4-r34", R"({"messages":[],"chat_template_kwargs":{"thinking":false}})");
  EXPECT_TRUE(r.ok());
}

TEST(ModelProfiles, MandatoryThinkingCannotBeTurnedOffLocally) {
  const char* label = "qwen3.8-2.4t-a95b";
  for (const char* req : {R"({"messages":[],"reasoning_effort":"none"})",
                          R"({"messages":[],"chat_template_kwargs":{"enable_thinking":false}})"}) {
    auto r = args_for(label, req);
    ASSERT_FALSE(r.ok()) << req;
    EXPECT_EQ(r.error(), LocalFailure::Unsupported);
  }
  EXPECT_EQ(find_profile(label)->reasoning_class("none"), std::nullopt);
  EXPECT_TRUE(args_for(label, R"({"messages":[],"chat_template_kwargs":{"enable_thinking":true}})").ok());
}

TEST(ModelProfiles, MalformedRequestsAreBadRequests) {
  for (const ModelProfile* p : PROFILES) {
    for (const char* req : {R"({})", R"({"messages":{}})", R"({"messages":[1]})",
                            R"({"messages":[],"chat_template_kwargs":[1]})"}) {
      auto r = local_template_args(*p, request(req));
      ASSERT_FALSE(r.ok()) << req;
      EXPECT_EQ(r.error(), LocalFailure::BadRequest);
    }
  }
}

}  // namespace
}  // namespace ramjet::model
