// sim/server/sleep_serve: vLLM's sleep mode as SimServer serves it (vLLM's
// entrypoints/serve/dev/sleep/api_router.py and EngineCore.sleep / wake_up in v1/engine/core.py):
//  - the routes exist only in dev mode (VLLM_SERVER_DEV_MODE=1; otherwise 404, as unregistered);
//  - POST /sleep?level=1|2[&mode=abort] (level defaults to 1): every engine core aborts what it
//    runs and queues (mode abort, vLLM's default), resets its prefix cache (one AllBlocksCleared
//    KV event: the block pool is free) and stops stepping; answers 200 with no body. Needs
//    --enable-sleep-mode (else 400: the simulator refuses what vLLM's allocator could not do);
//  - POST /wake_up[?tags=...] (tags ignored: everything wakes): answers 200, empty, after
//    --wake-ms of virtual time (/ --speed); the engine cores step again;
//  - GET /is_sleeping: {"is_sleeping": bool}, true until the wake is done;
//  - a request that reaches a sleeping engine is accepted and queued, and runs only after the
//    wake (vLLM: "Requests are still accepted but not processed"): it hangs meanwhile.
// vllm:engine_sleep_state{sleep_state=awake|weights_offloaded|discard_all} is on /metrics with
// --enable-sleep-mode.
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "sim/server/server.h"
#include "sim/server/server_io.h"

namespace ramjet::sim {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using detail::vllm_error;
using detail::wall_now;

namespace {

// The value of query parameter `key` in `target` ("" when absent).
std::string query_param(const std::string& target, std::string_view key) {
  const size_t q = target.find('?');
  if (q == std::string::npos) return "";
  std::string_view rest(target);
  rest.remove_prefix(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view item = rest.substr(0, amp);
    if (item.size() > key.size() && item.substr(0, key.size()) == key && item[key.size()] == '=')
      return std::string(item.substr(key.size() + 1));
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return "";
}

}  // namespace

asio::awaitable<SimServer::Answer> SimServer::sleep_mode(std::string path, std::string target, http::verb method) {
  const bool get_route = path == "/is_sleeping";
  if (method != (get_route ? http::verb::get : http::verb::post))
    co_return Answer{405, R"({"detail":"Method Not Allowed"})", "application/json"};
  if (get_route) {
    co_return Answer{200, boost::json::serialize(boost::json::object{{"is_sleeping", sleep_level_ > 0}}),
                     "application/json"};
  }
  if (path == "/sleep") {
    if (!opt_.enable_sleep_mode) {
      co_return Answer{400, vllm_error("Sleep mode is not enabled: start with --enable-sleep-mode", "BadRequestError", 400),
                       "application/json"};
    }
    std::string level = query_param(target, "level");
    if (level.empty()) level = "1";
    if (level != "1" && level != "2") {
      co_return Answer{400, vllm_error("level must be 1 or 2", "BadRequestError", 400), "application/json"};
    }
    if (sleep_level_ == 0) {  // (already asleep: vLLM's executor only warns)
      for (auto& r : ranks_) {
        const std::vector<RequestOutput> aborted = r->engine.sleep(wall_now());
        deliver(*r, aborted);
        r->asleep = true;
        publish_counts(*r);
      }
      ++sleeps_;
    }
    sleep_level_ = level == "2" ? 2 : 1;
    co_return Answer{200, "", ""};
  }
  // POST /wake_up
  if (wake_hang_) {  // fault: accepts /sleep, never wakes
    asio::steady_timer forever(ctx_, std::chrono::steady_clock::time_point::max());
    boost::system::error_code ec;
    co_await forever.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    co_return Answer{500, "", ""};
  }
  if (sleep_level_ > 0 && opt_.wake_ms > 0) {
    asio::steady_timer t(ctx_, std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   std::chrono::duration<double, std::milli>(opt_.wake_ms / opt_.speed)));
    boost::system::error_code ec;
    co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  if (sleep_level_ > 0 && !wake_hang_) {
    sleep_level_ = 0;
    ++wakes_;
    for (auto& r : ranks_) {
      r->asleep = false;
      r->wake();  // requests queued while it slept run now
    }
  }
  co_return Answer{200, "", ""};
}

void SimServer::write_sleep_state(metrics::Exposition& x, const std::vector<std::string>& labels) const {
  if (!opt_.enable_sleep_mode) return;  // vLLM registers the gauge with sleep mode only
  x.family("vllm:engine_sleep_state", "gauge", "Engine sleep state; awake = 0 means engine is sleeping; "
           "awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
           "sleep level 2.");
  for (size_t i = 0; i < ranks_.size() && i < labels.size(); ++i) {
    x.sample("vllm:engine_sleep_state", labels[i] + ",sleep_state=\"awake\"", int64_t{sleep_level_ == 0 ? 1 : 0});
    x.sample("vllm:engine_sleep_state", labels[i] + ",sleep_state=\"weights_offloaded\"",
             int64_t{sleep_level_ == 1 ? 1 : 0});
    x.sample("vllm:engine_sleep_state", labels[i] + ",sleep_state=\"discard_all\"", int64_t{sleep_level_ == 2 ? 1 : 0});
  }
}

}  // namespace ramjet::sim
