// The EngineScraper's I/O and text readers: the scrape loop on an io context (engine /metrics
// and optional DCGM-exporter URLs through net::simple_get), nvidia-smi on a thread of its own,
// and the ramjet_engine_* metric families.
#include "upstream/engine_scrape.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <thread>

#include "common/log.h"
#include "net/client.h"

extern char** environ;

namespace ramjet::upstream {

namespace asio = boost::asio;

std::string find_executable(std::string_view name, std::string_view path) {
  while (true) {
    const size_t colon = path.find(':');
    std::string dir(path.substr(0, colon));
    if (!dir.empty()) {
      std::string candidate = dir + "/" + std::string(name);
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    if (colon == std::string_view::npos) return {};
    path.remove_prefix(colon + 1);
  }
}

std::optional<std::string> run_bounded(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                       size_t max_bytes) {
  if (argv.empty()) return std::nullopt;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return std::nullopt;
  }
  std::string out;
  bool ok = true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ok = false;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      ok = false;
      break;
    }
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF (or an error): the child closed its stdout
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      ok = false;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  if (!ok) ::kill(pid, SIGKILL);
  // The child has closed stdout (or was killed): it is exiting; a bounded wait for the rest.
  for (int i = 0; i < 200; ++i) {
    const pid_t w = ::waitpid(pid, &status, ok ? 0 : WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (w == 0) {
      ::kill(pid, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return out;
}

// ---------------------------------------------------------------------------- fetching

namespace {

std::optional<ScrapeError> from_get_failure(net::GetFailure f) {
  switch (f) {
    case net::GetFailure::kNone: return std::nullopt;
    case net::GetFailure::kTimeout: return ScrapeError::kTimeout;
    case net::GetFailure::kConnect:
    case net::GetFailure::kTls: return ScrapeError::kConnect;  // (the TLS reason is counted per engine)
    case net::GetFailure::kProtocol: return ScrapeError::kProtocol;
    case net::GetFailure::kTooLarge: return ScrapeError::kTooLarge;
  }
  return ScrapeError::kProtocol;
}

asio::awaitable<EngineMetricsFetch> fetch(const config::UpstreamUrl& url, std::string path,
                                          const EngineScrapeConfig& config) {
  EngineMetricsFetch out;
  net::GetFailure failure = net::GetFailure::kNone;
  auto res = co_await net::simple_get(url, std::move(path), config.bearer, config.timeout, config.max_body, failure);
  out.error = from_get_failure(failure);
  if (out.error) co_return out;
  out.status = res.status;
  if (res.status != 200) {
    out.error = ScrapeError::kHttp;
    co_return out;
  }
  out.ok = true;
  out.body = std::move(res.body);
  co_return out;
}

metrics::PromTextLimits limits_for(const EngineScrapeConfig& c) {
  metrics::PromTextLimits l;
  l.max_bytes = c.max_body;
  return l;
}

}  // namespace

asio::awaitable<EngineMetricsFetch> fetch_engine_metrics(const EngineScrapeConfig& config, size_t engine) {
  if (!config.roster) co_return co_await fetch(config.engines.at(engine), "/metrics", config);
  std::shared_ptr<const net::Member> m = config.roster->member(engine);
  if (!m) {
    EngineMetricsFetch none;
    none.error = ScrapeError::kConnect;
    co_return none;
  }
  co_return co_await fetch(m->url, "/metrics", config);
}

// ---------------------------------------------------------------------------- the loop

struct EngineScraper::Loop {
  explicit Loop(asio::io_context& c) : ctx(c), timer(c) {}
  asio::io_context& ctx;
  asio::steady_timer timer;
  std::atomic<bool> stopped{false};
  std::vector<char> busy, gpu_busy;  // one fetch per engine (and per GPU URL) at a time; ctx only
};

struct EngineScraper::Smi {
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool stopped = false;
};

namespace {

asio::awaitable<void> scrape_engine(EngineScraper* self, std::shared_ptr<EngineScraper::Loop> loop, size_t i);
asio::awaitable<void> scrape_gpu_url(EngineScraper* self, std::shared_ptr<EngineScraper::Loop> loop, size_t i);

}  // namespace

// Here rather than in engine_stats.cc: members need Loop and Smi complete.
EngineScraper::EngineScraper(EngineScrapeConfig config)
    : config_(std::move(config)),
      samples_(slots()),
      engine_gpus_(slots()),
      url_gpus_(slots()),
      errors_(new metrics::Counter[(slots() ? slots() : 1) * static_cast<size_t>(ScrapeError::kCount)]) {}

EngineScraper::~EngineScraper() {
  stop();
  if (smi_ && smi_->thread.joinable()) smi_->thread.join();
}

bool EngineScraper::scrapes_for_siblings(size_t i) const {
  if (!config_.roster) return true;
  const auto m = config_.roster->member(i);
  if (!m || !m->dp_rank) return true;
  for (size_t j : config_.roster->siblings(i)) {
    if (j < i && config_.roster->active(j)) return false;
  }
  return true;
}

void EngineScraper::start(asio::io_context& ctx) {
  if (!enabled() || loop_ || slots() == 0) return;
  loop_ = std::make_shared<Loop>(ctx);
  loop_->busy.assign(slots(), 0);
  loop_->gpu_busy.assign(slots(), 0);
  std::shared_ptr<Loop> loop = loop_;
  asio::co_spawn(
      ctx,
      [this, loop]() -> asio::awaitable<void> {
        while (!loop->stopped) {
          for (size_t i = 0; i < slots(); ++i) {
            if (config_.roster && !config_.roster->active(i)) continue;  // vacant or leaving
            if (!scrapes_for_siblings(i)) continue;  // an earlier rank's scrape reads this rank too
            if (!loop->busy[i]) {
              loop->busy[i] = 1;
              asio::co_spawn(loop->ctx, scrape_engine(this, loop, i), asio::detached);
            }
            if (i < config_.gpu_urls.size() && !loop->gpu_busy[i]) {
              loop->gpu_busy[i] = 1;
              asio::co_spawn(loop->ctx, scrape_gpu_url(this, loop, i), asio::detached);
            }
          }
          loop->timer.expires_after(config_.interval);
          boost::system::error_code ec;
          co_await loop->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        }
      },
      asio::detached);

  // Host GPUs: nvidia-smi when it exists and no DCGM exporter URLs are configured.
  if (!config_.nvidia_smi || !config_.gpu_urls.empty()) return;
  const char* path = std::getenv("PATH");
  std::string smi = find_executable("nvidia-smi", path ? path : "/usr/bin:/bin");
  if (smi.empty()) return;
  spdlog::info("engine scrape: reading host GPUs with nvidia-smi every {} ms", config_.interval.count());
  smi_ = std::make_unique<Smi>();
  Smi* st = smi_.get();
  st->thread = std::thread([this, st, smi] {
    const auto timeout = std::min(config_.interval, std::chrono::milliseconds(5000));
    std::unique_lock lock(st->mu);
    while (!st->stopped) {
      lock.unlock();
      auto out = run_bounded({smi, kNvidiaSmiQuery, "--format=csv,noheader,nounits"}, timeout, 64 * 1024);
      record_host_gpus(out ? parse_nvidia_smi_csv(*out) : std::vector<GpuSample>{});
      lock.lock();
      st->cv.wait_for(lock, config_.interval, [&] { return st->stopped; });
    }
  });
}

void EngineScraper::stop() {
  if (smi_) {
    {
      std::lock_guard lock(smi_->mu);
      smi_->stopped = true;
    }
    smi_->cv.notify_all();
  }
  std::shared_ptr<Loop> loop = std::move(loop_);
  if (!loop) return;
  loop->stopped = true;
  // The timer belongs to the context's thread: cancel it there (the handler holds the loop).
  asio::post(loop->ctx, [loop] { loop->timer.cancel(); });
}

namespace {

// Lets the loop start the next fetch of slot i (or of GPU URL i) when this one ends, however it
// ends: a scrape that threw (the loop spawns it detached: the exception goes nowhere) must not
// leave its engine unscraped for good.
struct Unbusy {
  std::vector<char>& busy;
  size_t i;
  ~Unbusy() { busy[i] = 0; }
};

asio::awaitable<void> scrape_engine(EngineScraper* self, std::shared_ptr<EngineScraper::Loop> loop, size_t i) {
  const Unbusy unbusy{loop->busy, i};
  const net::Roster* roster = self->config().roster;
  const uint64_t incarnation = roster ? roster->incarnation(i) : 0;
  if (self->config().on_fetch) {
    self->config().on_fetch(i);
    const auto asked = roster ? roster->member(i) : nullptr;
    if (asked && asked->dp_rank) {
      for (size_t j : roster->siblings(i)) {
        if (roster->active(j)) self->config().on_fetch(j);
      }
    }
  }
  EngineMetricsFetch f = co_await fetch_engine_metrics(self->config(), i);
  if (loop->stopped) co_return;
  if (roster && (roster->incarnation(i) != incarnation || !roster->active(i))) co_return;  // it left meanwhile
  // One scrape of an engine with data-parallel ranks serves every rank's slot: each reads its
  // own rank's series (vLLM's engine="<rank>" label); the engine's GPUs go to this slot alone.
  const auto member = roster ? roster->member(i) : nullptr;
  const std::optional<uint32_t> rank = member ? member->dp_rank : std::nullopt;
  std::vector<size_t> ranks_here{i};
  if (rank) {
    for (size_t j : roster->siblings(i)) {
      if (roster->active(j)) ranks_here.push_back(j);
    }
  }
  if (!f.ok) {
    for (size_t j : ranks_here) self->record_error(j, f.error.value_or(ScrapeError::kProtocol));
    co_return;
  }
  for (size_t j : ranks_here) {
    std::optional<uint32_t> rank_j = rank;
    if (j != i) {
      const auto m = roster->member(j);
      if (!m) continue;
      rank_j = m->dp_rank;
    }
    EngineSample sample;
    std::vector<GpuSample> gpus;
    if (!read_engine_metrics(f.body, limits_for(self->config()), sample, gpus, 64, rank_j).ok()) {
      self->record_error(j, ScrapeError::kParse);
      continue;
    }
    if (j != i) gpus.clear();
    self->record(j, std::move(sample), std::move(gpus));
  }
}

asio::awaitable<void> scrape_gpu_url(EngineScraper* self, std::shared_ptr<EngineScraper::Loop> loop, size_t i) {
  const Unbusy unbusy{loop->gpu_busy, i};
  const config::UpstreamUrl& url = self->config().gpu_urls[i];
  // http://host:9400/metrics: the URL's path is the target; a bare host means /metrics.
  EngineMetricsFetch f = co_await fetch(url, url.base_path.empty() ? "/metrics" : "", self->config());
  if (loop->stopped) co_return;
  EngineSample ignored;
  std::vector<GpuSample> gpus;
  if (!f.ok || !read_engine_metrics(f.body, limits_for(self->config()), ignored, gpus).ok()) {
    self->record_gpu_url(i, {});  // no stale devices
    co_return;
  }
  self->record_gpu_url(i, std::move(gpus));
}

}  // namespace

// ---------------------------------------------------------------------------- metrics

namespace {

enum class EngineFamily { kScrapeUp, kScrapeErrors, kRunning, kWaiting, kKvUsage, kPrefixHitRatio, kCount };

constexpr std::array<metrics::Family, static_cast<size_t>(EngineFamily::kCount)> kEngineFamilies = {{
    {"ramjet_engine_scrape_up", metrics::MetricKind::kGauge, "upstream",
     "1 when the last scrape of the engine's own /metrics succeeded and parsed, else 0."},
    {"ramjet_engine_scrape_errors_total", metrics::MetricKind::kCounter, "upstream,reason",
     "Failed scrapes of the engine's /metrics by reason: connect, timeout, http (not 200), "
     "too_large, protocol, parse."},
    {"ramjet_engine_requests_running", metrics::MetricKind::kGauge, "upstream",
     "The engine's vllm:num_requests_running (summed over its label sets) at the last scrape."},
    {"ramjet_engine_requests_waiting", metrics::MetricKind::kGauge, "upstream",
     "The engine's vllm:num_requests_waiting (summed over its label sets) at the last scrape."},
    {"ramjet_engine_kv_cache_usage", metrics::MetricKind::kGauge, "upstream",
     "The engine's vllm:kv_cache_usage_perc (0..1, averaged over its label sets) at the last "
     "scrape."},
    {"ramjet_engine_prefix_cache_hit_ratio", metrics::MetricKind::kGauge, "upstream",
     "The engine's prefix cache hits / queries (tokens) since the engine started, from "
     "vllm:prefix_cache_hits_total and vllm:prefix_cache_queries_total."},
}};

const metrics::Family& family(EngineFamily f) { return kEngineFamilies[static_cast<size_t>(f)]; }

}  // namespace

std::span<const metrics::Family> engine_families() { return kEngineFamilies; }

void EngineScraper::write_metrics(metrics::Exposition& x) const {
  using F = EngineFamily;
  const size_t n = slots();
  std::vector<EngineSample> samples = engines();
  auto label = [](size_t i) { return "upstream=\"" + std::to_string(i) + "\""; };
  x.family(family(F::kScrapeUp));
  for (size_t i = 0; i < n; ++i) x.sample(family(F::kScrapeUp).name, label(i), int64_t{samples[i].ok ? 1 : 0});
  x.family(family(F::kScrapeErrors));
  for (size_t i = 0; i < n; ++i) {
    for (size_t r = 0; r < static_cast<size_t>(ScrapeError::kCount); ++r) {
      x.sample(family(F::kScrapeErrors).name,
               label(i) + ",reason=\"" + std::string(scrape_error_label(static_cast<ScrapeError>(r))) + "\"",
               errors_[i * static_cast<size_t>(ScrapeError::kCount) + r].get());
    }
  }
  // Engine-reported values: a sample only while the engine reports the series (absent before
  // the first successful scrape, or when the engine does not export it).
  auto gauge = [&](F f, auto value) {
    x.family(family(f));
    for (size_t i = 0; i < n; ++i) {
      if (std::optional<double> v = value(samples[i])) x.sample(family(f).name, label(i), *v);
    }
  };
  gauge(F::kRunning, [](const EngineSample& s) { return s.running; });
  gauge(F::kWaiting, [](const EngineSample& s) { return s.waiting; });
  gauge(F::kKvUsage, [](const EngineSample& s) { return s.kv_usage; });
  gauge(F::kPrefixHitRatio, [](const EngineSample& s) -> std::optional<double> {
    if (!s.prefix_queries || !s.prefix_hits || *s.prefix_queries <= 0) return std::nullopt;
    return std::clamp(*s.prefix_hits / *s.prefix_queries, 0.0, 1.0);
  });
}

}  // namespace ramjet::upstream
