// ramjet-responder: a minimal, fast vLLM-shaped HTTP/1.1 upstream for proxy-overhead benchmarks.
// It answers from pre-built bytes so that the proxy under test, not the upstream, is measured.
// It is not an engine simulator (that is ramjet-sim): no tokens, no timing model, no KV events.
//
//   POST /v1/chat/completions, /v1/completions
//       body contains "stream":true  -> SSE: N chunk events (each written and flushed on its own),
//                                       a usage chunk, then `data: [DONE]`
//       otherwise                    -> one chat.completion / text_completion JSON with usage
//   GET /health     -> 200, empty body
//   GET /v1/models  -> vLLM-shaped model list (max_model_len 131072)
//   anything else   -> 404 JSON error
//
// Threads: one io_context per thread; one acceptor hands connections out round-robin.

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <optional>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

struct Options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  unsigned threads = 0;  // 0 = hardware_concurrency
  unsigned sse_chunks = 8;
  unsigned chunk_delay_us = 0;
};

// All response bytes are built once at startup and shared read-only by every thread.
struct Canned {
  std::string chat_json;
  std::string completion_json;
  std::vector<std::string> chat_events;        // N chunk events + usage chunk + [DONE]
  std::vector<std::string> completion_events;  // same for /v1/completions
  std::vector<std::string> chat_framed;        // the same events, each framed as one HTTP chunk
  std::vector<std::string> completion_framed;
  std::string models_json;
  std::string not_found_json;
};

constexpr std::string_view kModel = "bench-model";
constexpr int kPromptTokens = 250;

std::string usage_json(int completion_tokens) {
  return "{\"prompt_tokens\":" + std::to_string(kPromptTokens) +
         ",\"total_tokens\":" + std::to_string(kPromptTokens + completion_tokens) +
         ",\"completion_tokens\":" + std::to_string(completion_tokens) +
         ",\"prompt_tokens_details\":{\"cached_tokens\":0}}";
}

std::string sse(std::string_view json) { return "data: " + std::string(json) + "\n\n"; }

Canned build_canned(unsigned n_chunks) {
  Canned c;
  const std::string head_chat = "{\"id\":\"chatcmpl-bench0000000000000000\",\"object\":";
  const std::string created = ",\"created\":1700000000,\"model\":\"" + std::string(kModel) + "\"";
  const int n = static_cast<int>(n_chunks);

  c.chat_json = head_chat + "\"chat.completion\"" + created +
                ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"reasoning_content\":null,"
                "\"content\":\"The quick brown fox jumps over the lazy dog.\",\"tool_calls\":[]},"
                "\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":null}],"
                "\"usage\":" + usage_json(n) + ",\"prompt_logprobs\":null,\"kv_transfer_params\":null}";

  const std::string head_cmpl = "{\"id\":\"cmpl-bench0000000000000000\",\"object\":";
  c.completion_json = head_cmpl + "\"text_completion\"" + created +
                      ",\"choices\":[{\"index\":0,\"text\":\" The quick brown fox jumps over the lazy dog.\","
                      "\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":null,\"prompt_logprobs\":null}],"
                      "\"usage\":" + usage_json(n) + ",\"kv_transfer_params\":null}";

  for (int i = 0; i < n; ++i) {
    const bool first = i == 0, last = i == n - 1;
    const std::string finish = last ? "\"stop\"" : "null";
    const std::string text = first ? "Hello" : " tok" + std::to_string(i);
    std::string delta = first ? "{\"role\":\"assistant\",\"content\":\"" + text + "\"}"
                              : "{\"content\":\"" + text + "\"}";
    c.chat_events.push_back(sse(head_chat + "\"chat.completion.chunk\"" + created +
                                ",\"choices\":[{\"index\":0,\"delta\":" + delta +
                                ",\"logprobs\":null,\"finish_reason\":" + finish + "}]}"));
    c.completion_events.push_back(sse(head_cmpl + "\"text_completion\"" + created +
                                      ",\"choices\":[{\"index\":0,\"text\":\"" + text +
                                      "\",\"logprobs\":null,\"finish_reason\":" + finish +
                                      ",\"stop_reason\":null}]}"));
  }
  c.chat_events.push_back(sse(head_chat + "\"chat.completion.chunk\"" + created +
                              ",\"choices\":[],\"usage\":" + usage_json(n) + "}"));
  c.completion_events.push_back(sse(head_cmpl + "\"text_completion\"" + created +
                                    ",\"choices\":[],\"usage\":" + usage_json(n) + "}"));
  c.chat_events.push_back("data: [DONE]\n\n");
  c.completion_events.push_back("data: [DONE]\n\n");
  auto frame = [](const std::string& ev) {
    char size[16];
    const int n = std::snprintf(size, sizeof size, "%zx\r\n", ev.size());
    return std::string(size, static_cast<size_t>(n)) + ev + "\r\n";
  };
  for (const auto& ev : c.chat_events) c.chat_framed.push_back(frame(ev));
  for (const auto& ev : c.completion_events) c.completion_framed.push_back(frame(ev));

  c.models_json = "{\"object\":\"list\",\"data\":[{\"id\":\"" + std::string(kModel) +
                  "\",\"object\":\"model\",\"created\":1700000000,\"owned_by\":\"vllm\",\"root\":\"" +
                  std::string(kModel) + "\",\"parent\":null,\"max_model_len\":131072,\"permission\":[{"
                  "\"id\":\"modelperm-bench\",\"object\":\"model_permission\",\"created\":1700000000,"
                  "\"allow_create_engine\":false,\"allow_sampling\":true,\"allow_logprobs\":true,"
                  "\"allow_search_indices\":false,\"allow_view\":true,\"allow_fine_tuning\":false,"
                  "\"organization\":\"*\",\"group\":null,\"is_blocking\":false}]}]}";
  c.not_found_json = "{\"error\":{\"message\":\"Not Found\",\"type\":\"NotFoundError\",\"param\":null,\"code\":404}}";
  return c;
}

// True when the top-level-looking `"stream"` key is followed by `true` (whitespace tolerated).
// A byte scan, not a JSON parse: good enough for benchmark bodies and cheap.
bool wants_stream(std::string_view body) {
  constexpr std::string_view key = "\"stream\"";
  for (size_t pos = body.find(key); pos != std::string_view::npos; pos = body.find(key, pos + 1)) {
    size_t i = pos + key.size();
    auto skip_ws = [&] {
      while (i < body.size() && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r')) ++i;
    };
    skip_ws();
    if (i >= body.size() || body[i] != ':') continue;  // e.g. "stream" as a value
    ++i;
    skip_ws();
    return body.substr(i, 4) == "true";
  }
  return false;
}

// Response heads are assembled by hand (a few dozen bytes) and bodies are pre-built, so a reply
// costs one gather write; Beast is used for request parsing only.
std::string_view status_line(int status, unsigned version) {
  if (version == 10) return status == 200 ? "HTTP/1.0 200 OK\r\n" : "HTTP/1.0 404 Not Found\r\n";
  return status == 200 ? "HTTP/1.1 200 OK\r\n" : "HTTP/1.1 404 Not Found\r\n";
}

std::string_view connection_line(bool keep_alive, unsigned version) {
  if (version == 10) return keep_alive ? "Connection: keep-alive\r\n" : "";
  return keep_alive ? "" : "Connection: close\r\n";
}

// SSE: the head, then every event as its own chunk, each written (and so sent) on its own, the
// way an engine flushes tokens; then the terminating chunk. HTTP/1.0 clients get raw events and
// a closed connection instead of chunked framing.
net::awaitable<void> write_sse(tcp::socket& sock, std::string& head, const std::vector<std::string>& framed,
                               const std::vector<std::string>& raw, bool keep_alive, unsigned version,
                               unsigned delay_us) {
  const bool chunked = version != 10;
  head.assign(status_line(200, version));
  head += "Server: ramjet-responder\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n";
  head += chunked ? "Transfer-Encoding: chunked\r\n" : "";
  head += connection_line(keep_alive && chunked, version);
  head += "\r\n";
  co_await net::async_write(sock, net::buffer(head), net::use_awaitable);

  std::optional<net::steady_timer> timer;
  if (delay_us > 0) timer.emplace(sock.get_executor());
  const auto& events = chunked ? framed : raw;
  for (const auto& ev : events) {
    if (timer) {
      timer->expires_after(std::chrono::microseconds(delay_us));
      co_await timer->async_wait(net::use_awaitable);
    }
    co_await net::async_write(sock, net::buffer(ev), net::use_awaitable);
  }
  if (chunked) co_await net::async_write(sock, net::buffer("0\r\n\r\n", 5), net::use_awaitable);
}

net::awaitable<void> write_fixed(tcp::socket& sock, std::string& head, int status, std::string_view content_type,
                                 std::string_view body, bool keep_alive, unsigned version) {
  head.assign(status_line(status, version));
  head += "Server: ramjet-responder\r\n";
  if (!content_type.empty()) {
    head += "Content-Type: ";
    head += content_type;
    head += "\r\n";
  }
  head += "Content-Length: ";
  head += std::to_string(body.size());
  head += "\r\n";
  head += connection_line(keep_alive, version);
  head += "\r\n";
  const std::array<net::const_buffer, 2> bufs{net::buffer(head), net::buffer(body)};
  co_await net::async_write(sock, bufs, net::use_awaitable);
}

net::awaitable<void> session(tcp::socket sock, const Canned& canned, const Options& opt) {
  boost::system::error_code ignored;
  sock.set_option(tcp::no_delay(true), ignored);  // may fail if the peer already reset: then reads fail too
  beast::flat_buffer buf;
  std::string head;
  head.reserve(256);
  try {
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(64u << 20);
      auto [ec, n] = co_await http::async_read(sock, buf, parser, net::as_tuple(net::use_awaitable));
      if (ec) break;  // EOF, reset, or malformed request: drop the connection
      auto& req = parser.get();
      const bool keep_alive = req.keep_alive();
      const unsigned version = req.version() == 10 ? 10 : 11;
      const std::string_view target = req.target();
      const std::string_view path = target.substr(0, target.find('?'));
      const auto method = req.method();

      if (method == http::verb::post && (path == "/v1/chat/completions" || path == "/v1/completions")) {
        const bool chat = path == "/v1/chat/completions";
        if (wants_stream(req.body())) {
          co_await write_sse(sock, head, chat ? canned.chat_framed : canned.completion_framed,
                             chat ? canned.chat_events : canned.completion_events, keep_alive, version,
                             opt.chunk_delay_us);
          if (version == 10) break;  // unframed stream: the end of the body is the end of the connection
        } else {
          co_await write_fixed(sock, head, 200, "application/json", chat ? canned.chat_json : canned.completion_json,
                               keep_alive, version);
        }
      } else if (method == http::verb::get && path == "/health") {
        co_await write_fixed(sock, head, 200, {}, {}, keep_alive, version);
      } else if (method == http::verb::get && path == "/v1/models") {
        co_await write_fixed(sock, head, 200, "application/json", canned.models_json, keep_alive, version);
      } else {
        co_await write_fixed(sock, head, 404, "application/json", canned.not_found_json, keep_alive, version);
      }
      if (!keep_alive) break;
    }
  } catch (const boost::system::system_error&) {
    // peer went away mid-write: nothing to report in a benchmark upstream
  }
  sock.shutdown(tcp::socket::shutdown_send, ignored);
}

net::awaitable<void> accept_loop(tcp::acceptor& acceptor, std::vector<std::unique_ptr<net::io_context>>& ctxs,
                                 const Canned& canned, const Options& opt) {
  size_t next = 0;
  for (;;) {
    auto& ctx = *ctxs[next];
    next = (next + 1) % ctxs.size();
    auto [ec, sock] = co_await acceptor.async_accept(ctx, net::as_tuple(net::use_awaitable));
    if (ec) {
      if (ec == net::error::operation_aborted) co_return;
      continue;  // EMFILE and friends: keep serving
    }
    net::co_spawn(ctx, session(std::move(sock), canned, opt), net::detached);
  }
}

[[noreturn]] void usage_exit(const char* argv0, int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: %s [--host H] [--port N] [--threads N] [--sse-chunks N] [--chunk-delay-us N]\n"
               "  --port 0 (default) binds an ephemeral port; `listening port=N` is printed on stdout\n"
               "  --threads 0 (default) uses one thread per core\n",
               argv0);
  std::exit(code);
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-h" || a == "--help") usage_exit(argv[0], 0);
    if (i + 1 >= argc) usage_exit(argv[0], 2);
    const char* v = argv[++i];
    char* end = nullptr;
    const unsigned long n = std::strtoul(v, &end, 10);
    const bool numeric = end != v && *end == '\0';
    if (a == "--host") o.host = v;
    else if (a == "--port" && numeric && n <= 65535) o.port = static_cast<uint16_t>(n);
    else if (a == "--threads" && numeric && n <= 1024) o.threads = static_cast<unsigned>(n);
    else if (a == "--sse-chunks" && numeric && n >= 1 && n <= 100000) o.sse_chunks = static_cast<unsigned>(n);
    else if (a == "--chunk-delay-us" && numeric && n <= 60'000'000) o.chunk_delay_us = static_cast<unsigned>(n);
    else usage_exit(argv[0], 2);
  }
  if (o.threads == 0) o.threads = std::max(1u, std::thread::hardware_concurrency());
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse_args(argc, argv);
  const Canned canned = build_canned(opt.sse_chunks);

  std::vector<std::unique_ptr<net::io_context>> ctxs;
  for (unsigned i = 0; i < opt.threads; ++i) ctxs.push_back(std::make_unique<net::io_context>(1));
  std::vector<net::executor_work_guard<net::io_context::executor_type>> guards;
  for (auto& c : ctxs) guards.push_back(net::make_work_guard(*c));

  net::io_context& main_ctx = *ctxs[0];
  tcp::acceptor acceptor{main_ctx};
  try {
    const tcp::endpoint ep{net::ip::make_address(opt.host), opt.port};
    acceptor.open(ep.protocol());
    acceptor.set_option(net::socket_base::reuse_address(true));
    acceptor.bind(ep);
    acceptor.listen(4096);
  } catch (const boost::system::system_error& e) {
    std::fprintf(stderr, "ramjet-responder: cannot listen on %s:%u: %s\n", opt.host.c_str(), opt.port, e.what());
    return 1;
  }
  std::printf("listening port=%u threads=%u sse_chunks=%u chunk_delay_us=%u\n", acceptor.local_endpoint().port(),
              opt.threads, opt.sse_chunks, opt.chunk_delay_us);
  std::fflush(stdout);

  net::signal_set signals{main_ctx, SIGINT, SIGTERM};
  signals.async_wait([&](const boost::system::error_code&, int) {
    boost::system::error_code ignored;
    acceptor.close(ignored);
    for (auto& c : ctxs) c->stop();
  });
  net::co_spawn(main_ctx, accept_loop(acceptor, ctxs, canned, opt), net::detached);

  std::vector<std::thread> workers;
  for (size_t i = 1; i < ctxs.size(); ++i) workers.emplace_back([&c = *ctxs[i]] { c.run(); });
  main_ctx.run();
  for (auto& c : ctxs) c->stop();
  for (auto& t : workers) t.join();
  return 0;
}
