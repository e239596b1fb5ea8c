#include "companion/client.h"

#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <numeric>
#include <set>

namespace ramjet::companion {
namespace {

using namespace std::chrono_literals;
using cache::events::Inventory;

SessionSecret session_secret() {
  SessionSecret s{};
  std::iota(s.begin(), s.end(), uint8_t{1});
  return s;
}

std::shared_ptr<const cache::DigestKey> digest_key(uint8_t start = 9) {
  std::array<uint8_t, 32> s{};
  std::iota(s.begin(), s.end(), start);
  return cache::DigestKey::from_secret(s);
}

constexpr uint32_t kBlock = 16;

std::vector<uint32_t> tokens(size_t blocks, uint32_t first = 5) {
  std::vector<uint32_t> t(kBlock * blocks);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// A store of blocks [from, to) of the prompt tokens(to), chained below block from-1.
cache::kv::EventBatch store(uint64_t from, uint64_t to) {
  const auto t = tokens(to);
  cache::kv::BlockStored e;
  for (uint64_t i = from; i < to; ++i) e.block_hashes.push_back(cache::kv::BlockHash::from_uint(100 + i));
  if (from > 0) e.parent_block_hash = cache::kv::BlockHash::from_uint(100 + from - 1);
  e.token_ids.assign(t.begin() + static_cast<std::ptrdiff_t>(from * kBlock), t.end());
  e.block_size = kBlock;
  e.kv_cache_spec_kind = "full_attention";
  cache::kv::EventBatch b;
  b.events.push_back(std::move(e));
  return b;
}

std::span<const uint8_t> bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

template <typename F>
bool eventually(F done, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

// One accepted connection on the fake companion's side.
struct Conn {
  int fd = -1;
  Challenge challenge{};
  std::unique_ptr<FrameSealer> sealer;
  const std::atomic<bool>* stop = nullptr;
  bool send(const std::string& frame) const {
    return write_all(fd, frame, Clock::now() + 2s, stop) == IoStatus::kOk;
  }
  // Until the client closes its end (or `limit`).
  void wait_closed(std::chrono::milliseconds limit = 5000ms) const {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end && !stop->load()) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0) {
        char c;
        if (::recv(fd, &c, 1, MSG_DONTWAIT) <= 0) return;
      }
    }
  }
};

// An in-process companion on a Unix socket: serves one connection at a time, each with the next
// queued script, or the well-behaved one (snapshot, CaughtUp, the queued tail, heartbeats).
class FakeCompanion {
 public:
  using Script = std::function<void(Conn&)>;

  FakeCompanion() : source_({}, digest_key()) {
    char dir[] = "/tmp/rj-companion-client-XXXXXX";
    EXPECT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    endpoint_ = *parse_endpoint("unix:" + dir_ + "/companion.sock");
    std::string error;
    listen_fd_ = listen_endpoint(endpoint_, 0600, error);
    EXPECT_GE(listen_fd_, 0) << error;
    EXPECT_FALSE(source_.apply(store(0, 4)));
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeCompanion() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
    std::filesystem::remove_all(dir_);
  }

  const Endpoint& endpoint() const { return endpoint_; }
  const Inventory& source() const { return source_; }
  void queue(Script s) {
    std::lock_guard lock(mu_);
    scripts_.push_back(std::move(s));
  }
  // A batch for the source inventory and the tail of the connection being served.
  void publish(cache::kv::EventBatch b) {
    std::lock_guard lock(mu_);
    tail_.push_back(std::move(b));
  }
  int accepted() const { return accepted_.load(); }

  // The snapshot of the source inventory for `c` (its challenge unless told otherwise).
  std::string snapshot_frame(Conn& c, std::optional<Challenge> bound_to = std::nullopt) {
    SnapshotHeader h;
    h.challenge = bound_to.value_or(c.challenge);
    h.key_id = source_.digest_key()->key_id();
    h.generation = 1;
    h.last_event_sequence = seq_;
    h.incarnation = "engine-0/1";
    return c.sealer->snapshot(encode_snapshot(capture_snapshot(source_, h)));
  }
  // The well-behaved companion: snapshot, CaughtUp, then the tail and heartbeats until the client goes.
  void good(Conn& c) {
    if (!c.send(snapshot_frame(c)) || !c.send(c.sealer->caught_up(seq_))) return;
    tail(c);
  }
  void tail(Conn& c) {
    while (!stop_) {
      std::deque<cache::kv::EventBatch> batches;
      {
        std::lock_guard lock(mu_);
        batches.swap(tail_);
      }
      for (auto& b : batches) {
        EXPECT_FALSE(source_.apply(b));
        const std::string payload = cache::kv::encode_batch(b, cache::kv::EncodeOptions{});
        if (!c.send(c.sealer->event(++seq_, bytes(payload)))) return;
      }
      if (!c.send(c.sealer->caught_up(seq_))) return;
      pollfd p{c.fd, POLLIN, 0};
      if (::poll(&p, 1, 30) > 0) return;  // the client closed (it never writes after its hello)
    }
  }
  uint64_t seq() const { return seq_; }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      Conn c;
      c.fd = ::accept(listen_fd_, nullptr, nullptr);
      if (c.fd < 0) continue;
      ++accepted_;
      c.stop = &stop_;
      std::array<uint8_t, kHelloBytes> hello{};
      if (read_exact(c.fd, hello, Clock::now() + 2s, &stop_) == IoStatus::kOk) {
        auto ch = open_hello(hello, session_secret());
        EXPECT_TRUE(ch.ok());
        if (ch.ok()) {
          c.challenge = *ch;
          c.sealer = std::make_unique<FrameSealer>(session_secret(), c.challenge, 1, Direction::kToRamjet);
          Script s;
          {
            std::lock_guard lock(mu_);
            if (!scripts_.empty()) {
              s = std::move(scripts_.front());
              scripts_.pop_front();
            }
          }
          if (s) s(c);
          else good(c);
        }
      }
      ::close(c.fd);
    }
  }

  std::string dir_;
  Endpoint endpoint_;
  int listen_fd_ = -1;
  Inventory source_;  // the server thread writes it once serving
  uint64_t seq_ = 10;
  std::mutex mu_;
  std::deque<Script> scripts_;
  std::deque<cache::kv::EventBatch> tail_;
  std::atomic<int> accepted_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

ClientOptions options(const FakeCompanion& server) {
  return ClientOptions{.upstream = 3,
                       .endpoint = server.endpoint(),
                       .digest = digest_key(),
                       .inventory = cache::events::InventoryLimits{.shard = {.max_blocks = 4096}},
                       .decode = {},
                       .connect_timeout = 500ms,
                       .first_frame_timeout = 2000ms,
                       .frame_timeout = 400ms,
                       .backoff_min = 10ms,
                       .backoff_max = 100ms};
}

// Resident tokens of each prompt in `a` and `b` (equal when both mirror the same engine).
void expect_same_lookups(const Inventory& a, const Inventory& b, size_t blocks) {
  for (size_t n : {size_t{1}, size_t{3}, blocks, blocks + 2}) {
    const auto t = tokens(n);
    const Inventory* both[] = {&a, &b};
    std::optional<uint32_t> out[2];
    cache::events::lookup(both, cache::events::ExactRequest{t, "base", {}}, out);
    EXPECT_EQ(out[0], out[1]) << n << " blocks";
    EXPECT_EQ(out[1], std::min(n, blocks) * kBlock) << n << " blocks";
  }
}

TEST(CompanionClient, TrustsTheSnapshotAtTheFirstCaughtUpAndFollowsTheTail) {
  FakeCompanion server;
  Client client(options(server), session_secret());
  EXPECT_EQ(client.label(), "companion");
  EXPECT_EQ(client.trusted(), nullptr);
  EXPECT_EQ(client.mode(), cache::events::FenceMode::kFenced);
  client.start();
  ASSERT_TRUE(eventually([&] { return client.trusted() != nullptr; }));
  EXPECT_EQ(client.mode(), cache::events::FenceMode::kTrusted);
  EXPECT_EQ(client.current(), client.trusted());
  EXPECT_EQ(client.generation(), 1u);
  EXPECT_EQ(client.stats().count(Outcome::kSnapshot), 1u);
  EXPECT_EQ(client.stats().snapshot_blocks.load(), 4u);
  EXPECT_GE(client.stats().first_trust_ms.load(), 0);
  const Inventory* inv = client.trusted();
  ASSERT_NE(inv->digest_key(), nullptr);
  expect_same_lookups(server.source(), *inv, 4);

  server.publish(store(4, 6));  // the tail: two more blocks below the first four
  ASSERT_TRUE(eventually([&] { return client.stats().events.load() == 1; }));
  EXPECT_EQ(client.trusted(), inv) << "the tail is applied to the published inventory";
  expect_same_lookups(server.source(), *inv, 6);

  metrics::Exposition x;
  const Client* clients[] = {nullptr, &client};
  write_metrics(x, clients);
  const std::string text = x.take();
  EXPECT_NE(text.find("ramjet_companion_connections_total{upstream=\"3\",outcome=\"snapshot\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_companion_trusted{upstream=\"3\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_companion_events_total{upstream=\"3\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_companion_snapshot_blocks{upstream=\"3\"} 4"), std::string::npos) << text;
  client.stop();
  EXPECT_EQ(client.trusted(), nullptr);
}

TEST(CompanionClient, ATamperedFrameFencesAtOnceAndAGoodCompanionIsTrustedAgain) {
  FakeCompanion server;
  std::atomic<bool> tampered{false};
  std::atomic<bool> trusted_before{false};
  Client client(options(server), session_secret());
  server.queue([&](Conn& c) {
    ASSERT_TRUE(c.send(server.snapshot_frame(c)));
    ASSERT_TRUE(c.send(c.sealer->caught_up(server.seq())));
    trusted_before = eventually([&] { return client.trusted() != nullptr; });
    const std::string payload = cache::kv::encode_batch(store(4, 5), cache::kv::EncodeOptions{});
    std::string frame = c.sealer->event(server.seq() + 1, bytes(payload));
    frame[kFrameHeaderBytes + 10] ^= 0x40;  // one byte of the batch
    ASSERT_TRUE(c.send(frame));
    tampered = true;
    c.wait_closed();
  });
  client.start();
  ASSERT_TRUE(eventually([&] { return client.stats().count(Outcome::kBadMac) == 1; }));
  EXPECT_TRUE(trusted_before);
  EXPECT_EQ(client.stats().events.load(), 0u) << "nothing of the tampered frame was applied";
  ASSERT_TRUE(eventually([&] { return client.trusted() != nullptr && server.accepted() == 2; }));
  EXPECT_EQ(client.stats().count(Outcome::kSnapshot), 2u);
  EXPECT_EQ(client.generation(), 2u);
  expect_same_lookups(server.source(), *client.trusted(), 4);
}

TEST(CompanionClient, AGapInTheDeliverySequenceFences) {
  FakeCompanion server;
  Client client(options(server), session_secret());
  std::atomic<bool> was_trusted{false};
  std::atomic<bool> fenced_after{false};
  server.queue([&](Conn& c) {
    ASSERT_TRUE(c.send(server.snapshot_frame(c)));
    ASSERT_TRUE(c.send(c.sealer->caught_up(server.seq())));
    was_trusted = eventually([&] { return client.trusted() != nullptr; });
    (void)c.sealer->caught_up(server.seq());  // sealed, never sent
    ASSERT_TRUE(c.send(c.sealer->caught_up(server.seq())));
    c.wait_closed();
    fenced_after = client.trusted() == nullptr || client.stats().count(Outcome::kSnapshot) > 1;
  });
  client.start();
  ASSERT_TRUE(eventually([&] { return client.stats().count(Outcome::kGap) == 1; }));
  EXPECT_TRUE(was_trusted);
  ASSERT_TRUE(eventually([&] { return server.accepted() == 2 && client.trusted() != nullptr; }));
  EXPECT_TRUE(fenced_after);
}

TEST(CompanionClient, ASnapshotBoundToAnotherChallengeIsRefused) {
  FakeCompanion server;
  Client client(options(server), session_secret());
  server.queue([&](Conn& c) {
    Challenge other = c.challenge;
    other[0] ^= 1;
    ASSERT_TRUE(c.send(server.snapshot_frame(c, other)));
    (void)c.send(c.sealer->caught_up(server.seq()));  // the client may have gone already
    c.wait_closed();
  });
  client.start();
  ASSERT_TRUE(eventually([&] { return client.stats().count(Outcome::kWrongChallenge) == 1; }));
  EXPECT_EQ(client.stats().count(Outcome::kSnapshot), 0u) << "the first snapshot imported is the second connection's";
  ASSERT_TRUE(eventually([&] { return client.trusted() != nullptr; }));
  EXPECT_EQ(client.stats().count(Outcome::kSnapshot), 1u);
}

TEST(CompanionClient, ASnapshotUnderAnotherDigestKeyIsRefused) {
  FakeCompanion server;
  ClientOptions o = options(server);
  o.digest = digest_key(77);
  Client client(o, session_secret());
  client.start();
  ASSERT_TRUE(eventually([&] { return client.stats().count(Outcome::kWrongKey) >= 1; }));
  EXPECT_EQ(client.trusted(), nullptr);
}

TEST(CompanionClient, ASilentCompanionTimesOut) {
  FakeCompanion server;
  Client client(options(server), session_secret());
  std::atomic<bool> was_trusted{false};
  server.queue([&](Conn& c) {
    ASSERT_TRUE(c.send(server.snapshot_frame(c)));
    ASSERT_TRUE(c.send(c.sealer->caught_up(server.seq())));
    was_trusted = eventually([&] { return client.trusted() != nullptr; });
    c.wait_closed();  // no heartbeat
  });
  client.start();
  ASSERT_TRUE(eventually([&] { return client.stats().count(Outcome::kTimeout) == 1; }));
  EXPECT_TRUE(was_trusted);
  ASSERT_TRUE(eventually([&] { return client.trusted() != nullptr && server.accepted() == 2; }));
}

TEST(CompanionClient, ADisconnectResetReconnectsWithoutBackoff) {
  FakeCompanion server;
  ClientOptions o = options(server);
  o.backoff_min = 30s;  // any backoff would outlast the test
  o.backoff_max = 30s;
  Client client(o, session_secret());
  server.queue([&](Conn& c) {
    ASSERT_TRUE(c.send(server.snapshot_frame(c)));
    ASSERT_TRUE(c.send(c.sealer->caught_up(server.seq())));
    ASSERT_TRUE(c.send(c.sealer->disconnect(DisconnectReason::kReset)));
    c.wait_closed();
  });
  client.start();
  ASSERT_TRUE(eventually([&] { return client.stats().count(Outcome::kDisconnectReset) == 1; }));
  ASSERT_TRUE(eventually([&] { return server.accepted() == 2 && client.trusted() != nullptr; }, 3000ms));
  EXPECT_EQ(client.stats().count(Outcome::kSnapshot), 2u);
}

TEST(CompanionClient, AnEventNotAboveTheLastAppliedSequenceFences) {
  FakeCompanion server;
  Client client(options(server), session_secret());
  server.queue([&](Conn& c) {
    ASSERT_TRUE(c.send(server.snapshot_frame(c)));
    const std::string payload = cache::kv::encode_batch(store(4, 5), cache::kv::EncodeOptions{});
    ASSERT_TRUE(c.send(c.sealer->event(server.seq(), bytes(payload))));  // the snapshot's own sequence
    c.wait_closed();
  });
  client.start();
  ASSERT_TRUE(eventually([&] { return client.stats().count(Outcome::kOutOfOrder) == 1; }));
  EXPECT_EQ(client.stats().events.load(), 0u);
}

TEST(CompanionClient, AnUnreachableCompanionIsCountedAndStopEndsTheThreadPromptly) {
  FakeCompanion server;
  ClientOptions o = options(server);
  o.endpoint = *parse_endpoint("unix:/nonexistent/rj-companion.sock");
  Client client(o, session_secret());
  client.start();
  ASSERT_TRUE(eventually([&] { return client.stats().count(Outcome::kConnectFailed) >= 2; }));
  const auto t0 = std::chrono::steady_clock::now();
  client.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_EQ(client.trusted(), nullptr);
}

TEST(CompanionClient, OutcomeLabelsAreDistinct) {
  std::set<std::string_view> seen;
  for (size_t o = 0; o < static_cast<size_t>(Outcome::kCount_); ++o) {
    EXPECT_TRUE(seen.insert(label(static_cast<Outcome>(o))).second) << label(static_cast<Outcome>(o));
  }
  EXPECT_EQ(label(outcome_of(FrameErrc::kBadMac)), "bad_mac");
  EXPECT_EQ(label(outcome_of(SnapshotErrc::kWrongChallenge)), "wrong_challenge");
  EXPECT_EQ(label(outcome_of(DisconnectReason::kSlowClient)), "disconnect_slow_client");
}

}  // namespace
}  // namespace ramjet::companion
