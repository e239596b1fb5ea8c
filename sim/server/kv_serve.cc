// sim/server/kv_serve: prefill/decode disaggregation of SimServer (docs/sim.md §8.4), as vLLM
// 0.32's NixlConnector behaves in pull mode. The producer: a finished prefill leg keeps its
// blocks (the engine holds them) under a lease of --kv-lease-seconds; a pull's completion
// (POST /sim/kv/done) or the lease's end frees them; heartbeats (POST /sim/kv/heartbeat) of a
// consumer still queueing the decode leg extend the lease. The consumer: a decode leg admitted by the
// engine is pulled over the side channel (POST /sim/kv/pull to remote_host:remote_port), waits
// the modelled transfer time, tells the producer it is done, and hands the engine the result.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <chrono>
#include <cstdio>

#include "sim/server/server.h"
#include "sim/server/server_io.h"

namespace ramjet::sim {

namespace asio = boost::asio;
namespace json = boost::json;
using detail::vllm_error;

namespace {

// vllm:nixl_xfer_time_seconds' buckets (NixlPromMetrics), +Inf last.
constexpr double kXferBuckets[] = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0};

std::chrono::steady_clock::duration wall(double virtual_s, double speed) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(virtual_s / speed));
}

}  // namespace


void SimServer::hold(Rank& rank, const RequestOutput& out) {
  std::string name;
  if (auto it = kv_names_.find(out.id); it != kv_names_.end()) {
    name = std::move(it->second);
    kv_names_.erase(it);
  } else {
    name = "sim-held-" + std::to_string(out.id);  // (every prefill leg is named at submit)
  }
  auto held = std::make_unique<Held>(ctx_, &rank, out.id);
  // The lease (NixlConnectorScheduler._kv_lease_duration): virtual seconds, like every engine time.
  held->lease.expires_after(wall(opt_.kv_transfer.lease_s, opt_.speed));
  arm_lease(name, *held);
  held_[name] = std::move(held);
  if (auto it = live_.find(out.id); it != live_.end()) {
    it->second->kv_answer = producer_params(ProducerAnswer{out.held_blocks, kv_engine_id_, name,
                                                           opt_.kv_transfer.side_channel_host, side_channel_port_,
                                                           out.held_tokens, out.cached_tokens});
  }
}

void SimServer::arm_lease(const std::string& name, Held& held) {
  held.lease.async_wait([this, name](boost::system::error_code ec) {
    if (ec) return;  // a heartbeat moved the deadline (and armed it again), or released
    auto it = held_.find(name);
    if (it == held_.end()) return;
    if (it->second->lease.expiry() > std::chrono::steady_clock::now()) return arm_lease(name, *it->second);
    release_lease(name, /*expired=*/true);
  });
}

asio::awaitable<void> SimServer::heartbeats(uint64_t id, Rank* rank) {
  // NixlBaseConnectorScheduler: while a decode leg waits for admission, its engine tells the
  // producer every lease/6 seconds (_send_heartbeats, "HB:<ids>") that it still wants the blocks;
  // a wedged engine core (paused) sends nothing.
  asio::steady_timer interval(ctx_);
  for (;;) {
    interval.expires_after(wall(opt_.kv_transfer.lease_s / 6, opt_.speed));
    boost::system::error_code ec;
    co_await interval.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    auto it = kv_pending_.find(id);
    if (it == kv_pending_.end()) co_return;  // pulled, or gone
    if (rank->paused) continue;
    const RemotePrefill remote = it->second;
    const std::string body = json::serialize(json::object{{"remote_request_id", remote.request_id}});
    auto op = side_post(ctx_.get_executor(), remote.host, remote.port, "/sim/kv/heartbeat", body,
                        opt_.kv_transfer.timeout_s);
    co_await std::move(op);
  }
}

void SimServer::release_lease(const std::string& name, bool expired) {
  auto it = held_.find(name);
  if (it == held_.end()) return;
  Rank& rank = *it->second->rank;
  rank.engine.release_held(it->second->id);
  ++(expired ? kv_.expired : kv_.sends_done);
  held_.erase(it);  // (from the lease's own handler: asio moved the handler out before calling it)
  rank.wake();      // freed blocks may let a waiting request start
  publish_counts(rank);
}

void SimServer::start_pull(Rank& rank, const KvLoad& load) {
  auto it = kv_pending_.find(load.id);
  if (it == kv_pending_.end()) {  // (every decode leg is registered at submit)
    if (auto out = rank.engine.finish_kv_load(load.id, false)) deliver(rank, {*out});
    rank.wake();
    return;
  }
  RemotePrefill remote = std::move(it->second);
  kv_pending_.erase(it);
  asio::co_spawn(ctx_, pull(&rank, load, std::move(remote)), asio::detached);
}

asio::awaitable<void> SimServer::pull(Rank* rank, KvLoad load, RemotePrefill remote) {
  json::array ids;
  for (uint32_t b : remote.block_ids) ids.push_back(b);
  const std::string body = json::serialize(json::object{{"remote_engine_id", remote.engine_id},
                                                        {"remote_request_id", remote.request_id},
                                                        {"remote_block_ids", json::array{std::move(ids)}}});
  auto op = side_post(ctx_.get_executor(), remote.host, remote.port, "/sim/kv/pull", body, opt_.kv_transfer.timeout_s);
  SideReply r = co_await std::move(op);
  // 404: the producer no longer holds the request (expired, or never there). vLLM's NIXL READ
  // does not know: it reads whatever the block ids hold now and the decode goes on with it
  // (the producer logs "Potentially invalid KV blocks"). So does the simulator, counting it.
  bool ok = r.status == 200 || r.status == 404;
  if (r.status == 404) ++kv_.loads_stale;
  if (ok) {
    const double seconds =
        opt_.kv_transfer.pull_ms / 1e3 + static_cast<double>(load.external_tokens) * opt_.kv_transfer.pull_us_per_token / 1e6;
    asio::steady_timer transfer(ctx_, wall(seconds, opt_.speed));
    boost::system::error_code ec;
    co_await transfer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    size_t b = 0;
    while (b < std::size(kXferBuckets) && seconds > kXferBuckets[b]) ++b;
    ++kv_.xfer_buckets[b];
    kv_.xfer_sum += seconds;
    ++kv_.xfer_count;
    // The READ's completion notification: the producer frees the blocks.
    const std::string done = json::serialize(json::object{{"remote_request_id", remote.request_id}});
    auto note = side_post(ctx_.get_executor(), remote.host, remote.port, "/sim/kv/done", done, opt_.kv_transfer.timeout_s);
    SideReply n = co_await std::move(note);
    if (n.status != 200) ++kv_.failed_notifications;
  }
  ++(ok ? kv_.loads_ok : kv_.loads_failed);
  if (auto out = rank->engine.finish_kv_load(load.id, ok)) deliver(*rank, {*out});
  rank->wake();
  publish_counts(*rank);
}

void SimServer::notify_done(const RemotePrefill& remote) {
  // NixlConnectorScheduler.request_finished of a decode leg never scheduled (aborted, or refused
  // by the API server: _with_kv_transfer_rejection_cleanup): the producer is told to free.
  const std::string done = json::serialize(json::object{{"remote_request_id", remote.request_id}});
  asio::co_spawn(
      ctx_,
      [](asio::any_io_executor ex, RemotePrefill r, std::string body, double timeout) -> asio::awaitable<void> {
        co_await side_post(ex, r.host, r.port, "/sim/kv/done", std::move(body), timeout);
      }(ctx_.get_executor(), remote, done, opt_.kv_transfer.timeout_s),
      asio::detached);
}

std::string SimServer::side_channel(const std::string& path, const std::string& body, unsigned& status) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  const json::value* name = !ec && v.is_object() ? v.as_object().if_contains("remote_request_id") : nullptr;
  if (!opt_.kv_transfer.enabled() || name == nullptr || !name->is_string()) {
    status = 400;
    return vllm_error(opt_.kv_transfer.enabled() ? "remote_request_id is required" : "no KV connector (--kv-role)",
                      "BadRequestError", 400);
  }
  const std::string id(name->as_string());
  auto it = held_.find(id);
  if (path == "/sim/kv/pull") {
    // The handshake: a request for another engine (a restarted producer) fails the transfer.
    const json::value* engine = v.as_object().if_contains("remote_engine_id");
    if (engine == nullptr || !engine->is_string() || engine->as_string() != kv_engine_id_) {
      status = 409;
      return vllm_error("remote_engine_id does not name this engine", "ConflictError", 409);
    }
    if (it == held_.end()) {
      status = 404;
      return vllm_error("no blocks held for this request", "NotFoundError", 404);
    }
    ++kv_.pulls_served;
    const auto st = it->second->rank->engine.stats();
    return json::serialize(json::object{{"remote_request_id", id}, {"block_size", st.block_size}});
  }
  if (path == "/sim/kv/heartbeat") {
    // _handle_heartbeat: the lease now ends no sooner than 2/3 of a lease from now.
    bool extended = false;
    if (it != held_.end()) {
      const auto until = std::chrono::steady_clock::now() + wall(opt_.kv_transfer.lease_s * 2 / 3, opt_.speed);
      if (until > it->second->lease.expiry()) {
        it->second->lease.expires_at(until);  // (cancels the pending wait)
        arm_lease(id, *it->second);
        extended = true;
      }
      ++kv_.heartbeats;
    }
    return json::serialize(json::object{{"extended", extended}});
  }
  if (path == "/sim/kv/done") {
    if (it == held_.end()) {
      ++kv_.after_expiry;  // vllm:nixl_num_notifications_after_expiry
      return json::serialize(json::object{{"released", false}});
    }
    release_lease(id, /*expired=*/false);
    return json::serialize(json::object{{"released", true}});
  }
  status = 404;
  return vllm_error("unknown side-channel path", "NotFoundError", 404);
}

void SimServer::write_kv_metrics(metrics::Exposition& x, const std::vector<std::string>& labels) const {
  if (!opt_.kv_transfer.enabled()) return;
  auto per_rank = [&](std::string_view name, std::string_view help, auto value) {
    x.family(name, "counter", help);
    for (size_t i = 0; i < ranks_.size(); ++i) x.sample(name, labels[i], value(ranks_[i]->engine.stats()));
  };
  per_rank("vllm:external_prefix_cache_queries_total",
           "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of "
           "queried tokens.",
           [](const EngineStats& s) { return static_cast<double>(s.external_prefix_cache_queries); });
  per_rank("vllm:external_prefix_cache_hits_total",
           "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of "
           "cached tokens.",
           [](const EngineStats& s) { return static_cast<double>(s.external_prefix_cache_hits); });
  // The NIXL series of one engine core (kv roles run one rank).
  const std::string& l = labels.front();
  x.family("vllm:nixl_xfer_time_seconds", "histogram", "Histogram of transfer duration for NIXL KV Cache transfers.");
  uint64_t cumulative = 0;
  for (size_t b = 0; b < kv_.xfer_buckets.size(); ++b) {
    cumulative += kv_.xfer_buckets[b];
    char le[32];
    if (b < std::size(kXferBuckets)) std::snprintf(le, sizeof le, "%g", kXferBuckets[b]);
    else std::snprintf(le, sizeof le, "+Inf");
    x.sample("vllm:nixl_xfer_time_seconds_bucket", l + ",le=\"" + le + "\"", cumulative);
  }
  x.sample("vllm:nixl_xfer_time_seconds_count", l, kv_.xfer_count);
  x.sample("vllm:nixl_xfer_time_seconds_sum", l, kv_.xfer_sum);
  x.family("vllm:nixl_num_failed_transfers_total", "counter",
           "Number of failed NIXL KV Cache transfers, including handshake and notification failures.");
  x.sample("vllm:nixl_num_failed_transfers_total", l, kv_.loads_failed + kv_.failed_notifications);
  x.family("vllm:nixl_num_kv_expired_reqs_total", "counter", "Number of requests that had their KV expire.");
  x.sample("vllm:nixl_num_kv_expired_reqs_total", l, kv_.expired);
  x.family("vllm:nixl_num_notifications_after_expiry_total", "counter",
           "Number of completion notifications for requests that were no longer tracked.");
  x.sample("vllm:nixl_num_notifications_after_expiry_total", l, kv_.after_expiry);
}

json::object SimServer::kv_stats() const {
  const EngineStats st = ranks_.front()->engine.stats();
  return json::object{{"role", opt_.kv_transfer.role},
                      {"engine_id", kv_engine_id_},
                      {"held_requests", st.held_requests},
                      {"held_blocks", st.held_blocks},
                      {"loading", st.loading},
                      {"pulls_served", kv_.pulls_served},
                      {"sends_done", kv_.sends_done},
                      {"expired", kv_.expired},
                      {"notifications_after_expiry", kv_.after_expiry},
                      {"loads_ok", kv_.loads_ok},
                      {"loads_failed", kv_.loads_failed},
                      {"loads_stale", kv_.loads_stale},
                      {"heartbeats", kv_.heartbeats},
                      {"external_prefix_cache_queries", st.external_prefix_cache_queries},
                      {"external_prefix_cache_hits", st.external_prefix_cache_hits}};
}

}  // namespace ramjet::sim
