#include "upstream/engine_scrape.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace ramjet::upstream {
namespace {

using std::chrono::milliseconds;

// What ramjet-sim --gpus 2 serves, shortened (two DP ranks behind one URL for the sums).
constexpr std::string_view kSimText = R"(# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 3
vllm:num_requests_running{model_name="m",engine="1"} 2
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m",engine="0"} 1
vllm:num_requests_waiting{model_name="m",engine="1"} 0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m",engine="0"} 0.5
vllm:kv_cache_usage_perc{model_name="m",engine="1"} 0.25
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="m",engine="0"} 1000
vllm:prefix_cache_queries_total{model_name="m",engine="1"} 500
vllm:prefix_cache_hits_total{model_name="m",engine="0"} 600
vllm:prefix_cache_hits_total{model_name="m",engine="1"} 150
vllm:prompt_tokens_total{model_name="m",engine="0"} 2000
vllm:generation_tokens_total{model_name="m",engine="0"} 300
vllm:request_success_total{model_name="m",engine="0",finished_reason="stop"} 4
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-sim-0-0",device="nvidia0",modelName="ramjet-sim GPU"} 40
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-sim-0-1",device="nvidia1",modelName="ramjet-sim GPU"} 41
DCGM_FI_DEV_FB_USED{gpu="0"} 44050
DCGM_FI_DEV_FB_USED{gpu="1"} 44051
DCGM_FI_DEV_FB_FREE{gpu="0"} 53837
DCGM_FI_DEV_POWER_USAGE{gpu="0"} 280.5
DCGM_FI_DEV_GPU_TEMP{gpu="1"} 57
DCGM_FI_DEV_SM_CLOCK{gpu="0"} 2430
DCGM_FI_DEV_MEM_CLOCK{gpu="0"} 14001
DCGM_FI_DEV_UNKNOWN_FIELD{gpu="0"} 1
DCGM_FI_DEV_GPU_UTIL{UUID="no gpu label"} 99
)";

TEST(EngineScrape, VllmSeriesAreSummedOverLabelSetsAndKvUsageIsAveraged) {
  EngineSample s;
  std::vector<GpuSample> gpus;
  ASSERT_TRUE(read_engine_metrics(kSimText, {}, s, gpus).ok());
  EXPECT_TRUE(s.ok);
  EXPECT_GT(s.unix_ms, 1'600'000'000'000);
  EXPECT_EQ(s.running, 5);
  EXPECT_EQ(s.waiting, 1);
  EXPECT_EQ(s.kv_usage, 0.375);
  EXPECT_EQ(s.prefix_queries, 1500);
  EXPECT_EQ(s.prefix_hits, 750);
  EXPECT_EQ(s.prompt_tokens, 2000);
  EXPECT_EQ(s.generation_tokens, 300);
}

TEST(EngineScrape, ARankReadsOnlyItsOwnEngineLabel) {
  constexpr std::string_view kTwoRanks = R"(vllm:num_requests_running{engine="0",model_name="m"} 5
vllm:num_requests_running{engine="1",model_name="m"} 2
vllm:num_requests_waiting{engine="0",model_name="m"} 1
vllm:num_requests_waiting{engine="1",model_name="m"} 0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.961
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.392
)";
  EngineSample s;
  std::vector<GpuSample> gpus;
  ASSERT_TRUE(read_engine_metrics(kTwoRanks, {}, s, gpus, 64, 1u).ok());
  EXPECT_EQ(s.running, 2);
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ(s.kv_usage, 0.392);
  ASSERT_TRUE(read_engine_metrics(kTwoRanks, {}, s, gpus, 64, 0u).ok());
  EXPECT_EQ(s.running, 5);
  EXPECT_EQ(s.waiting, 1);
  ASSERT_TRUE(read_engine_metrics(kTwoRanks, {}, s, gpus).ok());  // the whole engine: summed
  EXPECT_EQ(s.running, 7);
  ASSERT_TRUE(read_engine_metrics(kTwoRanks, {}, s, gpus, 64, 3u).ok());  // a rank it does not have
  EXPECT_FALSE(s.running);
  EXPECT_EQ(s.dp_ranks, std::optional<uint32_t>(2));  // every rank's series counts, whichever rank reads
}

TEST(EngineScrape, TheRanksAnEngineReportsAreItsLargestEngineLabelPlusOne) {
  EngineSample s;
  std::vector<GpuSample> gpus;
  ASSERT_TRUE(read_engine_metrics("vllm:num_requests_running{engine=\"0\"} 1\n", {}, s, gpus).ok());
  EXPECT_EQ(s.dp_ranks, std::optional<uint32_t>(1));
  ASSERT_TRUE(read_engine_metrics("vllm:num_requests_running{engine=\"3\"} 1\nvllm:num_requests_running{engine=\"1\"} 1\n",
                                  {}, s, gpus).ok());
  EXPECT_EQ(s.dp_ranks, std::optional<uint32_t>(4));
  // No engine label, or one that is no rank number: nothing said.
  for (std::string_view text : {"vllm:num_requests_running 1\n", "vllm:num_requests_running{engine=\"x\"} 1\n",
                                "vllm:num_requests_running{engine=\"5000\"} 1\n",
                                "vllm:num_requests_waiting{engine=\"7\"} 1\n"}) {
    ASSERT_TRUE(read_engine_metrics(text, {}, s, gpus).ok());
    EXPECT_FALSE(s.dp_ranks) << text;
  }
}

TEST(EngineScrape, TheKvPoolIsReadFromCacheConfigInfosLabels) {
  // vLLM 0.32's info gauge (the sim writes the same), one per rank.
  constexpr std::string_view kInfo =
      R"(vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",num_gpu_blocks="4096"} 1.0
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="100"} 1.0
vllm:num_requests_running{engine="0"} 1
)";
  EngineSample s;
  std::vector<GpuSample> gpus;
  ASSERT_TRUE(read_engine_metrics(kInfo, {}, s, gpus, 64, 0u).ok());
  EXPECT_EQ(s.kv_capacity_tokens, 65536.0);
  ASSERT_TRUE(read_engine_metrics(kInfo, {}, s, gpus, 64, 1u).ok());
  EXPECT_EQ(s.kv_capacity_tokens, 1600.0);
  // Missing, empty, negative or absurd numbers: no pool.
  for (std::string_view bad : {R"(vllm:cache_config_info{block_size="16"} 1)",
                               R"(vllm:cache_config_info{block_size="",num_gpu_blocks="9"} 1)",
                               R"(vllm:cache_config_info{block_size="16",num_gpu_blocks="-3"} 1)",
                               R"(vllm:cache_config_info{block_size="16",num_gpu_blocks="0"} 1)",
                               R"(vllm:cache_config_info{block_size="16x",num_gpu_blocks="9"} 1)",
                               R"(vllm:cache_config_info{block_size="16",num_gpu_blocks="99999999999999999999"} 1)"}) {
    const std::string text = std::string(bad) + "\n";
    ASSERT_TRUE(read_engine_metrics(text, {}, s, gpus).ok()) << bad;
    EXPECT_FALSE(s.kv_capacity_tokens) << bad;
  }
}

TEST(EngineScrape, TheActiveLoraAdaptersAreTheLatestLabelSetOfLoraRequestsInfo) {
  // vLLM 0.32 (v1/metrics/loggers.py): the gauge keeps every label set it ever set, each at the
  // time it was last current; the latest is now.
  constexpr std::string_view kInfo =
      R"(vllm:lora_requests_info{max_lora="2",running_lora_adapters="old",waiting_lora_adapters=""} 1.7e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql,chat",waiting_lora_adapters="sql,law"} 1.700000005e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1.700000001e+09
vllm:num_requests_running{engine="0"} 1
)";
  EngineSample s;
  std::vector<GpuSample> gpus;
  ASSERT_TRUE(read_engine_metrics(kInfo, {}, s, gpus).ok());
  ASSERT_TRUE(s.lora);
  EXPECT_EQ(s.lora->max_loras, 2u);
  EXPECT_EQ(s.lora->active, (std::vector<std::string>{"sql", "chat", "sql", "law"}));
  // Without the gauge (no --enable-lora), or with a max_lora that is not a count: none.
  for (std::string_view text : {"vllm:num_requests_running 1\n",
                                "vllm:lora_requests_info{max_lora=\"x\",running_lora_adapters=\"a\"} 5\n",
                                "vllm:lora_requests_info{running_lora_adapters=\"a\"} 5\n"}) {
    ASSERT_TRUE(read_engine_metrics(text, {}, s, gpus).ok()) << text;
    EXPECT_FALSE(s.lora) << text;
  }
  // An idle engine: no adapter active, every slot free.
  ASSERT_TRUE(read_engine_metrics("vllm:lora_requests_info{max_lora=\"1\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} 9\n", {}, s, gpus).ok());
  ASSERT_TRUE(s.lora);
  EXPECT_EQ(s.lora->max_loras, 1u);
  EXPECT_TRUE(s.lora->active.empty());
}

TEST(EngineScrape, DcgmSeriesBecomeOneSamplePerGpuLabel) {
  EngineSample s;
  std::vector<GpuSample> gpus;
  ASSERT_TRUE(read_engine_metrics(kSimText, {}, s, gpus).ok());
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].device, "0");
  EXPECT_EQ(gpus[0].util_pct, 40);
  EXPECT_EQ(gpus[0].fb_used_mib, 44050);
  EXPECT_EQ(gpus[0].fb_free_mib, 53837);
  EXPECT_EQ(gpus[0].power_w, 280.5);
  EXPECT_FALSE(gpus[0].temp_c.has_value());
  EXPECT_EQ(gpus[0].sm_clock_mhz, 2430);
  EXPECT_EQ(gpus[0].mem_clock_mhz, 14001);
  EXPECT_EQ(gpus[1].device, "1");
  EXPECT_EQ(gpus[1].util_pct, 41);
  EXPECT_EQ(gpus[1].temp_c, 57);
  EXPECT_FALSE(gpus[1].power_w.has_value());
}

TEST(EngineScrape, SeriesTheEngineDoesNotExportStayEmpty) {
  EngineSample s;
  std::vector<GpuSample> gpus;
  ASSERT_TRUE(read_engine_metrics("vllm:num_requests_running 2\n", {}, s, gpus).ok());
  EXPECT_EQ(s.running, 2);
  EXPECT_FALSE(s.waiting || s.kv_usage || s.prefix_queries || s.prefix_hits || s.prompt_tokens ||
               s.generation_tokens);
  EXPECT_TRUE(gpus.empty());
}

TEST(EngineScrape, OlderVllmNamesAreReadWhenTheCurrentOnesAreAbsent) {
  EngineSample s;
  std::vector<GpuSample> gpus;
  ASSERT_TRUE(read_engine_metrics("vllm:gpu_cache_usage_perc{a=\"1\"} 0.2\n"
                                  "vllm:gpu_prefix_cache_queries_total 10\n"
                                  "vllm:gpu_prefix_cache_hits_total 4\n",
                                  {}, s, gpus)
                  .ok());
  EXPECT_EQ(s.kv_usage, 0.2);
  EXPECT_EQ(s.prefix_queries, 10);
  EXPECT_EQ(s.prefix_hits, 4);
  // With both spellings present, the current name wins.
  ASSERT_TRUE(read_engine_metrics("vllm:gpu_cache_usage_perc 0.2\nvllm:kv_cache_usage_perc 0.7\n", {}, s, gpus).ok());
  EXPECT_EQ(s.kv_usage, 0.7);
}

TEST(EngineScrape, AMalformedTextLeavesTheOutputsUntouched) {
  EngineSample s;
  s.running = 42;
  std::vector<GpuSample> gpus(1);
  auto r = read_engine_metrics("vllm:num_requests_running 1\nbroken line here\n", {}, s, gpus);
  EXPECT_EQ(r.error, metrics::PromTextError::kBadValue);
  EXPECT_EQ(s.running, 42);
  EXPECT_EQ(gpus.size(), 1u);
}

TEST(EngineScrape, GpusPerEngineAreCapped) {
  std::string text;
  for (int g = 0; g < 100; ++g) text += "DCGM_FI_DEV_GPU_UTIL{gpu=\"" + std::to_string(g) + "\"} 1\n";
  EngineSample s;
  std::vector<GpuSample> gpus;
  ASSERT_TRUE(read_engine_metrics(text, {}, s, gpus, 8).ok());
  ASSERT_EQ(gpus.size(), 8u);
  EXPECT_EQ(gpus[7].device, "7");
}

TEST(EngineScrape, NvidiaSmiCsvGivesOneHostGpuPerLineAndEmptyFieldsForNotAvailable) {
  auto gpus = parse_nvidia_smi_csv(
      "0, 35, 1234, 80000, 75.32, 45, 1410, 1215\n"
      "1, [N/A], 10, 90000, [Not Supported], 50, 300, 405\r\n"
      "garbage line\n"
      "2, 1, 2, 3\n");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].engine, SIZE_MAX);
  EXPECT_EQ(gpus[0].device, "0");
  EXPECT_EQ(gpus[0].util_pct, 35);
  EXPECT_EQ(gpus[0].fb_used_mib, 1234);
  EXPECT_EQ(gpus[0].fb_free_mib, 80000);
  EXPECT_EQ(gpus[0].power_w, 75.32);
  EXPECT_EQ(gpus[0].temp_c, 45);
  EXPECT_EQ(gpus[0].sm_clock_mhz, 1410);
  EXPECT_EQ(gpus[0].mem_clock_mhz, 1215);
  EXPECT_EQ(gpus[1].device, "1");
  EXPECT_FALSE(gpus[1].util_pct.has_value());
  EXPECT_FALSE(gpus[1].power_w.has_value());
  EXPECT_EQ(gpus[1].mem_clock_mhz, 405);
}

class TempScript {
 public:
  explicit TempScript(const std::string& body) {
    dir_ = std::filesystem::temp_directory_path() / ("rj-scrape-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    path_ = dir_ / "nvidia-smi";
    std::ofstream(path_) << "#!/bin/sh\n" << body << "\n";
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all);
  }
  ~TempScript() { std::filesystem::remove_all(dir_); }
  std::string path() const { return path_.string(); }
  std::string dir() const { return dir_.string(); }

 private:
  std::filesystem::path dir_, path_;
};

TEST(EngineScrape, FindExecutableSearchesThePathInOrder) {
  TempScript s("exit 0");
  EXPECT_EQ(find_executable("nvidia-smi", "/nonexistent:" + s.dir() + ":/usr/bin"), s.path());
  EXPECT_EQ(find_executable("nvidia-smi", "/nonexistent"), "");
  EXPECT_EQ(find_executable("sh", "::/bin"), "/bin/sh");
}

TEST(EngineScrape, RunBoundedReturnsTheOutputOfAProcessThatExitsZero) {
  TempScript s("echo \"$1\"; echo line2");
  auto out = run_bounded({s.path(), "arg"}, milliseconds(5000), 1024);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, "arg\nline2\n");
}

TEST(EngineScrape, RunBoundedRefusesFailureTimeoutAndTooMuchOutput) {
  TempScript fail("echo x; exit 3");
  EXPECT_FALSE(run_bounded({fail.path()}, milliseconds(5000), 1024).has_value());
  TempScript slow("exec sleep 10");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(run_bounded({slow.path()}, milliseconds(200), 1024).has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3)) << "the child is killed at the deadline";
  TempScript loud("exec yes");
  EXPECT_FALSE(run_bounded({loud.path()}, milliseconds(5000), 4096).has_value());
  EXPECT_FALSE(run_bounded({"/nonexistent/binary"}, milliseconds(500), 1024).has_value());
}

TEST(EngineScrape, TheStoreKeepsTheLastSampleAndMarksItStaleOnError) {
  EngineScrapeConfig c;
  c.engines.resize(2);
  EngineScraper scraper(c);
  ASSERT_EQ(scraper.engines().size(), 2u);
  EXPECT_FALSE(scraper.engines()[0].ok);
  EngineSample s;
  s.ok = true;
  s.running = 4;
  GpuSample g;
  g.device = "0";
  g.util_pct = 10;
  scraper.record(1, s, {g});
  EXPECT_TRUE(scraper.engines()[1].ok);
  ASSERT_EQ(scraper.gpus().size(), 1u);
  EXPECT_EQ(scraper.gpus()[0].engine, 1u);
  scraper.record_error(1, ScrapeError::kTimeout);
  EXPECT_FALSE(scraper.engines()[1].ok);
  EXPECT_EQ(scraper.engines()[1].running, 4) << "the last values stay, marked not ok";
  // A DCGM exporter URL for the engine replaces the devices its /metrics showed.
  GpuSample u;
  u.device = "7";
  scraper.record_gpu_url(1, {u});
  ASSERT_EQ(scraper.gpus().size(), 1u);
  EXPECT_EQ(scraper.gpus()[0].device, "7");
  GpuSample h;
  h.device = "0";
  scraper.record_host_gpus({h});
  ASSERT_EQ(scraper.gpus().size(), 2u);
  EXPECT_EQ(scraper.gpus()[1].engine, SIZE_MAX);
}

TEST(EngineScrape, MetricsShowEveryErrorReasonAndOnlyReportedValues) {
  EngineScrapeConfig c;
  c.engines.resize(2);
  EngineScraper scraper(c);
  EngineSample s;
  s.ok = true;
  s.running = 4;
  s.kv_usage = 0.5;
  s.prefix_queries = 200;
  s.prefix_hits = 50;
  scraper.record(0, s, {});
  scraper.record_error(1, ScrapeError::kConnect);
  metrics::Exposition x;
  scraper.write_metrics(x);
  const std::string text = x.take();
  EXPECT_NE(text.find("ramjet_engine_scrape_up{upstream=\"0\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_engine_scrape_up{upstream=\"1\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_engine_scrape_errors_total{upstream=\"1\",reason=\"connect\"} 1\n"), std::string::npos);
  for (std::string_view reason : {"connect", "timeout", "http", "too_large", "protocol", "parse"}) {
    EXPECT_NE(text.find("ramjet_engine_scrape_errors_total{upstream=\"0\",reason=\"" + std::string(reason) + "\"} 0\n"),
              std::string::npos)
        << reason;
  }
  EXPECT_NE(text.find("ramjet_engine_requests_running{upstream=\"0\"} 4\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("ramjet_engine_requests_running{upstream=\"1\"}"), std::string::npos) << text;
  EXPECT_EQ(text.find("ramjet_engine_requests_waiting{"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_engine_kv_cache_usage{upstream=\"0\"} 0.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_engine_prefix_cache_hit_ratio{upstream=\"0\"} 0.25\n"), std::string::npos) << text;
}

TEST(EngineScrape, TheLoopCountsErrorsForADeadEngineAndReadsHostGpusWithNvidiaSmi) {
  TempScript smi("echo '0, 12, 100, 200, 50.5, 40, 1000, 2000'; echo '1, 13, 100, 200, 51, 41, 1000, 2000'");
  // A port nothing listens on: bind, read the port, close.
  boost::asio::io_context ctx;
  uint16_t port = 0;
  {
    boost::asio::ip::tcp::acceptor a(ctx, {boost::asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }
  const char* old_path = std::getenv("PATH");
  const std::string saved = old_path ? old_path : "";
  ::setenv("PATH", (smi.dir() + ":" + saved).c_str(), 1);
  EngineScrapeConfig c;
  c.interval = milliseconds(50);
  c.timeout = milliseconds(200);
  c.engines = {config::UpstreamUrl{"127.0.0.1", port, ""}};
  // Each scrape tells on_fetch before it asks (the load board notes the engine's own in-flight
  // count then) and on_sample after.
  size_t fetches = 0;
  size_t samples = 0;
  c.on_fetch = [&](size_t i) {
    EXPECT_EQ(i, 0u);
    EXPECT_EQ(fetches, samples);
    ++fetches;
  };
  c.on_sample = [&](size_t, const EngineSample*) {
    ++samples;
    EXPECT_EQ(fetches, samples);
  };
  {
    EngineScraper scraper(c);
    scraper.start(ctx);
    ::setenv("PATH", saved.c_str(), 1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline && scraper.gpus().size() < 2) ctx.run_for(milliseconds(50));
    ctx.run_for(milliseconds(200));
    const auto gpus = scraper.gpus();
    ASSERT_EQ(gpus.size(), 2u);
    EXPECT_EQ(gpus[0].engine, SIZE_MAX);
    EXPECT_EQ(gpus[1].device, "1");
    EXPECT_EQ(gpus[1].power_w, 51);
    EXPECT_FALSE(scraper.engines()[0].ok);
    EXPECT_GT(samples, 0u);
    metrics::Exposition x;
    scraper.write_metrics(x);
    const std::string text = x.take();
    EXPECT_EQ(text.find("ramjet_engine_scrape_errors_total{upstream=\"0\",reason=\"connect\"} 0\n"), std::string::npos)
        << "connect errors are counted: " << text;
    scraper.stop();
    ctx.run_for(milliseconds(100));  // the loop ends after the cancelled wait
  }
  ctx.restart();
  ctx.run();
}

// A scrape that throws (the loop spawns each detached: its exception goes nowhere) still lets the
// next tick scrape that engine: before, its busy flag stayed set and the engine was never read
// again.
TEST(EngineScrape, AScrapeThatThrowsDoesNotStopTheEnginesNextScrapes) {
  boost::asio::io_context ctx;
  uint16_t port = 0;
  {
    boost::asio::ip::tcp::acceptor a(ctx, {boost::asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }
  EngineScrapeConfig c;
  c.interval = milliseconds(30);
  c.timeout = milliseconds(100);
  c.engines = {config::UpstreamUrl{"127.0.0.1", port, ""}};
  size_t fetches = 0;
  c.on_fetch = [&](size_t) {
    if (++fetches == 1) throw std::runtime_error("the first scrape fails before it asks");
  };
  {
    EngineScraper scraper(c);
    scraper.start(ctx);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline && fetches < 3) ctx.run_for(milliseconds(30));
    EXPECT_GE(fetches, 3u);
    scraper.stop();
    ctx.run_for(milliseconds(100));
  }
  ctx.restart();
  ctx.run();
}

}  // namespace
}  // namespace ramjet::upstream
