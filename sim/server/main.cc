// ramjet-sim: a vLLM-compatible engine simulator. Usage like `vllm serve`; see --help and docs/sim.md.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "common/build_info.h"
#include "net/io_pool.h"
#include "net/listener.h"
#include "sim/kv/publisher.h"
#include "sim/server/options.h"
#include "sim/server/prompt.h"
#include "sim/server/server.h"

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace ramjet;

int main(int argc, char** argv) {
  sim::SimOptions opt;
  auto errors = sim::parse_options(std::vector<std::string>(argv + 1, argv + argc), opt);
  if (opt.help) {
    std::cout << sim::usage_text();
    return 0;
  }
  if (opt.version) {
    std::cout << version_line("ramjet-sim") << '\n';
    return 0;
  }
  if (!errors.empty()) {
    for (const auto& e : errors) std::fprintf(stderr, "ramjet-sim: %s\n", e.c_str());
    return 2;
  }
  // vLLM's envs.VLLM_SERVER_DEV_MODE: bool(int(os.getenv("VLLM_SERVER_DEV_MODE", "0"))).
  if (const char* dev = std::getenv("VLLM_SERVER_DEV_MODE"); dev != nullptr && *dev != '\0') {
    char* end = nullptr;
    const long v = std::strtol(dev, &end, 10);
    opt.dev_mode = end != dev && *end == '\0' && v != 0;
  }
  // More draft tokens than the preset has acceptance rates for: later positions accept less.
  auto& timing = opt.engine.timing;
  while (timing.acceptance.size() < timing.speculative_tokens) {
    timing.acceptance.push_back(timing.acceptance.empty() ? 0.7 : timing.acceptance.back() * 0.6);
  }
  // The real tokenizer (--tokenizer), loaded once: an unusable file stops the start.
  const auto load_start = std::chrono::steady_clock::now();
  auto prompter = sim::Prompter::load(opt.prompt);
  if (!prompter) {
    std::fprintf(stderr, "ramjet-sim: tokenizer: %s\n", prompter.error().message.c_str());
    return 2;
  }
  if (prompter->real()) {
    std::fprintf(stderr, "ramjet-sim: prompts: %s (loaded in %.2f s)\n", prompter->description().c_str(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count());
  }
  std::signal(SIGPIPE, SIG_IGN);

  net::IoPool io(1);
  // One KV-event publisher per engine core, its endpoints offset by its rank (vLLM's scheduler
  // creates each with parallel_config.data_parallel_index).
  std::vector<std::unique_ptr<sim::KvPublisher>> publishers;
  std::vector<sim::KvPublisher*> publisher_ptrs;
  std::string ranks;
  for (int rank : opt.local_ranks()) {
    ranks += (ranks.empty() ? "" : ",") + std::to_string(rank);
    if (!opt.kv.enabled || opt.kv.publisher != "zmq") {
      publisher_ptrs.push_back(nullptr);
      continue;
    }
    sim::PublisherConfig cfg = opt.kv;
    cfg.data_parallel_rank = rank;
    publishers.push_back(std::make_unique<sim::KvPublisher>(cfg));
    if (std::string e = publishers.back()->start(); !e.empty()) {
      std::fprintf(stderr, "ramjet-sim: kv events: %s\n", e.c_str());
      return 1;
    }
    publisher_ptrs.push_back(publishers.back().get());
  }
  sim::KvPublisher* publisher = publishers.empty() ? nullptr : publishers.front().get();
  auto server = std::make_unique<sim::SimServer>(io.at(0), opt, publisher_ptrs, std::move(prompter.value()));

  // Bind now (so the port is known and stays ours), listen later when a refuse fault is set.
  boost::system::error_code ec;
  tcp::resolver resolver(io.at(0));
  auto results = resolver.resolve(opt.host, std::to_string(opt.port), tcp::resolver::passive, ec);
  if (ec || results.empty()) {
    std::fprintf(stderr, "ramjet-sim: cannot resolve %s\n", opt.host.c_str());
    return 1;
  }
  auto acceptor = std::make_unique<tcp::acceptor>(io.at(0));
  auto ep = results.begin()->endpoint();
  acceptor->open(ep.protocol(), ec);
  if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(ep, ec);
  if (ec) {
    std::fprintf(stderr, "ramjet-sim: cannot bind port %u: %s\n", opt.port, ec.message().c_str());
    return 1;
  }
  const unsigned port = acceptor->local_endpoint().port();
  // P/D disaggregation: prefill answers name this port as remote_port; another port than the
  // HTTP one gets a listener of its own, serving the same routes (the side channel among them).
  std::unique_ptr<net::Listener> side_listener;
  unsigned side_port = port;
  if (opt.kv_transfer.enabled() && opt.kv_transfer.side_channel_port != 0 && opt.kv_transfer.side_channel_port != port) {
    tcp::acceptor side(io.at(0));
    auto sep = tcp::endpoint(ep.address(), opt.kv_transfer.side_channel_port);
    side.open(sep.protocol(), ec);
    if (!ec) side.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) side.bind(sep, ec);
    if (!ec) side.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      std::fprintf(stderr, "ramjet-sim: cannot bind --kv-side-channel-port %u: %s\n", opt.kv_transfer.side_channel_port,
                   ec.message().c_str());
      return 1;
    }
    side_port = side.local_endpoint().port();
    side_listener = std::make_unique<net::Listener>(io, std::move(side),
                                                    [&](tcp::socket s) { return server->serve(std::move(s)); });
    side_listener->start();
  }
  server->set_side_channel_port(static_cast<uint16_t>(side_port));
  std::unique_ptr<net::Listener> listener;
  auto start_listening = [&] {
    boost::system::error_code lec;
    acceptor->listen(asio::socket_base::max_listen_connections, lec);
    listener = std::make_unique<net::Listener>(io, std::move(*acceptor),
                                               [&](tcp::socket s) { return server->serve(std::move(s)); });
    listener->start();
  };
  auto refuse = std::make_unique<asio::steady_timer>(io.at(0));
  if (opt.faults.refuse_s > 0) {
    refuse->expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(opt.faults.refuse_s)));
    refuse->async_wait([&](boost::system::error_code e) {
      if (!e) start_listening();
    });
  } else {
    start_listening();
  }
  auto crash = std::make_unique<asio::steady_timer>(io.at(0));
  if (opt.faults.crash_after_s > 0) {
    crash->expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(opt.faults.crash_after_s)));
    crash->async_wait([](boost::system::error_code e) {
      if (e) return;
      std::fprintf(stderr, "ramjet-sim: fault: crashing\n");
      std::_Exit(1);
    });
  }
  server->start();
  // kv_endpoint / kv_replay: the first rank's (the others: GET /kv_event_sources).
  std::printf("ramjet-sim listening port=%u model=%s preset=%s block_size=%u dp_ranks=%s kv_events=%s kv_endpoint=%s "
              "kv_replay=%s\n",
              port, opt.served_model_name().c_str(), opt.engine.preset.c_str(), opt.engine.block_size, ranks.c_str(),
              publisher ? "on" : "off", publisher ? publisher->bound_endpoint().c_str() : "-",
              publisher && !publisher->bound_replay_endpoint().empty() ? publisher->bound_replay_endpoint().c_str()
                                                                       : "-");
  if (opt.kv_transfer.enabled()) {
    std::printf("ramjet-sim kv_role=%s side_channel=%s:%u\n", opt.kv_transfer.role.c_str(),
                opt.kv_transfer.side_channel_host.c_str(), side_port);
  }
  std::fflush(stdout);

  auto signals = std::make_unique<asio::signal_set>(io.at(0), SIGTERM, SIGINT);
  signals->async_wait([&](boost::system::error_code, int) { io.stop(); });
  io.run();
  // Teardown: everything owning sockets or timers, then the context with its pending frames.
  signals.reset();
  listener.reset();
  side_listener.reset();
  acceptor.reset();
  refuse.reset();
  crash.reset();
  server.reset();
  io.destroy();
  for (auto& p : publishers) p->stop();
  return 0;
}
