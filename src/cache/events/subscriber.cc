#include "cache/events/subscriber.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace ramjet::cache::events {

namespace {

zmq::context_t& context() {
  static auto* ctx = new zmq::context_t(1);  // leaked on purpose: no zmq_ctx_term at exit
  return *ctx;
}

std::atomic<uint64_t> g_monitors{0};

constexpr uint64_t kEndSeq = ~uint64_t{0};  // vLLM's (-1).to_bytes(8, "big", signed=True)

std::optional<uint64_t> read_seq(const zmq::message_t& m) {
  if (m.size() != 8) return std::nullopt;
  const auto* p = static_cast<const uint8_t*>(m.data());
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

std::string seq_bytes(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
  return s;
}

std::span<const uint8_t> bytes_of(const zmq::message_t& m) {
  return {static_cast<const uint8_t*>(m.data()), m.size()};
}

}  // namespace

struct Subscriber::Loop {
  struct Held {
    uint64_t seq;
    kv::EventBatch batch;
    bool clears;
    std::string raw;  // the payload bytes, kept only for an observer
  };

  Subscriber& self;
  SequenceFence fence;
  zmq::socket_t sub{context(), zmq::socket_type::sub};
  zmq::socket_t monitor{context(), zmq::socket_type::pair};
  std::optional<zmq::socket_t> dealer;
  std::optional<ReplayRequest> replay;
  std::chrono::steady_clock::time_point replay_deadline;
  std::vector<Held> held;
  // A fenced engine's next recovery try (SequenceFence::on_retry), and the wait after it.
  static constexpr std::chrono::milliseconds kRetryMin{1000}, kRetryMax{60000};
  std::optional<std::chrono::steady_clock::time_point> retry_at;
  std::chrono::milliseconds retry_wait = kRetryMin;

  explicit Loop(Subscriber& s) : self(s), fence(s.options_.fence) {
    const auto& o = self.options_;
    sub.set(zmq::sockopt::linger, 0);
    sub.set(zmq::sockopt::rcvhwm, 100000);
    sub.set(zmq::sockopt::reconnect_ivl, static_cast<int>(o.reconnect_min.count()));
    sub.set(zmq::sockopt::reconnect_ivl_max, static_cast<int>(o.reconnect_max.count()));
    const std::string addr = "inproc://ramjet-kv-monitor-" + std::to_string(g_monitors.fetch_add(1));
    if (zmq_socket_monitor(sub.handle(), addr.c_str(), ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) != 0) {
      throw zmq::error_t();
    }
    monitor.set(zmq::sockopt::linger, 0);
    monitor.connect(addr);
    sub.set(zmq::sockopt::subscribe, o.topic);
    sub.connect(o.live_endpoint);
  }

  void publish() {
    self.mode_.store(fence.mode(), std::memory_order_release);
    self.untrusted_.note(fence.mode());
    self.generation_.store(self.generation_offset_ + fence.generation(), std::memory_order_release);
    if (self.observer_) self.observer_->state(fence.mode(), self.generation_offset_ + fence.generation());
  }

  std::string raw_copy(const zmq::message_t& payload) const {
    return self.observer_ ? std::string(static_cast<const char*>(payload.data()), payload.size()) : std::string();
  }

  // Does what the fence said about one batch (or about none: a replay's end, a disconnect).
  void handle(const Step& step, Held* batch) {
    if (!fence.trusted()) publish();  // readers stop trusting before the index changes
    if (step.clear_index) self.inventory_.clear();
    if (step.drop_held) held.clear();
    if (batch != nullptr && step.verdict == Verdict::kApply) {
      ApplyCounts counts;
      const auto err = self.inventory_.apply(batch->batch, &counts);
      self.stats_.blocks_stored.fetch_add(counts.stored, std::memory_order_relaxed);
      self.stats_.blocks_removed.fetch_add(counts.removed, std::memory_order_relaxed);
      for (size_t t = 0; t < kTiers; ++t) {
        self.stats_.tier_blocks_stored[t].fetch_add(counts.stored_by_tier[t], std::memory_order_relaxed);
        self.stats_.tier_blocks_removed[t].fetch_add(counts.removed_by_tier[t], std::memory_order_relaxed);
      }
      if (err) {
        self.stats_.index_errors.fetch_add(1, std::memory_order_relaxed);
        count(step);
        end_replay();
        handle(fence.on_index_error(), nullptr);
        return;
      }
      if (self.observer_) {
        self.observer_->applied(batch->seq, std::move(batch->raw));  // the batch is done with
      }
    } else if (batch != nullptr && step.verdict == Verdict::kHold) {
      held.push_back(std::move(*batch));
    }
    publish();  // and trust again only once the index is whole
    count(step);
    if (step.replay) start_replay(*step.replay);
  }

  // Counted once the state they describe is published.
  void count(const Step& step) {
    for (size_t e = 0; e < self.stats_.transitions.size(); ++e) {
      if (step.events & (1u << e)) self.stats_.transitions[e].fetch_add(1, std::memory_order_relaxed);
    }
  }

  void end_replay() {
    dealer.reset();
    replay.reset();
  }

  void start_replay(const ReplayRequest& r) {
    end_replay();
    const auto& o = self.options_;
    if (o.replay_endpoint.empty()) {
      handle(fence.on_replay_end(r.ticket, false), nullptr);
      return;
    }
    dealer.emplace(context(), zmq::socket_type::dealer);
    dealer->set(zmq::sockopt::linger, 0);
    dealer->set(zmq::sockopt::rcvhwm, static_cast<int>(std::min<uint64_t>(o.fence.replay_limit + 1024, INT32_MAX)));
    dealer->connect(o.replay_endpoint);
    const std::string from = seq_bytes(r.from);
    dealer->send(zmq::message_t(), zmq::send_flags::sndmore);
    dealer->send(zmq::buffer(from), zmq::send_flags::none);
    replay = r;
    replay_deadline = std::chrono::steady_clock::now() + o.replay_timeout;
  }

  void replay_failed() {
    const uint64_t ticket = replay->ticket;
    end_replay();
    handle(fence.on_replay_end(ticket, false), nullptr);
  }

  void replay_done() {
    const uint64_t ticket = replay->ticket;
    end_replay();
    handle(fence.on_replay_end(ticket, true), nullptr);
    if (!fence.trusted()) return;
    std::vector<Held> again;
    again.swap(held);
    for (auto& h : again) {
      if (fence.mode() == FenceMode::kFenced) break;  // the index failed on one of them
      handle(fence.on_held(h.seq, h.clears, h.batch.ts), &h);
    }
  }

  // One message of the replay: [empty, seq, payload] (vLLM < 0.26) or [empty, topic, seq, payload].
  void on_replay_message(std::vector<zmq::message_t>& frames) {
    if (frames.size() < 3 || frames.size() > 4 || frames[0].size() != 0) {
      self.stats_.bad_frames.fetch_add(1, std::memory_order_relaxed);
      return replay_failed();
    }
    const zmq::message_t& seq_frame = frames[frames.size() - 2];
    const zmq::message_t& payload = frames.back();
    const auto seq = read_seq(seq_frame);
    if (!seq) {
      self.stats_.bad_frames.fetch_add(1, std::memory_order_relaxed);
      return replay_failed();
    }
    if (*seq == kEndSeq || payload.size() == 0) return replay_done();
    auto decoded = kv::decode_batch(bytes_of(payload), self.options_.decode);
    if (!decoded) {
      self.stats_.decode_errors.fetch_add(1, std::memory_order_relaxed);
      return replay_failed();
    }
    self.stats_.replayed.fetch_add(1, std::memory_order_relaxed);
    Held h{*seq, std::move(*decoded), false, raw_copy(payload)};
    h.clears = kv::clears_all(h.batch);
    handle(fence.on_replay_batch(replay->ticket, h.seq, h.clears, h.batch.ts), &h);
  }

  void on_live_message(std::vector<zmq::message_t>& frames) {
    const auto& topic = self.options_.topic;
    if (frames.size() != 3 || frames[0].to_string_view() != topic) {
      self.stats_.bad_frames.fetch_add(1, std::memory_order_relaxed);
      return;  // without a sequence nothing is known to be lost; the next batch shows any gap
    }
    const auto seq = read_seq(frames[1]);
    if (!seq) {
      self.stats_.bad_frames.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    self.stats_.batches.fetch_add(1, std::memory_order_relaxed);
    auto decoded = kv::decode_batch(bytes_of(frames[2]), self.options_.decode);
    if (!decoded) {
      // A numbered batch that cannot be read is a batch lost for good: the index is not whole.
      self.stats_.decode_errors.fetch_add(1, std::memory_order_relaxed);
      end_replay();
      handle(fence.on_index_error(), nullptr);
      return;
    }
    Held h{*seq, std::move(*decoded), false, raw_copy(frames[2])};
    h.clears = kv::clears_all(h.batch);
    handle(fence.on_live(h.seq, h.clears, h.batch.ts), &h);
  }

  void on_monitor_event() {
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(monitor, std::back_inserter(frames), zmq::recv_flags::dontwait)) return;
    if (frames.empty() || frames[0].size() < 2) return;
    uint16_t event = 0;
    std::memcpy(&event, frames[0].data(), sizeof(event));
    if (event == ZMQ_EVENT_CONNECTED) {
      self.stats_.connected.store(true, std::memory_order_relaxed);
      handle(fence.on_connect(), nullptr);
    } else if (event == ZMQ_EVENT_DISCONNECTED) {
      self.stats_.connected.store(false, std::memory_order_relaxed);
      end_replay();
      handle(fence.on_disconnect(), nullptr);
    }
  }

  // While fenced and connected with a replay endpoint and no replay running: a full replay again
  // once the backoff has passed. Trusted resets it.
  void maybe_retry() {
    const auto now = std::chrono::steady_clock::now();
    if (fence.mode() != FenceMode::kFenced) {
      if (fence.trusted()) retry_wait = kRetryMin;
      retry_at.reset();
      return;
    }
    if (dealer || self.options_.replay_endpoint.empty() || !self.stats_.connected.load(std::memory_order_relaxed)) return;
    if (!retry_at) {
      retry_at = now + retry_wait;
      return;
    }
    if (now < *retry_at) return;
    retry_at.reset();
    retry_wait = std::min(retry_wait * 2, kRetryMax);
    handle(fence.on_retry(), nullptr);
  }

  // The observer's lock while the inventory may change (none without an observer).
  std::unique_lock<std::mutex> guard() const {
    return self.observer_ ? std::unique_lock<std::mutex>(self.observer_->mutex()) : std::unique_lock<std::mutex>();
  }

  void run() {
    {
      auto lock = guard();
      publish();
    }
    while (!self.stop_.load(std::memory_order_acquire) && !self.reconfigure_.load(std::memory_order_acquire)) {
      zmq::pollitem_t items[3] = {{sub.handle(), 0, ZMQ_POLLIN, 0}, {monitor.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, 0, ZMQ_POLLIN, 0}};
      size_t n = 2;
      auto timeout = std::chrono::milliseconds(100);
      if (dealer) {
        items[2].socket = dealer->handle();
        n = 3;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(replay_deadline - std::chrono::steady_clock::now());
        timeout = std::clamp(left, std::chrono::milliseconds(0), timeout);
      }
      zmq::poll(items, n, timeout);
      auto lock = guard();
      if (items[1].revents & ZMQ_POLLIN) on_monitor_event();
      // The replay first: held live batches wait for it anyway.
      for (int i = 0; dealer && i < 1024; ++i) {
        std::vector<zmq::message_t> frames;
        if (!zmq::recv_multipart(*dealer, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
        on_replay_message(frames);
      }
      if (dealer && std::chrono::steady_clock::now() >= replay_deadline) replay_failed();
      for (int i = 0; i < 1024; ++i) {
        std::vector<zmq::message_t> frames;
        if (!zmq::recv_multipart(sub, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
        on_live_message(frames);
      }
      maybe_retry();
    }
  }
};

Subscriber::Subscriber(SubscriberOptions options, Inventory& inventory, SubscriberObserver* observer)
    : options_(options), base_(std::move(options)), inventory_(inventory), observer_(observer) {}

Subscriber::~Subscriber() { stop(); }

void Subscriber::start() {
  if (thread_.joinable()) return;
  stop_.store(false);
  thread_ = std::thread([this] { run(); });
}

void Subscriber::request_stop() { stop_.store(true, std::memory_order_release); }

void Subscriber::stop() {
  request_stop();
  if (thread_.joinable()) thread_.join();
}

void Subscriber::set_endpoints(std::string live, std::string replay, std::string topic) {
  std::lock_guard lock(pending_mu_);
  SubscriberOptions o = pending_ ? *pending_ : base_;
  o.live_endpoint = std::move(live);
  o.replay_endpoint = std::move(replay);
  o.topic = std::move(topic);
  pending_ = std::move(o);
  reconfigure_.store(true, std::memory_order_release);
}

bool Subscriber::take_pending() {
  std::lock_guard lock(pending_mu_);
  reconfigure_.store(false, std::memory_order_release);
  if (!pending_) return false;
  options_ = std::move(*pending_);
  pending_.reset();
  return true;
}

void Subscriber::run() {
  // A socket that cannot be made (a malformed endpoint, no file descriptors) leaves the engine
  // fenced; the loop tries again every second until stopped. New endpoints (set_endpoints) end
  // the loop: the index is dropped and the new endpoints subscribed with a fence of their own.
  auto pause = [this] {
    for (int i = 0; i < 10 && !stop_.load(std::memory_order_acquire) && !reconfigure_.load(std::memory_order_acquire); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  };
  // Outside a loop: fenced and empty (the observer told under its lock).
  auto drop = [this](bool clear) {
    std::unique_lock<std::mutex> lock;
    if (observer_) lock = std::unique_lock<std::mutex>(observer_->mutex());
    mode_.store(FenceMode::kFenced, std::memory_order_release);
    untrusted_.note(FenceMode::kFenced);
    if (clear) inventory_.clear();
    if (observer_) observer_->state(FenceMode::kFenced, generation_.load(std::memory_order_acquire));
  };
  bool looped = false;
  while (!stop_.load(std::memory_order_acquire)) {
    if (take_pending()) drop(true);
    if (options_.live_endpoint.empty()) {  // nothing to subscribe to (yet)
      drop(false);
      pause();
      continue;
    }
    // Each loop's fence starts at generation 0: a later loop (new endpoints, a socket error)
    // counts on from what was published, as it starts the index again from empty.
    if (looped) generation_offset_ = generation_.load(std::memory_order_acquire) + 1;
    looped = true;
    try {
      Loop loop(*this);
      loop.run();
      if (!reconfigure_.load(std::memory_order_acquire)) return;
    } catch (const zmq::error_t&) {
      drop(true);
      pause();
    }
  }
}

}  // namespace ramjet::cache::events
