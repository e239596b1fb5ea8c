#include "sim/server/server.h"

#include <sys/socket.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <chrono>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <deque>

#include "metrics/metrics.h"
#include "sim/server/server_io.h"

namespace ramjet::sim {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
// server_io.h: the HTTP helpers shared by the server's files.
using detail::find;
using detail::vllm_error;
using detail::wall_now;
using detail::write_response;

SimServer::SimServer(asio::io_context& ctx, SimOptions options, std::vector<KvPublisher*> publishers,
                     Prompter prompter)
    : ctx_(ctx),
      frontend_(std::make_unique<asio::thread_pool>(1)),
      opt_(std::move(options)),
      prompter_(std::move(prompter)),
      coordinator_(opt_.local_ranks().size()),
      coordinator_wake_(ctx),
      started_(std::chrono::steady_clock::now()),
      rng_(opt_.seed),
      hang_(opt_.faults.hang),
      error_rate_(opt_.faults.error_rate),
      error_status_(opt_.faults.error_status),
      health_fail_(opt_.faults.health_fail),
      drop_header_bytes_(opt_.faults.drop_header_bytes),
      stall_after_tokens_(opt_.faults.stall_after_tokens),
      garbage_(opt_.faults.garbage) {
  const std::vector<int> ranks = opt_.local_ranks();
  for (size_t i = 0; i < ranks.size(); ++i) {
    ranks_.push_back(std::make_unique<Rank>(ctx, i, ranks[i], opt_.engine, i < publishers.size() ? publishers[i] : nullptr));
    ranks_.back()->slow_ms = opt_.faults.slow_ms;
  }
  const uint32_t servers = opt_.api_servers();
  for (uint32_t i = 0; i < servers; ++i) api_servers_.emplace_back(ranks_.size(), servers, i);
  std::random_device rd;
  id_salt_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  disabled_thinking_effort_ = prompter_.disabled_thinking_effort();
  kv_engine_id_ = opt_.kv_transfer.engine_id.empty() ? random_engine_id() : opt_.kv_transfer.engine_id;
  std::string names;
  for (const auto& n : opt_.served_model_names) names += n + ",";
  fingerprint_ = detail::system_fingerprint(
      opt_.engine_version, opt_.model_root + "|" + names + "|" + std::to_string(opt_.engine.max_model_len) + "|" +
                               std::to_string(opt_.engine.block_size) + "|" + std::to_string(opt_.engine.num_gpu_blocks));
}

uint64_t SimServer::engine_pool_tokens() const {
  const auto st = ranks_.front()->engine.stats();
  return static_cast<uint64_t>(st.num_gpu_blocks - 1) * st.block_size;  // minus the null block
}

SimServer::~SimServer() {
  if (frontend_) frontend_->join();
}

asio::awaitable<SimServer::Tokenized> SimServer::tokenize(std::string body) const {
  Tokenized out;
  boost::system::error_code jec;
  json::value v = json::parse(body, jec);
  if (jec || !v.is_object()) {
    out.error = "request body must be a JSON object";
  } else if (find(v.as_object(), "messages")) {
    // Chat style: add_special_tokens defaults to false (the template writes the specials).
    auto ids = prompter_.chat(v.as_object());
    if (ids) out.tokens = std::move(ids.value());
    else out.error = ids.error().message;
  } else if (auto* pr = find(v.as_object(), "prompt"); pr && pr->is_string()) {
    bool add_special = true;  // completion style: vLLM's default
    if (auto* a = find(v.as_object(), "add_special_tokens"); a && a->is_bool()) add_special = a->as_bool();
    auto ids = prompter_.text(pr->as_string(), add_special);
    if (ids) out.tokens = std::move(ids.value());
    else out.error = ids.error().message;
  } else {
    out.error = "prompt or messages is required";
  }
  co_return out;
}

void SimServer::start() {
  for (auto& r : ranks_) asio::co_spawn(ctx_, drive(*r), asio::detached);
  if (ranks_.size() > 1) asio::co_spawn(ctx_, coordinate(), asio::detached);
}

asio::awaitable<void> SimServer::drive(Rank& rank) {
  using clock = std::chrono::steady_clock;
  asio::steady_timer timer(ctx_);
  auto due = clock::now();
  for (;;) {
    boost::system::error_code ec;
    if (rank.engine.idle() || rank.paused || rank.asleep) {
      rank.idle_wake.expires_at(clock::time_point::max());
      co_await rank.idle_wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      due = clock::now();
      continue;
    }
    StepResult r = rank.engine.step(wall_now());
    ++rank.steps;
    rank.virtual_s += r.duration_s;
    due += std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(r.duration_s / opt_.speed));
    auto now = clock::now();
    // The slow fault is wall time on top of the model: a degraded engine, whatever --speed says.
    if (rank.slow_ms) due = std::max(due, now) + std::chrono::milliseconds(rank.slow_ms);
    if (now > due) {
      double lag = std::chrono::duration<double>(now - due).count();
      if (lag > 0.001) ++rank.late_steps;
      rank.max_lag_s = std::max(rank.max_lag_s, lag);
      if (lag > 0.25) due = now;  // far behind (e.g. a paused process): do not try to catch up
    } else {
      timer.expires_at(due);
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    deliver(rank, r.outputs);
    for (const KvLoad& load : r.kv_loads) start_pull(rank, load);
    publish_counts(rank);
  }
}

void SimServer::deliver(Rank& rank, const std::vector<RequestOutput>& outputs) {
  for (const auto& out : outputs) {
    if (out.held) hold(rank, out);  // before the Live reads its answer
    if (out.finish != FinishReason::kNone) {
      size_t k = out.finish == FinishReason::kStop ? 0 : out.finish == FinishReason::kLength ? 1 : 2;
      if (out.finish != FinishReason::kError) ++rank.success_by_reason[k];
      // The API server that placed it counts it out (DPLBAsyncMPClient.process_engine_outputs).
      if (auto p = placed_.find(out.id); p != placed_.end()) {
        api_servers_[p->second].finished(rank.index);
        placed_.erase(p);
      }
    }
    auto it = live_.find(out.id);
    if (it == live_.end()) continue;
    it->second->updates.push_back(out);
    it->second->wake.cancel();
  }
}

asio::awaitable<void> SimServer::coordinate() {
  // Coordinator time is virtual (wall × --speed), so its 100 ms interval scales like the steps.
  auto now_s = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count() * opt_.speed;
  };
  for (;;) {
    if (auto snapshot = coordinator_.maybe_publish(now_s())) {
      for (auto& c : api_servers_) c.update(*snapshot);
    }
    const double wait_s = std::max(0.0, coordinator_.next_publish_s() - now_s()) / opt_.speed;
    coordinator_wake_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(std::min(wait_s, 3600.0))));
    boost::system::error_code ec;
    co_await coordinator_wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

void SimServer::publish_counts(Rank& rank) {
  if (ranks_.size() < 2 || rank.paused) return;  // a wedged engine core's busy loop publishes nothing
  const EngineStats st = rank.engine.stats();
  // A change after a quiet spell goes out at once: wake the coordinator to recompute its deadline.
  if (coordinator_.engine_counts(rank.index, st.running, st.waiting, st.kv_cache_usage)) coordinator_wake_.cancel();
}

Result<SimServer::Rank*, std::string> SimServer::place(const Inbound& in) {
  DpClient& client = api_servers_[in.api_server % api_servers_.size()];
  if (in.dp_rank) {
    const auto& v = in.dp_rank->value;
    if (!v || *v < 0 || static_cast<uint64_t>(*v) >= ranks_.size()) {
      return dp_rank_out_of_range(*in.dp_rank, ranks_.size());
    }
    client.pinned(static_cast<size_t>(*v));
    ++pins_by_header_;
    return ranks_[static_cast<size_t>(*v)].get();
  }
  return ranks_[client.pick()].get();
}

Result<SimServer::Rank*, std::string> SimServer::place_sglang(const Inbound& in, const json::object* body,
                                                             SglangRankSources reads) {
  static const json::object kNoBody;
  const std::optional<std::string_view> header =
      in.dp_rank_value ? std::optional<std::string_view>(*in.dp_rank_value) : std::nullopt;
  const SglangRankSources sources{reads.body && body != nullptr, reads.header};
  auto asked = sglang_requested_rank(body ? *body : kNoBody, header, sources);
  if (!asked) return asked.error();
  auto rank = sglang_rank_check(asked.value(), ranks_.size());
  if (!rank) return rank.error();
  DpClient& client = api_servers_[in.api_server % api_servers_.size()];
  size_t r = 0;
  if (rank.value()) {
    r = *rank.value();
    ++(sources.header && header ? pins_by_header_ : pins_by_body_);
  } else {
    r = round_robin_.next(ranks_.size());
  }
  client.pinned(r);  // (counted in flight, as every placed request is)
  return ranks_[r].get();
}

bool SimServer::submit(Rank& rank, const Inbound& in, Live& live, std::vector<uint32_t> prompt, uint32_t max_tokens,
                       const CacheNamespace& ns, KvTransfer kv) {
  const size_t server = in.api_server % api_servers_.size();
  live.id = next_id_++;
  live.rank = &rank;
  if (!rank.engine.add_request(live.id, std::move(prompt), max_tokens, ns, kv)) {
    api_servers_[server].finished(rank.index);
    return false;
  }
  placed_[live.id] = server;
  live_[live.id] = &live;
  publish_counts(rank);  // the engine took input
  rank.wake();
  return true;
}

void SimServer::retire(Live& live, bool abort) {
  live_.erase(live.id);
  kv_names_.erase(live.id);
  if (auto it = kv_pending_.find(live.id); it != kv_pending_.end()) {  // a decode leg never pulled
    notify_done(it->second);
    kv_pending_.erase(it);
  }
  if (!abort) return;
  live.rank->engine.abort(live.id);
  ++cancelled_;
  // The engine reports the abort with its next step (perhaps much later when the rank goes
  // idle); vLLM's engine answers an abort at once, so the placing API server counts it out now.
  if (auto p = placed_.find(live.id); p != placed_.end()) {
    api_servers_[p->second].finished(live.rank->index);
    placed_.erase(p);
  }
  publish_counts(*live.rank);
}

std::optional<AgentError> SimServer::unknown_model(const std::string& model, const CacheNamespace& ns) const {
  if (model.empty() || opt_.serves(model) || ns.lora()) return std::nullopt;
  std::string aliases;
  for (const auto& n : opt_.served_model_names) aliases += (aliases.empty() ? "" : ", ") + n;
  return AgentError{404, "NotFoundError", "The model `" + model + "` does not exist. Valid aliases: " + aliases + ".",
                    "model"};
}

namespace {

// The request head's X-Request-Id and X-Data-Parallel-Rank (vLLM reads the latter on chat,
// completions and messages; an unparsable value is ignored).
SimServer::Inbound inbound_of(const http::request<http::string_body>& req, size_t api_server) {
  SimServer::Inbound in;
  in.api_server = api_server;
  if (auto it = req.find("X-Request-Id"); it != req.end()) in.request_id = std::string(it->value());
  if (auto it = req.find("X-Data-Parallel-Rank"); it != req.end()) {
    in.dp_rank = parse_dp_rank_header(it->value());
    in.dp_rank_value = std::string(it->value());
  }
  return in;
}

}  // namespace

asio::awaitable<void> SimServer::serve(tcp::socket socket) {
  // vLLM's API servers accept() on one shared socket: connections go to them in turn.
  const size_t api_server = next_api_server_++ % api_servers_.size();
  beast::flat_buffer buffer;
  for (;;) {
    boost::system::error_code ec;
    http::request_parser<http::string_body> parser;
    parser.body_limit(256u << 20);
    const uint64_t head_limit = drop_header_bytes_ ? std::min(drop_header_bytes_, opt_.http.max_incomplete_event_size)
                                                   : opt_.http.max_incomplete_event_size;
    parser.header_limit(static_cast<uint32_t>(std::min<uint64_t>(head_limit, UINT32_MAX)));
    co_await http::async_read(socket, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
    const bool too_many_fields = !ec && std::distance(parser.get().begin(), parser.get().end()) >
                                            static_cast<std::ptrdiff_t>(opt_.http.max_header_count);
    if (ec == http::error::header_limit && drop_header_bytes_) break;  // fault: hang up, unanswered
    if ((ec && ec != http::error::end_of_stream && ec != asio::error::eof && ec != asio::error::connection_reset &&
         ec != asio::error::operation_aborted) ||
        too_many_fields) {
      // What uvicorn answers a request it cannot parse (h11 RemoteProtocolError, httptools error).
      static constexpr std::string_view k400 =
          "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
          "content-length: 30\r\n\r\nInvalid HTTP request received.";
      boost::system::error_code wec;
      co_await asio::async_write(socket, asio::buffer(k400.data(), k400.size()), asio::redirect_error(asio::use_awaitable, wec));
      break;
    }
    if (ec) break;
    auto req = parser.release();
    const bool keep_alive = req.keep_alive();
    std::string target(req.target());
    std::string path = target.substr(0, target.find('?'));

    // Plain lambdas returning free coroutines: GCC 12 miscompiles coroutine lambdas whose
    // by-value parameters are moved from (a frame address was freed as heap).
    auto reply = [&](unsigned status, std::string body, std::string_view ctype) {
      return write_response(socket, req.version(), keep_alive, status, std::move(body), std::string(ctype));
    };

    if (hang_ && path.rfind("/sim/", 0) != 0) {  // fault: read requests, never answer (but /sim/ admin)
      asio::steady_timer forever(ctx_, std::chrono::steady_clock::time_point::max());
      co_await forever.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      break;
    }

    const bool get = req.method() == http::verb::get;
    const bool post = req.method() == http::verb::post;
    bool more = true;
    if (get && path == "/health") {
      more = co_await reply(health_fail_ ? 503 : 200, "", "");
    } else if (get && path == "/version") {
      std::string body = json::serialize(json::object{{"version", opt_.engine_version}});
      more = co_await reply(200, std::move(body), "application/json");
    } else if (get && path == "/v1/models") {
      // vLLM's ModelCard: one default ModelPermission each (a fresh id per call).
      const auto now = static_cast<int64_t>(wall_now());
      uint64_t serial = id_salt_ ^ (static_cast<uint64_t>(now) << 20);
      auto permission = [&] {
        return json::array{json::object{{"id", "modelperm-" + detail::request_hex(++serial)},
                                        {"object", "model_permission"},
                                        {"created", now},
                                        {"allow_create_engine", false},
                                        {"allow_sampling", true},
                                        {"allow_logprobs", true},
                                        {"allow_search_indices", false},
                                        {"allow_view", true},
                                        {"allow_fine_tuning", false},
                                        {"organization", "*"},
                                        {"group", nullptr},
                                        {"is_blocking", false}}};
      };
      // One card per served name (vLLM's base_model_paths, all rooted at --model), then one per
      // LoRA adapter (show_available_models): parent = its base_model_name when that is a served
      // name (load_lora_adapter keeps no other), else the first served name.
      json::array cards;
      for (const auto& name : opt_.served_model_names) {
        cards.push_back(json::object{{"id", name}, {"object", "model"}, {"created", now},
                                     {"owned_by", "vllm"}, {"root", opt_.model_root}, {"parent", nullptr},
                                     {"max_model_len", opt_.engine.max_model_len}, {"permission", permission()}});
      }
      for (const auto& m : opt_.lora_modules) {
        const bool base = !m.base_model_name.empty() && opt_.serves(m.base_model_name);
        cards.push_back(json::object{{"id", m.name}, {"object", "model"}, {"created", now},
                                     {"owned_by", "vllm"}, {"root", m.path},
                                     {"parent", base ? m.base_model_name : opt_.served_model_name()},
                                     {"max_model_len", nullptr}, {"permission", permission()}});
      }
      json::object list{{"object", "list"}, {"data", std::move(cards)}};
      more = co_await reply(200, json::serialize(list), "application/json");
    } else if (get && path == "/metrics") {
      more = co_await reply(200, metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
    } else if (get && path == "/kv_event_sources") {
      // As vLLM 0.32: each engine core's resolved KVEventsConfig (its endpoints offset by its
      // rank) keyed by its data-parallel rank, {} without a ZMQ publisher.
      json::object sources;
      for (const auto& rank : ranks_) {
        if (!rank->publisher || !opt_.kv.enabled || opt_.kv.publisher != "zmq") continue;
        const std::string replay = rank->publisher->bound_replay_endpoint();
        sources[std::to_string(rank->dp_rank)] = json::object{
            {"enable_kv_cache_events", true},
            {"publisher", "zmq"},
            {"endpoint", rank->publisher->bound_endpoint()},
            {"replay_endpoint", replay.empty() ? json::value(nullptr) : json::value(replay)},
            {"buffer_steps", opt_.kv.buffer_steps},
            {"hwm", opt_.kv.hwm},
            {"max_queue_size", opt_.kv.max_queue_size},
            {"topic", opt_.kv.topic}};
      }
      // (built outside the co_await expression: GCC 12 rejects an initializer list there)
      std::string body = json::serialize(sources);
      more = co_await reply(200, std::move(body), "application/json");
    } else if (post && path == "/reset_prefix_cache") {
      bool ok = true;  // every engine core resets; the answer is whether all did
      for (auto& r : ranks_) ok = r->engine.reset_prefix_cache(wall_now()) && ok;
      std::string body = ok ? std::string() : vllm_error("requests are running", "BadRequestError", 400);
      std::string ctype = ok ? std::string() : std::string("application/json");
      more = co_await reply(ok ? 200 : 400, std::move(body), ctype);
    } else if (opt_.dev_mode && (path == "/sleep" || path == "/wake_up" || path == "/is_sleeping")) {
      // vLLM registers these only with VLLM_SERVER_DEV_MODE=1 (sleep_serve.cc); else a 404.
      auto op = sleep_mode(path, target, req.method());
      Answer a = co_await std::move(op);  // (no temporary inside the co_await: GCC 12)
      more = co_await reply(a.status, std::move(a.body), a.ctype);
    } else if (post && path == "/tokenize") {
      if (tokenize_delay_ms_ > 0) {  // fault: an API server too busy to answer at once
        asio::steady_timer late(ctx_, std::chrono::milliseconds(tokenize_delay_ms_));
        co_await late.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      auto op = asio::co_spawn(frontend_->get_executor(), tokenize(std::string(req.body())), asio::use_awaitable);
      Tokenized t = co_await std::move(op);  // (no temporary inside the co_await: GCC 12)
      if (!t.error.empty()) {
        more = co_await reply(400, vllm_error(t.error, "BadRequestError", 400), "application/json");
      } else {
        json::array ids;
        for (auto tok : t.tokens) ids.push_back(tok);
        json::object o{{"count", t.tokens.size()}, {"max_model_len", opt_.engine.max_model_len}, {"tokens", ids},
                       {"token_strs", nullptr}};
        more = co_await reply(200, json::serialize(o), "application/json");
      }
    } else if (post && path == "/sim/render") {
      const size_t q = target.find("api=");
      std::string api = q == std::string::npos ? std::string("chat") : target.substr(q + 4);
      api = api.substr(0, api.find('&'));
      unsigned status = 200;
      std::string body = render_debug(api, req.body(), status);
      more = co_await reply(status, std::move(body), "application/json");
    } else if (post && (path == "/sim/kv/pull" || path == "/sim/kv/done" || path == "/sim/kv/heartbeat")) {
      unsigned status = 200;
      std::string body = side_channel(path, req.body(), status);
      more = co_await reply(status, std::move(body), "application/json");
    } else if (path.rfind("/sim/", 0) == 0) {
      unsigned status = 200;
      std::string body = handle_admin(path, req.body(), status);
      more = co_await reply(status, body, "application/json");
    } else if (post && garbage_ &&
               (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/responses" ||
                path == "/v1/messages")) {
      static constexpr std::string_view kGarbage = "SSH-2.0-not-http\r\n\x01\x02garbage\r\n\r\n";
      boost::system::error_code wec;
      co_await asio::async_write(socket, asio::buffer(kGarbage.data(), kGarbage.size()),
                                 asio::redirect_error(asio::use_awaitable, wec));
      break;
    } else if (post && (path == "/v1/responses" || path == "/v1/messages")) {
      const AgentApi api = path == "/v1/messages" ? AgentApi::kMessages : AgentApi::kResponses;
      more = co_await serve_agent(socket, req.version(), keep_alive, req.body(), api, inbound_of(req, api_server));
    } else if (post && (path == "/v1/chat/completions" || path == "/v1/completions")) {
      more = co_await serve_openai(socket, req.version(), keep_alive, req.body(), path == "/v1/chat/completions",
                                   inbound_of(req, api_server));
    } else {
      more = co_await reply(404, R"({"detail":"Not Found"})", "application/json");
    }
    if (!more) break;
  }
  boost::system::error_code ignored;
  socket.shutdown(tcp::socket::shutdown_send, ignored);
  socket.close(ignored);
}

CacheNamespace SimServer::namespace_of(const std::string& model, const std::string& cache_salt) const {
  CacheNamespace ns;
  ns.cache_salt = cache_salt;
  if (model.empty() || opt_.serves(model)) return ns;  // aliases share one cache namespace
  for (size_t i = 0; i < opt_.lora_modules.size(); ++i) {
    if (opt_.lora_modules[i].name != model) continue;
    ns.lora_name = model;
    ns.lora_id = static_cast<int64_t>(i + 1);  // vLLM's lora_id_counter: 1, 2, ... in flag order
    ns.lora_path = opt_.lora_modules[i].path;  // (hashed: a re-pointed name does not hit)
  }
  return ns;
}


}  // namespace ramjet::sim
