// cache/events test helpers: a fake vLLM KV-event publisher on loopback — an XPUB sending
// [topic, seq BE8, payload] and a ROUTER answering replays as vLLM >= 0.26 does (every buffered
// batch from the asked sequence on, then the end marker) — and a polling wait. For tests only
// (the subscriber's and the companion server's); end-to-end tests use ramjet-sim's publisher.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "cache/kv/codec.h"

namespace ramjet::cache::events::testing {

// A sequence number as vLLM sends it: 8 bytes, big-endian.
inline std::string be8(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
  return s;
}

// Until f() holds, polled every 5 ms; its last answer at the limit.
template <typename F>
bool eventually(F f, std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return f();
}

class FakeEngine {
 public:
  // XPUB: it sees the subscription arrive, so a test can publish once the subscriber listens.
  FakeEngine() : pub_(ctx_, zmq::socket_type::xpub), router_(ctx_, zmq::socket_type::router) {
    pub_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::linger, 0);
    pub_.bind("tcp://127.0.0.1:*");
    router_.bind("tcp://127.0.0.1:*");
    live = pub_.get(zmq::sockopt::last_endpoint);
    replay = router_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { serve_replays(); });
  }
  ~FakeEngine() {
    stop_ = true;
    thread_.join();
  }
  FakeEngine(const FakeEngine&) = delete;
  FakeEngine& operator=(const FakeEngine&) = delete;

  // Publishes the next batch (kept for replay) and returns its sequence; `send_live` false drops
  // it on the way (a gap).
  uint64_t publish(const kv::EventBatch& b, bool send_live = true) {
    return publish_payload(kv::encode_batch(b, {}), send_live);
  }
  uint64_t publish_payload(const std::string& payload, bool send_live = true) {
    const uint64_t seq = next_seq_++;
    {
      std::lock_guard lock(mu_);
      buffer_.emplace_back(seq, payload);
    }
    if (!send_live) return seq;
    pub_.send(zmq::buffer(topic), zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(be8(seq)), zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(payload), zmq::send_flags::none);
    return seq;
  }
  bool wait_subscribed(std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
    zmq::pollitem_t item{pub_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, limit) <= 0) return false;
    zmq::message_t m;
    return pub_.recv(m, zmq::recv_flags::dontwait) && m.size() >= 1 && static_cast<const uint8_t*>(m.data())[0] == 1;
  }
  void send_raw(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      pub_.send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
  void restart() {  // a new publisher instance: sequence from 0, empty replay buffer
    std::lock_guard lock(mu_);
    buffer_.clear();
    next_seq_ = 0;
  }

  std::string live, replay;
  const std::string topic = "kv";
  std::atomic<int> replays{0};

 private:
  void serve_replays() {
    while (!stop_) {
      zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(20));
      std::vector<zmq::message_t> req;
      if (!zmq::recv_multipart(router_, std::back_inserter(req), zmq::recv_flags::dontwait)) continue;
      if (req.size() != 3 || req[2].size() != 8) continue;  // vLLM ignores other requests
      uint64_t from = 0;
      for (size_t i = 0; i < 8; ++i) from = (from << 8) | static_cast<const uint8_t*>(req[2].data())[i];
      ++replays;
      const std::string id = req[0].to_string();
      std::lock_guard lock(mu_);
      for (const auto& [seq, payload] : buffer_) {
        if (seq < from) continue;
        router_.send(zmq::buffer(id), zmq::send_flags::sndmore);
        router_.send(zmq::message_t(), zmq::send_flags::sndmore);
        router_.send(zmq::buffer(topic), zmq::send_flags::sndmore);
        router_.send(zmq::buffer(be8(seq)), zmq::send_flags::sndmore);
        router_.send(zmq::buffer(payload), zmq::send_flags::none);
      }
      router_.send(zmq::buffer(id), zmq::send_flags::sndmore);
      router_.send(zmq::message_t(), zmq::send_flags::sndmore);
      router_.send(zmq::message_t(), zmq::send_flags::sndmore);
      router_.send(zmq::buffer(be8(~uint64_t{0})), zmq::send_flags::sndmore);
      router_.send(zmq::message_t(), zmq::send_flags::none);
    }
  }

  zmq::context_t ctx_{1};
  zmq::socket_t pub_, router_;
  std::mutex mu_;
  std::vector<std::pair<uint64_t, std::string>> buffer_;
  std::atomic<uint64_t> next_seq_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ramjet::cache::events::testing
