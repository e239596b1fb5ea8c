// KvPublisher: vLLM's ZmqEventPublisher (vllm/distributed/kv_events.py) in C++.
//
// One thread owns both ZMQ sockets. publish()/fault_*() append to a bounded queue guarded by a
// mutex and wake the thread through an eventfd, which zmq_poll watches next to the ROUTER
// socket, so live batches and replay requests are both handled without vLLM's 100 ms poll lag.
// Per item the thread: assigns seq (8-byte big-endian, from 0), encodes the batch, sends
// [topic, seq, payload] on the PUB socket, appends (seq, payload) to the replay ring
// (buffer_steps entries).
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <zmq_addon.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "sim/kv/kv_internal.h"
#include "sim/kv/publisher.h"

namespace ramjet::sim {
namespace {

constexpr std::chrono::milliseconds kFullQueueWait{100};
constexpr uint8_t kEndSeq[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

std::string seq_bytes(uint64_t seq) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i) {
    s[static_cast<size_t>(i)] = static_cast<char>(seq & 0xff);
    seq >>= 8;
  }
  return s;
}

uint64_t read_be64(const void* p) {
  const auto* b = static_cast<const uint8_t*>(p);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | b[i];
  return v;
}

struct Item {
  enum Kind { kBatch, kDrop, kSkip, kRestart, kGarbage } kind = kBatch;
  double ts = 0;
  std::vector<KvEvent> events;
  uint32_t n = 0;
};

}  // namespace

namespace kv_internal {
zmq::context_t& zmq_context() {
  static auto* ctx = new zmq::context_t(1);  // leaked on purpose: no zmq_ctx_term at exit
  return *ctx;
}
}  // namespace kv_internal

std::string encode_payload(const PublisherConfig& config, double ts, std::vector<KvEvent> events) {
  std::optional<uint32_t> rank;
  if (config.data_parallel_rank >= 0) rank = static_cast<uint32_t>(config.data_parallel_rank);
  return cache::kv::encode_batch(cache::kv::EventBatch{ts, std::move(events), rank},
                                 config.encoding);
}

struct KvPublisher::Impl {
  PublisherConfig cfg;
  bool active = false;  // enabled && publisher == "zmq"

  // Shared with callers.
  mutable std::mutex mu;
  std::condition_variable space_cv;  // queue room (publish) and progress (flush)
  std::deque<Item> queue;
  size_t queued_batches = 0;         // batches in `queue` (faults don't count against the bound)
  uint64_t enqueued = 0;             // items ever enqueued
  uint64_t applied = 0;              // items ever applied by the thread
  bool running = false;
  bool stopping = false;
  std::atomic<uint64_t> next_seq{0};
  std::atomic<uint64_t> dropped{0};
  std::string bound_pub, bound_replay;  // set before the thread starts, then read-only
  int wake_fd = -1;
  std::thread thread;

  // Thread-owned.
  std::optional<zmq::socket_t> pub;
  std::optional<zmq::socket_t> router;
  uint64_t seq = 0;
  uint32_t pending_drop = 0;
  uint32_t pending_garbage = 0;
  std::deque<std::pair<uint64_t, std::string>> ring;
  uint64_t invalid_requests = 0;

  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(wake_fd, &one, sizeof one);
  }

  // Caller side, under the lock: wake the thread on the empty -> non-empty transition (the fd
  // stays valid while running; stop() closes it only after clearing `running`).
  void push_locked(Item item) {
    const bool was_empty = queue.empty();
    if (item.kind == Item::kBatch) ++queued_batches;
    queue.push_back(std::move(item));
    ++enqueued;
    if (was_empty) wake();
  }
  void enqueue(Item item) {
    std::lock_guard lock(mu);
    if (running) push_locked(std::move(item));
  }

  void run() {
    for (;;) {
      std::vector<zmq::pollitem_t> items;
      items.push_back({nullptr, wake_fd, ZMQ_POLLIN, 0});
      if (router) items.push_back({router->handle(), 0, ZMQ_POLLIN, 0});
      try {
        zmq::poll(items, std::chrono::milliseconds(100));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) spdlog::warn("kv events: poll failed: {}", e.what());
      }
      if (items[0].revents & ZMQ_POLLIN) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(wake_fd, &v, sizeof v);
      }
      if (router) service_replay();

      std::deque<Item> work;
      bool stop_now;
      {
        std::lock_guard lock(mu);
        work.swap(queue);
        queued_batches = 0;
        stop_now = stopping;
      }
      space_cv.notify_all();
      for (auto& item : work) {
        apply(item);
        std::lock_guard lock(mu);
        ++applied;
      }
      if (!work.empty()) space_cv.notify_all();
      if (stop_now) {
        std::lock_guard lock(mu);
        if (queue.empty()) break;
      }
    }
    pub->set(zmq::sockopt::linger, 0);
    pub->close();
    if (router) {
      router->set(zmq::sockopt::linger, 0);
      router->close();
    }
  }

  void apply(Item& item) {
    switch (item.kind) {
      case Item::kDrop:
        pending_drop += item.n;
        return;
      case Item::kGarbage:
        pending_garbage += item.n;
        return;
      case Item::kSkip:
        seq += item.n;
        next_seq.store(seq);
        return;
      case Item::kRestart:
        seq = 0;
        ring.clear();
        next_seq.store(seq);
        return;
      case Item::kBatch:
        break;
    }
    const uint64_t s = seq++;
    std::string payload = encode_payload(cfg, item.ts, std::move(item.events));
    if (pending_garbage > 0) {  // what a buggy engine sends: not MessagePack (0xc1 is reserved)
      --pending_garbage;
      payload.assign("\xc1garbage");
    }
    if (pending_drop > 0) {
      --pending_drop;
    } else {
      const std::string sb = seq_bytes(s);
      try {
        // PUB never blocks: beyond SNDHWM ZMQ drops the message (as for vLLM).
        pub->send(zmq::buffer(cfg.topic), zmq::send_flags::sndmore);
        pub->send(zmq::buffer(sb), zmq::send_flags::sndmore);
        pub->send(zmq::buffer(payload), zmq::send_flags::none);
      } catch (const zmq::error_t& e) {
        spdlog::warn("kv events: send failed: {}", e.what());
      }
    }
    if (cfg.buffer_steps > 0) {
      ring.emplace_back(s, std::move(payload));
      while (ring.size() > cfg.buffer_steps) ring.pop_front();
    }
    next_seq.store(seq);
  }

  void service_replay() {
    for (;;) {
      std::vector<zmq::message_t> req;
      std::optional<size_t> got;
      try {
        got = zmq::recv_multipart(*router, std::back_inserter(req), zmq::recv_flags::dontwait);
      } catch (const zmq::error_t& e) {
        spdlog::warn("kv events: replay recv failed: {}", e.what());
        return;
      }
      if (!got) return;
      // Exactly [identity, "", start_seq (8 bytes BE)]: a DEALER sends ["", start], a REQ socket
      // adds the delimiter itself. Anything else is ignored (vLLM: "Invalid replay request").
      if (req.size() != 3 || req[1].size() != 0 || req[2].size() != 8) {
        ++invalid_requests;
        spdlog::warn("kv events: invalid replay request ({} frames) ignored", req.size());
        continue;
      }
      const uint64_t start = read_be64(req[2].data());
      const std::string identity = req[0].to_string();
      const bool with_topic = cfg.replay_layout == ReplayLayout::kWithTopic;
      try {
        for (const auto& [s, payload] : ring) {
          if (s < start) continue;
          const std::string sb = seq_bytes(s);
          router->send(zmq::buffer(identity), zmq::send_flags::sndmore);
          router->send(zmq::message_t(), zmq::send_flags::sndmore);
          if (with_topic) router->send(zmq::buffer(cfg.topic), zmq::send_flags::sndmore);
          router->send(zmq::buffer(sb), zmq::send_flags::sndmore);
          router->send(zmq::buffer(payload), zmq::send_flags::none);
        }
        // End marker: [END_SEQ, ""] (legacy) or ["", END_SEQ, ""] (with topic).
        router->send(zmq::buffer(identity), zmq::send_flags::sndmore);
        router->send(zmq::message_t(), zmq::send_flags::sndmore);
        if (with_topic) router->send(zmq::message_t(), zmq::send_flags::sndmore);
        router->send(zmq::buffer(kEndSeq, sizeof kEndSeq), zmq::send_flags::sndmore);
        router->send(zmq::message_t(), zmq::send_flags::none);
      } catch (const zmq::error_t& e) {
        spdlog::warn("kv events: replay send failed: {}", e.what());
      }
    }
  }
};

KvPublisher::KvPublisher(PublisherConfig config) : impl_(std::make_unique<Impl>()) {
  impl_->cfg = std::move(config);
  impl_->active = impl_->cfg.enabled && impl_->cfg.publisher == "zmq";
}

KvPublisher::~KvPublisher() { stop(); }

std::string KvPublisher::start() {
  Impl& d = *impl_;
  if (!d.active) return "";
  {
    std::lock_guard lock(d.mu);
    if (d.running || d.thread.joinable()) return "kv events: publisher already started";
  }
  if (d.cfg.publisher != "zmq") return "kv events: unknown publisher \"" + d.cfg.publisher + "\"";
  const std::string endpoint = offset_endpoint_port(d.cfg.endpoint, d.cfg.data_parallel_rank);
  if (endpoint.empty()) {
    return "kv events: cannot offset endpoint \"" + d.cfg.endpoint + "\" for data parallel rank " +
           std::to_string(d.cfg.data_parallel_rank);
  }
  std::string replay;
  if (!d.cfg.replay_endpoint.empty()) {
    replay = offset_endpoint_port(d.cfg.replay_endpoint, d.cfg.data_parallel_rank);
    if (replay.empty()) {
      return "kv events: cannot offset replay endpoint \"" + d.cfg.replay_endpoint +
             "\" for data parallel rank " + std::to_string(d.cfg.data_parallel_rank);
    }
  }
  auto ipv6 = [](const std::string& ep) {
    return ep.find("::") != std::string::npos || ep.find('[') != std::string::npos;
  };
  zmq::context_t& ctx = kv_internal::zmq_context();
  try {
    d.pub.emplace(ctx, zmq::socket_type::pub);
    d.pub->set(zmq::sockopt::sndhwm, static_cast<int>(std::min<uint32_t>(d.cfg.hwm, INT32_MAX)));
    d.pub->set(zmq::sockopt::linger, 0);
    if (ipv6(endpoint)) d.pub->set(zmq::sockopt::ipv6, 1);
    if (kv_internal::pub_binds(endpoint)) {
      d.pub->bind(endpoint);
      d.bound_pub = d.pub->get(zmq::sockopt::last_endpoint);
    } else {
      d.pub->connect(endpoint);
      d.bound_pub = endpoint;
    }
    if (!replay.empty()) {
      d.router.emplace(ctx, zmq::socket_type::router);
      // Room for a whole replay (vLLM keeps pyzmq's default 1000, which truncates long replays).
      const uint64_t hwm = std::max<uint64_t>(1000, uint64_t{d.cfg.buffer_steps} + 2);
      d.router->set(zmq::sockopt::sndhwm, static_cast<int>(std::min<uint64_t>(hwm, INT32_MAX)));
      d.router->set(zmq::sockopt::linger, 0);
      if (ipv6(replay)) d.router->set(zmq::sockopt::ipv6, 1);
      d.router->bind(replay);
      d.bound_replay = d.router->get(zmq::sockopt::last_endpoint);
    }
  } catch (const zmq::error_t& e) {
    d.router.reset();
    d.pub.reset();
    d.bound_pub.clear();
    d.bound_replay.clear();
    return "kv events: cannot open " + endpoint + (replay.empty() ? "" : " / " + replay) + ": " +
           e.what();
  }
  d.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (d.wake_fd < 0) {
    d.router.reset();
    d.pub.reset();
    return "kv events: eventfd failed";
  }
  d.seq = 0;
  d.pending_drop = 0;
  d.ring.clear();
  d.next_seq.store(0);
  {
    std::lock_guard lock(d.mu);
    d.running = true;
    d.stopping = false;
  }
  d.thread = std::thread([&d] { d.run(); });
  return "";
}

void KvPublisher::stop() {
  Impl& d = *impl_;
  {
    std::lock_guard lock(d.mu);
    if (!d.running) return;
    d.running = false;
    d.stopping = true;
    d.wake();
  }
  d.space_cv.notify_all();
  if (d.thread.joinable()) d.thread.join();
  d.pub.reset();
  d.router.reset();
  ::close(d.wake_fd);
  d.wake_fd = -1;
}

void KvPublisher::publish(double ts, std::vector<KvEvent> events) {
  Impl& d = *impl_;
  if (!d.active) return;
  {
    std::unique_lock lock(d.mu);
    if (!d.running) return;
    const size_t cap = std::max<uint32_t>(d.cfg.max_queue_size, 1);
    if (d.queued_batches >= cap &&
        !d.space_cv.wait_for(lock, kFullQueueWait,
                             [&] { return !d.running || d.queued_batches < cap; })) {
      const uint64_t n = d.dropped.fetch_add(1) + 1;
      if (n == 1 || n % 1000 == 0) {
        spdlog::warn("kv events: queue full ({} batches), dropped {} batch(es) so far", cap, n);
      }
      return;
    }
    if (!d.running) return;
    d.push_locked(Item{Item::kBatch, ts, std::move(events), 0});
  }
}

bool KvPublisher::flush(int timeout_ms) {
  Impl& d = *impl_;
  std::unique_lock lock(d.mu);
  if (!d.running) return false;
  const uint64_t target = d.enqueued;
  return d.space_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                             [&] { return d.applied >= target; });
}

uint64_t KvPublisher::dropped_batches() const { return impl_->dropped.load(); }

void KvPublisher::fault_drop(uint32_t n) {
  if (impl_->active) impl_->enqueue(Item{Item::kDrop, 0, {}, n});
}
void KvPublisher::fault_skip(uint32_t n) {
  if (impl_->active) impl_->enqueue(Item{Item::kSkip, 0, {}, n});
}
void KvPublisher::fault_garbage(uint32_t n) {
  if (impl_->active) impl_->enqueue(Item{Item::kGarbage, 0, {}, n});
}
void KvPublisher::fault_restart() {
  if (impl_->active) impl_->enqueue(Item{Item::kRestart, 0, {}, 0});
}

std::string KvPublisher::bound_endpoint() const { return impl_->bound_pub; }
std::string KvPublisher::bound_replay_endpoint() const { return impl_->bound_replay; }
uint64_t KvPublisher::next_sequence() const { return impl_->next_seq.load(); }

}  // namespace ramjet::sim
