// sim/server/options: the vllm serve flags the simulator shares with vLLM 0.32 parse as vLLM's
// argparse and config checks do (served names, data parallelism).
#include "sim/server/options.h"

#include <gtest/gtest.h>

namespace ramjet::sim {
namespace {

SimOptions parse(std::vector<std::string> args, std::vector<std::string>* errors = nullptr) {
  SimOptions o;
  auto e = parse_options(args, o);
  if (errors) *errors = e;
  else EXPECT_TRUE(e.empty()) << e.front();
  return o;
}

TEST(SimOptions, ServedModelNameTakesSeveralValuesAndARepeatReplacesThem) {
  EXPECT_EQ(parse({"--served-model-name", "a", "b", "--port", "0"}).served_model_names,
            (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(parse({"--served-model-name", "a", "b", "--served-model-name", "c"}).served_model_names,
            (std::vector<std::string>{"c"}));
  const SimOptions o = parse({"--served-model-name=x"});
  EXPECT_EQ(o.served_model_name(), "x");
  EXPECT_TRUE(o.serves("x"));
  EXPECT_FALSE(o.serves("y"));
}

TEST(SimOptions, SleepModeIsOffByDefaultAndTheWakeTakesASecondOfVirtualTime) {
  const SimOptions off = parse({});
  EXPECT_FALSE(off.enable_sleep_mode);
  EXPECT_FALSE(off.dev_mode);  // (only the environment turns it on: main reads VLLM_SERVER_DEV_MODE)
  EXPECT_EQ(off.wake_ms, 1000);
  const SimOptions on = parse({"--enable-sleep-mode", "--wake-ms", "250"});
  EXPECT_TRUE(on.enable_sleep_mode);
  EXPECT_EQ(on.wake_ms, 250);
  std::vector<std::string> errors;
  parse({"--wake-ms", "-1"}, &errors);
  EXPECT_EQ(errors.size(), 1u);
}

TEST(SimOptions, ServedNamesDefaultToTheModel) {
  EXPECT_EQ(parse({}).served_model_names, (std::vector<std::string>{"ramjet-sim"}));
  EXPECT_EQ(parse({"--model", "Qwen/Qwen3-8B"}).served_model_names, (std::vector<std::string>{"Qwen/Qwen3-8B"}));
}

TEST(SimOptions, AnAdapterNamedLikeAnyServedNameIsRefused) {
  std::vector<std::string> errors;
  parse({"--served-model-name", "a", "b", "--lora-modules", "b=/p"}, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "--lora-modules: The lora adapter 'b' conflicts with a served base model.");
}

TEST(SimOptions, DataParallelSizeRunsEveryRankWithOneApiServerEach) {
  const SimOptions o = parse({"--data-parallel-size", "4"});
  EXPECT_EQ(o.local_ranks(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(o.api_servers(), 4u);  // vllm serve's default for internal load balancing
  EXPECT_EQ(parse({"--data-parallel-size", "4", "--api-server-count", "1"}).api_servers(), 1u);
  EXPECT_EQ(parse({}).local_ranks(), (std::vector<int>{0}));
  EXPECT_EQ(parse({}).api_servers(), 1u);
}

TEST(SimOptions, ARankGivenRunsThatRankAlone) {
  EXPECT_EQ(parse({"--data-parallel-rank", "3"}).local_ranks(), (std::vector<int>{3}));  // the standalone rank
  const SimOptions o = parse({"--data-parallel-size", "4", "--data-parallel-rank", "2"});
  EXPECT_EQ(o.local_ranks(), (std::vector<int>{2}));  // external load balancing
  EXPECT_EQ(o.api_servers(), 1u);
  std::vector<std::string> errors;
  parse({"--data-parallel-size", "4", "--data-parallel-rank", "4"}, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "--data-parallel-rank: data_parallel_rank (4) must be in the range [0, 4)");
}

TEST(SimOptions, EngineKindIsVllmUnlessSglangIsAsked) {
  EXPECT_FALSE(parse({}).dp.sglang);
  EXPECT_TRUE(parse({"--engine-kind", "sglang", "--data-parallel-size", "4"}).dp.sglang);
  EXPECT_FALSE(parse({"--engine-kind", "vllm"}).dp.sglang);
  std::vector<std::string> errors;
  parse({"--engine-kind", "trtllm"}, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "--engine-kind: expected vllm or sglang");
}

}  // namespace
}  // namespace ramjet::sim
