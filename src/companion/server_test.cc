// The companion server in-process against a fake vLLM publisher on loopback
// (cache/events/publisher_testing.h), with clients speaking the frames protocol over a Unix socket
// in a temporary directory. The process around it (flags, signals, /metrics) is tested through
// test/support/companion_proc.py.
#include "companion/server.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <thread>
#include <tuple>

#include <sys/stat.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "cache/events/publisher_testing.h"
#include "cache/kv/codec.h"
#include "companion/snapshot.h"

namespace ramjet::companion {
namespace {

using cache::events::FenceMode;
using cache::events::Inventory;
using cache::events::InventoryState;
namespace kv = cache::kv;
using namespace std::chrono_literals;
using cache::events::testing::eventually;
using cache::events::testing::FakeEngine;

constexpr uint32_t kBs = 16;

kv::BlockStored stored(std::vector<kv::BlockHash> hashes, std::optional<kv::BlockHash> parent, uint32_t first_token) {
  kv::BlockStored e;
  e.token_ids.resize(hashes.size() * kBs);
  std::iota(e.token_ids.begin(), e.token_ids.end(), first_token);
  e.block_hashes = std::move(hashes);
  e.parent_block_hash = parent;
  e.block_size = kBs;
  e.medium = "GPU";
  e.group_idx = 0;
  e.kv_cache_spec_kind = "full_attention";
  return e;
}

kv::EventBatch batch_of(std::vector<kv::Event> events) {
  static double clock = 1.7e9;
  kv::EventBatch b;
  b.ts = (clock += 0.001);
  b.events = std::move(events);
  b.data_parallel_rank = 0;
  return b;
}

// Block b of one prompt, below block b - 1 (hash 1000 + b).
kv::EventBatch store_block(uint64_t b) {
  std::optional<kv::BlockHash> parent;
  if (b > 0) parent = kv::BlockHash::from_uint(1000 + b - 1);
  return batch_of({stored({kv::BlockHash::from_uint(1000 + b)}, parent, static_cast<uint32_t>(7 + b * kBs))});
}

// About 6 KB that leave the inventory as it was: 64 blocks stored, then removed.
kv::EventBatch churn(uint64_t i) {
  std::vector<kv::BlockHash> hashes;
  for (uint64_t k = 0; k < 64; ++k) hashes.push_back(kv::BlockHash::from_uint(1'000'000 + i * 64 + k));
  kv::BlockRemoved r;
  r.block_hashes = hashes;
  return batch_of({stored(hashes, std::nullopt, static_cast<uint32_t>(100000 + i * 4096)), r});
}

SessionSecret secret(uint8_t start = 1) {
  SessionSecret s{};
  std::iota(s.begin(), s.end(), start);
  return s;
}

std::shared_ptr<const cache::DigestKey> digest_key() {
  std::array<uint8_t, 32> s{};
  std::iota(s.begin(), s.end(), uint8_t{9});
  return cache::DigestKey::from_secret(s);
}

Challenge fresh_challenge() {
  Challenge c{};
  EXPECT_EQ(RAND_bytes(c.data(), static_cast<int>(c.size())), 1);
  return c;
}

// ramjet's side of one connection, with the frames API only.
class TestClient {
 public:
  TestClient(const Endpoint& e, const SessionSecret& s, const Challenge& c = fresh_challenge())
      : challenge(c), opener_(s, c, Direction::kToRamjet) {
    std::string error;
    fd_ = connect_endpoint(e, Clock::now() + 5s, error);
    EXPECT_GE(fd_, 0) << error;
    const auto hello = seal_hello(s, c);
    io = write_all(fd_, hello, Clock::now() + 5s, nullptr);  // a refusing server may have closed already
  }
  ~TestClient() {
    if (fd_ >= 0) ::close(fd_);
  }

  // The next frame (its spans point into this client until the next call); nullopt on the end of
  // the stream (io says how) or a frame the opener refused (error).
  std::optional<Frame> next(std::chrono::milliseconds limit = 10000ms) {
    const auto deadline = Clock::now() + limit;
    buf_.assign(kFrameHeaderBytes, 0);
    io = read_exact(fd_, buf_, deadline, nullptr);
    if (io != IoStatus::kOk) return std::nullopt;
    auto size = opener_.frame_size(buf_);
    if (!size) {
      error = size.error().code;
      return std::nullopt;
    }
    buf_.resize(*size);
    io = read_exact(fd_, std::span(buf_).subspan(kFrameHeaderBytes), deadline, nullptr);
    if (io != IoStatus::kOk) return std::nullopt;
    auto f = opener_.open(buf_);
    if (!f) {
      error = f.error().code;
      return std::nullopt;
    }
    return *f;
  }
  // The next frame that is not a heartbeat.
  std::optional<Frame> next_not_heartbeat(std::chrono::milliseconds limit = 10000ms) {
    for (;;) {
      auto f = next(limit);
      if (!f || f->type != FrameType::kCaughtUp) return f;
    }
  }

  Challenge challenge;
  IoStatus io = IoStatus::kOk;
  std::optional<FrameErrc> error;

 private:
  int fd_ = -1;
  FrameOpener opener_;
  std::vector<uint8_t> buf_;
};

// An inventory's state in a form that does not depend on record order.
struct Normal {
  uint32_t block_size = 0;
  std::vector<std::tuple<uint32_t, uint32_t, bool>> groups;
  std::vector<std::string> loras;
  std::vector<std::tuple<uint64_t, uint64_t, uint32_t>> blocks;  // key, parent key (0: none), removal keys
  std::vector<std::pair<uint64_t, uint32_t>> removals;
  bool operator==(const Normal&) const = default;
};
Normal normal(const InventoryState& s) {
  Normal n;
  n.block_size = s.block_size;
  for (const auto& g : s.groups) n.groups.emplace_back(g.dp_rank, g.group, g.main);
  n.loras = s.loras;
  for (const auto& b : s.blocks) {
    const uint64_t parent = b.parent == cache::ExactBlockRecord::kNoParent ? 0 : s.blocks.at(b.parent).key;
    n.blocks.emplace_back(b.key, parent, b.removal_keys);
  }
  for (const auto& r : s.removals) n.removals.emplace_back(r.key, r.copies);
  std::sort(n.groups.begin(), n.groups.end());
  std::sort(n.loras.begin(), n.loras.end());
  std::sort(n.blocks.begin(), n.blocks.end());
  std::sort(n.removals.begin(), n.removals.end());
  return n;
}

class Harness {
 public:
  explicit Harness(const std::function<void(ServerOptions&)>& tune = {}, bool engine_up = true) {
    char tmpl[] = "/tmp/rj-companion-XXXXXX";
    dir = ::mkdtemp(tmpl);
    endpoint = *parse_endpoint("unix:" + dir + "/companion.sock");
    ServerOptions o;
    o.listen = {endpoint};
    o.secret = secret();
    o.digest = key;
    o.heartbeat = 100ms;
    o.engine.live_endpoint = engine_up ? engine.live : "tcp://127.0.0.1:1";
    o.engine.replay_endpoint = engine.replay;
    o.engine.topic = engine.topic;
    o.engine.replay_timeout = 3000ms;
    if (tune) tune(o);
    server = std::make_unique<Server>(std::move(o));
    const auto err = server->start();
    EXPECT_FALSE(err) << *err;
    if (engine_up) {
      EXPECT_TRUE(engine.wait_subscribed());
      EXPECT_TRUE(eventually([&] { return server->mode() == FenceMode::kTrusted; }));
    }
  }
  ~Harness() {
    server.reset();
    ::unlink((dir + "/companion.sock").c_str());
    ::rmdir(dir.c_str());
  }
  uint64_t count(ServerOutcome o) const { return server->stats().count(o); }

  FakeEngine engine;
  std::shared_ptr<const cache::DigestKey> key = digest_key();
  std::string dir;
  Endpoint endpoint;
  std::unique_ptr<Server> server;
};

TEST(CompanionServer, ASnapshotThenTheTailRebuildTheCompanionsInventory) {
  Harness h;
  for (uint64_t b = 0; b < 3; ++b) h.engine.publish(store_block(b));
  ASSERT_TRUE(eventually([&] { return h.server->index_blocks() == 3; }));

  TestClient c(h.endpoint, secret());
  auto f = c.next();
  ASSERT_TRUE(f) << label(c.io);
  ASSERT_EQ(f->type, FrameType::kSnapshot);
  const uint64_t generation = f->generation;
  auto snap = decode_snapshot(f->payload);
  ASSERT_TRUE(snap.ok()) << snap.error().reason();
  EXPECT_FALSE(verify_binding(snap->header, c.challenge, h.key->key_id()));
  EXPECT_EQ(snap->header.last_event_sequence, std::optional<uint64_t>(2));
  EXPECT_EQ(snap->header.generation, generation);
  EXPECT_EQ(snap->header.incarnation.size(), 16u + 1 + std::to_string(h.server->engine_generation()).size());
  Inventory mine({}, h.key);
  ASSERT_FALSE(import_snapshot(*snap, mine));
  f = c.next();
  ASSERT_TRUE(f);
  ASSERT_EQ(f->type, FrameType::kCaughtUp);
  EXPECT_TRUE(f->has_event_sequence);
  EXPECT_EQ(f->event_sequence, 2u);

  uint64_t last = 0;
  for (uint64_t b = 3; b < 8; ++b) last = h.engine.publish(store_block(b));
  h.engine.publish(churn(0));
  last = h.engine.publish(churn(1));
  uint64_t expect = 3;
  while (expect <= last) {
    f = c.next_not_heartbeat();
    ASSERT_TRUE(f) << label(c.io);
    ASSERT_EQ(f->type, FrameType::kEvent);
    EXPECT_EQ(f->event_sequence, expect++) << "vLLM sequences follow each other";
    auto batch = kv::decode_batch(f->batch, {});
    ASSERT_TRUE(batch.ok());
    ASSERT_FALSE(mine.apply(*batch));
  }
  InventoryState theirs, ours;
  h.server->export_state(theirs);
  mine.export_state(ours);
  EXPECT_EQ(theirs.blocks.size(), 8u);
  EXPECT_TRUE(normal(theirs) == normal(ours));

  // Idle: heartbeats carry the last sequence.
  f = c.next();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, FrameType::kCaughtUp);
  EXPECT_EQ(f->event_sequence, last);

  metrics::Exposition x;
  h.server->write_metrics(x);
  const std::string text = x.take();
  EXPECT_NE(text.find("ramjet_companion_clients 1"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_companion_client_connections_total{outcome=\"served\"} 1"), std::string::npos);
  EXPECT_NE(text.find("ramjet_companion_kv_state{state=\"trusted\"} 1"), std::string::npos);
  EXPECT_EQ(h.server->health_json(), "{\"status\":\"ok\",\"kv_state\":\"trusted\",\"clients\":1,\"blocks\":8}");
  EXPECT_EQ(h.server->stats().events_forwarded.load(), last - 2);

  h.server->stop();
  f = c.next_not_heartbeat();
  ASSERT_TRUE(f);
  ASSERT_EQ(f->type, FrameType::kDisconnect);
  EXPECT_EQ(f->reason, DisconnectReason::kShutdown);
  EXPECT_EQ(h.count(ServerOutcome::kEndedShutdown), 1u);
  struct stat st{};
  EXPECT_NE(::lstat((h.dir + "/companion.sock").c_str(), &st), 0) << "the socket file is removed";
}

TEST(CompanionServer, AHelloUnderAnotherSecretIsRefused) {
  Harness h;
  TestClient c(h.endpoint, secret(2));
  EXPECT_FALSE(c.next());
  EXPECT_EQ(c.io, IoStatus::kEof);
  EXPECT_TRUE(eventually([&] { return h.count(ServerOutcome::kRefusedBadHello) == 1; }));
  EXPECT_EQ(h.count(ServerOutcome::kServed), 0u);
}

TEST(CompanionServer, AReplayedChallengeIsRefused) {
  Harness h;
  const Challenge same = fresh_challenge();
  TestClient first(h.endpoint, secret(), same);
  auto f = first.next();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, FrameType::kSnapshot);
  TestClient again(h.endpoint, secret(), same);
  EXPECT_FALSE(again.next());
  EXPECT_EQ(again.io, IoStatus::kEof);
  EXPECT_TRUE(eventually([&] { return h.count(ServerOutcome::kRefusedReplayedChallenge) == 1; }));
  TestClient fresh(h.endpoint, secret());
  f = fresh.next();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, FrameType::kSnapshot);
}

TEST(CompanionServer, AClientThatDoesNotReadIsDisconnectedAsSlowWhileAnotherKeepsUp) {
  Harness h([](ServerOptions& o) { o.send_buffer_bytes = 1u << 20; });
  TestClient stalled(h.endpoint, secret());
  TestClient reader(h.endpoint, secret());
  auto f = reader.next();
  ASSERT_TRUE(f);
  ASSERT_EQ(f->type, FrameType::kSnapshot);
  ASSERT_TRUE(eventually([&] { return h.server->stats().clients.load() == 2; }));

  // About 4 MB in rounds of about 325 KB: the reader catches up after each round (its queue
  // stays below the 1 MiB limit), the stalled client's queue passes it.
  constexpr uint64_t kBatches = 600;
  constexpr uint64_t kRound = 50;
  std::atomic<uint64_t> got{0};
  std::atomic<bool> disconnected{false};
  std::thread read([&] {
    while (got.load() < kBatches) {
      auto g = reader.next_not_heartbeat();
      if (!g || g->type != FrameType::kEvent) {
        disconnected = true;
        return;
      }
      got = g->event_sequence + 1;
    }
  });
  for (uint64_t i = 0; i < kBatches; ++i) {
    h.engine.publish(churn(i));
    if ((i + 1) % kRound == 0 && !eventually([&] { return got.load() == i + 1 || disconnected; })) break;
  }
  read.join();
  EXPECT_FALSE(disconnected);
  EXPECT_EQ(got.load(), kBatches);
  EXPECT_TRUE(eventually([&] { return h.count(ServerOutcome::kEndedSlowClient) == 1; }));
  EXPECT_EQ(h.server->stats().clients.load(), 1);
}

TEST(CompanionServer, ARestartedPublisherResetsTheClients) {
  Harness h;
  for (uint64_t b = 0; b < 3; ++b) h.engine.publish(store_block(b));
  ASSERT_TRUE(eventually([&] { return h.server->index_blocks() == 3; }));
  TestClient c(h.endpoint, secret());
  auto f = c.next();
  ASSERT_TRUE(f);
  ASSERT_EQ(f->type, FrameType::kSnapshot);
  const uint64_t generation = f->generation;

  h.engine.restart();
  h.engine.publish(store_block(0));  // sequence 0 again
  f = c.next_not_heartbeat();
  ASSERT_TRUE(f) << label(c.io);
  ASSERT_EQ(f->type, FrameType::kDisconnect);
  EXPECT_EQ(f->reason, DisconnectReason::kReset);
  EXPECT_FALSE(c.next());
  EXPECT_TRUE(eventually([&] { return h.count(ServerOutcome::kEndedReset) == 1; }));

  // Reconnected: a fresh snapshot of the new generation, from the restarted publisher's batches.
  ASSERT_TRUE(eventually([&] { return h.server->mode() == FenceMode::kTrusted && h.server->index_blocks() == 1; }));
  TestClient again(h.endpoint, secret());
  f = again.next();
  ASSERT_TRUE(f);
  ASSERT_EQ(f->type, FrameType::kSnapshot);
  EXPECT_GT(f->generation, generation);
  auto snap = decode_snapshot(f->payload);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->header.last_event_sequence, std::optional<uint64_t>(0));
  EXPECT_EQ(snap->state.blocks.size(), 1u);
}

TEST(CompanionServer, AUnixPeerWithAnotherUidIsRefused) {
  Harness h([](ServerOptions& o) { o.allowed_uids = {static_cast<long>(::geteuid()) + 1}; });
  TestClient c(h.endpoint, secret());
  EXPECT_FALSE(c.next());
  EXPECT_NE(c.io, IoStatus::kOk);
  EXPECT_TRUE(eventually([&] { return h.count(ServerOutcome::kRefusedUid) == 1; }));
  EXPECT_EQ(h.count(ServerOutcome::kServed), 0u);
}

TEST(CompanionServer, AnEngineThatIsNeverTrustedEndsTheClientWithAReset) {
  Harness h([](ServerOptions& o) { o.wait_trusted = 200ms; }, /*engine_up=*/false);
  TestClient c(h.endpoint, secret());
  auto f = c.next();
  ASSERT_TRUE(f) << label(c.io);
  ASSERT_EQ(f->type, FrameType::kDisconnect);
  EXPECT_EQ(f->reason, DisconnectReason::kReset);
  EXPECT_TRUE(eventually([&] { return h.count(ServerOutcome::kEndedNotTrusted) == 1; }));
  EXPECT_EQ(h.server->health_json(), "{\"status\":\"fenced\",\"kv_state\":\"fenced\",\"clients\":0,\"blocks\":0}");
}

TEST(CompanionServer, AHelloThatNeverComesTimesOut) {
  Harness h([](ServerOptions& o) { o.hello_timeout = 100ms; });
  std::string error;
  const int fd = connect_endpoint(h.endpoint, Clock::now() + 5s, error);
  ASSERT_GE(fd, 0);
  uint8_t b = 0;
  EXPECT_EQ(read_exact(fd, std::span(&b, 1), Clock::now() + 5s, nullptr), IoStatus::kEof);
  ::close(fd);
  EXPECT_TRUE(eventually([&] { return h.count(ServerOutcome::kRefusedHelloTimeout) == 1; }));
}

TEST(CompanionServer, SilentConnectionsGiveWayToAClientWithAHello) {
  // Connections that never send a hello hold no slot a real client needs: past max_pending the
  // oldest is dropped, and the client with the secret is served.
  Harness h([](ServerOptions& o) {
    o.hello_timeout = 60000ms;
    o.max_pending = 4;
  });
  std::vector<int> silent;
  for (int i = 0; i < 8; ++i) {
    std::string error;
    silent.push_back(connect_endpoint(h.endpoint, Clock::now() + 5s, error));
    ASSERT_GE(silent.back(), 0) << error;
  }
  TestClient c(h.endpoint, secret());
  auto f = c.next();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, FrameType::kSnapshot);
  f = c.next();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, FrameType::kCaughtUp);
  EXPECT_TRUE(eventually([&] { return h.count(ServerOutcome::kRefusedHelloTimeout) >= 5; }));
  uint8_t b = 0;
  EXPECT_EQ(read_exact(silent.front(), std::span(&b, 1), Clock::now() + 5s, nullptr), IoStatus::kEof);
  for (int fd : silent) ::close(fd);
}

TEST(CompanionServer, PastMaxClientsAnAuthenticClientIsRefused) {
  Harness h([](ServerOptions& o) { o.max_clients = 1; });
  TestClient first(h.endpoint, secret());
  ASSERT_TRUE(first.next());
  TestClient second(h.endpoint, secret());
  EXPECT_FALSE(second.next());
  EXPECT_TRUE(eventually([&] { return h.count(ServerOutcome::kRefusedTooManyClients) == 1; }));
}

}  // namespace
}  // namespace ramjet::companion
