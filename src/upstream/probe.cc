#include "upstream/probe.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "net/client.h"

namespace ramjet::upstream {

namespace asio = boost::asio;

Prober::Prober(Fleet& fleet, asio::io_context& ctx, ProbeConfig config)
    : fleet_(fleet), ctx_(ctx), config_(std::move(config)), timer_(ctx), busy_(fleet.size(), 0) {}

void Prober::start() { asio::co_spawn(ctx_, loop(), asio::detached); }

void Prober::stop() {
  stopped_ = true;
  asio::post(ctx_, [this] { timer_.cancel(); });
}

asio::awaitable<void> Prober::loop() {
  while (!stopped_) {
    // Engines not serving (unhealthy or warming) first, so a recovering engine passes the
    // readiness gate and is readmitted as early as possible.
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < fleet_.size(); ++i) {
        // Vacant: nothing to probe. A leaving engine is still probed, so its state is current if
        // it is listed again before it left.
        if (!fleet_.roster().listed(i)) continue;
        bool healthy = fleet_.at(i).state() == EngineState::kHealthy;
        if ((pass == 0) == healthy || busy_[i]) continue;
        busy_[i] = 1;
        asio::co_spawn(ctx_, probe_one(i), asio::detached);
      }
    }
    timer_.expires_after(config_.interval);
    boost::system::error_code ec;
    co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<void> Prober::probe_one(size_t i) {
  const std::shared_ptr<const net::Member> engine = fleet_.member(i);
  if (!engine) {
    busy_[i] = 0;
    co_return;
  }
  const uint64_t incarnation = engine->incarnation;
  const config::UpstreamUrl& url = engine->url;
  net::GetFailure failure = net::GetFailure::kNone;
  auto res = co_await net::simple_get(url, "/health", config_.bearer, config_.timeout,
                                      config_.max_body, failure);
  if (failure == net::GetFailure::kNone && res.status == 404) {
    res = co_await net::simple_get(url, "/v1/models", config_.bearer, config_.timeout,
                                   config_.max_body, failure);
  }
  if (config_.rank_generation && engine->dp_rank && failure == net::GetFailure::kNone && res.status == 200) {
    net::GetFailure gen = net::GetFailure::kNone;
    // vLLM reads the rank from X-Data-Parallel-Rank, SGLang from the body (RJ_UPSTREAM_ENGINE).
    const bool sglang = engine->engine == config::EngineKind::kSglang;
    std::string body = R"({"prompt":"ping","max_tokens":1})";
    if (sglang) body.insert(1, "\"routed_dp_rank\":" + std::to_string(*engine->dp_rank) + ",");
    (void)co_await net::simple_post(url, "/v1/completions", std::move(body), config_.bearer, config_.timeout,
                                    config_.max_body, gen, sglang ? std::nullopt : engine->dp_rank);
    if (gen == net::GetFailure::kTimeout) failure = gen;  // no answer: a wedged rank (any answer is one)
  }
  busy_[i] = 0;
  // Stopped, or the engine probed is not the one in the slot any more (it left while we asked).
  if (stopped_ || fleet_.roster().incarnation(i) != incarnation) co_return;
  switch (failure) {
    case net::GetFailure::kNone:
      if (res.status == 200) {
        fleet_.on_probe_success(i);
      } else {
        fleet_.on_probe_failure(i, ProbeFailure::kHttp);
      }
      break;
    case net::GetFailure::kTimeout: fleet_.on_probe_failure(i, ProbeFailure::kTimeout); break;
    case net::GetFailure::kConnect: fleet_.on_probe_failure(i, ProbeFailure::kConnect); break;
    case net::GetFailure::kTls: fleet_.on_probe_failure(i, ProbeFailure::kTls); break;
    case net::GetFailure::kTooLarge: fleet_.on_probe_failure(i, ProbeFailure::kTooLarge); break;
    case net::GetFailure::kProtocol: fleet_.on_probe_failure(i, ProbeFailure::kProtocol); break;
  }
}

}  // namespace ramjet::upstream
