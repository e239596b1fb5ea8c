// The subscriber against a fake vLLM publisher on loopback (cache/events/publisher_testing.h).
// End-to-end tests against ramjet-sim's publisher are in test/integration.
#include "cache/events/subscriber.h"

#include <gtest/gtest.h>

#include <mutex>
#include <numeric>
#include <thread>

#include "cache/events/publisher_testing.h"

namespace ramjet::cache::events {
namespace {

using testing::be8;
using testing::eventually;
using testing::FakeEngine;

constexpr uint32_t kBs = 16;
const std::vector<uint32_t> kPrompt = [] {
  std::vector<uint32_t> t(32 * kBs);
  std::iota(t.begin(), t.end(), 7);
  return t;
}();

// Batch that stores block b of kPrompt below block b - 1 (hash 1000 + b).
kv::EventBatch store_block(uint64_t b, bool clear_first = false) {
  kv::BlockStored e;
  e.block_hashes = {kv::BlockHash::from_uint(1000 + b)};
  if (b > 0) e.parent_block_hash = kv::BlockHash::from_uint(1000 + b - 1);
  e.token_ids.assign(kPrompt.begin() + static_cast<long>(b * kBs), kPrompt.begin() + static_cast<long>((b + 1) * kBs));
  e.block_size = kBs;
  e.medium = "GPU";
  e.group_idx = 0;
  e.kv_cache_spec_kind = "full_attention";
  static double clock = 1.7e9;
  kv::EventBatch batch;
  batch.ts = (clock += 0.001);
  if (clear_first) batch.events.push_back(kv::AllBlocksCleared{});
  batch.events.push_back(e);
  batch.data_parallel_rank = 0;
  return batch;
}

uint32_t resident(const Inventory& inv) {
  const Inventory* one[] = {&inv};
  std::optional<uint32_t> out[1];
  lookup(one, ExactRequest{kPrompt, {}, {}}, out);
  return out[0].value_or(0);
}

uint64_t transitions(const Subscriber& s, FenceEvent e) { return s.stats().transitions[static_cast<size_t>(e)].load(); }

struct Fixture {
  explicit Fixture(bool with_replay = true) {
    SubscriberOptions o;
    o.live_endpoint = engine.live;
    o.replay_endpoint = with_replay ? engine.replay : "";
    o.topic = engine.topic;
    o.replay_timeout = std::chrono::milliseconds(3000);
    sub = std::make_unique<Subscriber>(o, inventory);
    sub->start();
    EXPECT_TRUE(engine.wait_subscribed());
    EXPECT_TRUE(eventually([&] { return sub->stats().connected.load(); }));
  }
  FakeEngine engine;
  Inventory inventory;
  std::unique_ptr<Subscriber> sub;
};

TEST(Subscriber, BatchesSeenFromTheStartOrReplayedFromZeroAreTrusted) {
  Fixture f;
  // The connect's replay from 0 and the live batches race; either way the subscriber ends up
  // with all of them.
  for (uint64_t b = 0; b < 5; ++b) f.engine.publish(store_block(b));
  EXPECT_TRUE(eventually([&] { return f.sub->trusted() && resident(f.inventory) == 5 * kBs; }));
}

TEST(Subscriber, AGapIsFilledByReplayAndLiveBatchesWait) {
  Fixture f;
  for (uint64_t b = 0; b < 3; ++b) f.engine.publish(store_block(b));
  ASSERT_TRUE(eventually([&] { return f.sub->trusted() && resident(f.inventory) == 3 * kBs; }));
  const int replays = f.engine.replays.load();
  f.engine.publish(store_block(3), /*send_live=*/false);  // lost on the way
  f.engine.publish(store_block(4));
  f.engine.publish(store_block(5));
  EXPECT_TRUE(eventually([&] { return f.sub->trusted() && resident(f.inventory) == 6 * kBs; }));
  EXPECT_GT(f.engine.replays.load(), replays);
  EXPECT_GE(transitions(*f.sub, FenceEvent::kGapReplay), 1u);
}

TEST(Subscriber, AnUnreadableBatchFencesUntilTheEngineClears) {
  Fixture f;
  for (uint64_t b = 0; b < 2; ++b) f.engine.publish(store_block(b));
  ASSERT_TRUE(eventually([&] { return f.sub->trusted() && resident(f.inventory) == 2 * kBs; }));
  f.engine.publish_payload("\xc1 not msgpack");
  ASSERT_TRUE(eventually([&] { return !f.sub->trusted(); }));
  EXPECT_EQ(f.sub->stats().decode_errors.load(), 1u);
  EXPECT_EQ(resident(f.inventory), 0u) << "a fenced inventory is emptied";
  // The next batch asks for a replay from 0, which holds the same unreadable batch: still fenced.
  f.engine.publish(store_block(2));
  ASSERT_TRUE(eventually([&] { return transitions(*f.sub, FenceEvent::kReplayFailed) >= 1; }));
  EXPECT_FALSE(f.sub->trusted());
  // A clear makes the engine's cache known again.
  f.engine.publish(store_block(0, /*clear_first=*/true));
  EXPECT_TRUE(eventually([&] { return f.sub->trusted() && resident(f.inventory) == kBs; }));
}

TEST(Subscriber, ARestartedPublisherIsANewGeneration) {
  Fixture f;
  for (uint64_t b = 0; b < 4; ++b) f.engine.publish(store_block(b));
  ASSERT_TRUE(eventually([&] { return f.sub->trusted() && resident(f.inventory) == 4 * kBs; }));
  const uint64_t gen = f.sub->generation();
  f.engine.restart();
  f.engine.publish(store_block(0));  // seq 0 again: what the old engine cached is gone
  EXPECT_TRUE(eventually([&] { return transitions(*f.sub, FenceEvent::kRestart) == 1 && resident(f.inventory) == kBs; }));
  EXPECT_TRUE(f.sub->trusted());
  EXPECT_GT(f.sub->generation(), gen);
}

TEST(Subscriber, WithoutAReplayEndpointAGapFences) {
  Fixture f(/*with_replay=*/false);
  f.engine.publish(store_block(0));
  ASSERT_TRUE(eventually([&] { return f.sub->trusted() && resident(f.inventory) == kBs; }));
  const uint64_t failed = transitions(*f.sub, FenceEvent::kReplayFailed);  // the connect's replay
  f.engine.publish(store_block(1), false);
  f.engine.publish(store_block(2));
  EXPECT_TRUE(eventually([&] { return transitions(*f.sub, FenceEvent::kReplayFailed) == failed + 1; }));
  EXPECT_FALSE(f.sub->trusted());
  EXPECT_EQ(resident(f.inventory), 0u);
}

TEST(Subscriber, MalformedEnvelopesAreCountedAndIgnored) {
  Fixture f;
  f.engine.publish(store_block(0));
  ASSERT_TRUE(eventually([&] { return f.sub->trusted() && resident(f.inventory) == kBs; }));
  f.engine.send_raw({"kv", be8(9)});                                 // two frames
  f.engine.send_raw({"kvx", be8(9), kv::encode_batch(store_block(5), {})});  // another topic
  f.engine.send_raw({"kv", "\x01\x02", kv::encode_batch(store_block(5), {})});  // a 2-byte sequence
  f.engine.publish(store_block(1));
  EXPECT_TRUE(eventually([&] { return f.sub->stats().bad_frames.load() == 3 && resident(f.inventory) == 2 * kBs; }));
  EXPECT_TRUE(f.sub->trusted()) << "without a sequence nothing is known to be lost";
}

}  // namespace
}  // namespace ramjet::cache::events
