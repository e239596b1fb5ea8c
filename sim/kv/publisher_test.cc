// sim/kv tests: the payload per config (encoding itself is tested in cache/kv), seq framing, replay
// over real tcp loopback sockets in both reply layouts, faults, DP offsets, config parsing.
#include <gtest/gtest.h>

#include <zmq_addon.hpp>

#include <chrono>
#include <cstring>
#include <thread>

#include "cache/kv/codec_testing.h"
#include "sim/kv/kv_internal.h"
#include "sim/kv/publisher.h"

namespace ramjet::sim {
namespace {

using namespace std::chrono_literals;
using cache::kv::testing::be64;
using cache::kv::testing::hex;
using cache::kv::testing::spec_bytes;

uint64_t from_be64(const zmq::message_t& m) {
  EXPECT_EQ(m.size(), 8u);
  uint64_t v = 0;
  for (size_t i = 0; i < m.size(); ++i) v = (v << 8) | static_cast<const uint8_t*>(m.data())[i];
  return v;
}

BlockStored stored(std::vector<uint64_t> hashes, std::optional<uint64_t> parent,
                   std::vector<uint32_t> tokens, uint32_t block_size) {
  return cache::kv::testing::gpu_stored(std::move(hashes), parent, std::move(tokens), block_size);
}

BlockRemoved removed(std::vector<uint64_t> hashes) {
  return cache::kv::testing::gpu_removed(std::move(hashes));
}

// ---------------------------------------------------------------------------------- payload

// The defaults are vLLM's: map layout, 64-bit int hashes, the publisher's DP rank in the batch.
TEST(SimKvPayload, DefaultsAreTheMapLayoutWithIntHashesAndTheRank) {
  PublisherConfig c;
  c.data_parallel_rank = 5;
  BlockStored s = stored({1, 2}, 9, {1, 2, 3, 4}, 2);
  s.kv_cache_spec_kind.reset();
  s.group_idx = 3;
  EXPECT_EQ(hex(encode_payload(c, 1.0, {s})),
            hex(spec_bytes("93 cb 3f f0 00 00 00 00 00 00 91 8a a4 \"type\" ab \"BlockStored\" "
                           "ac \"block_hashes\" 92 01 02 b1 \"parent_block_hash\" 09 "
                           "a9 \"token_ids\" 94 01 02 03 04 aa \"block_size\" 02 a7 \"lora_id\" c0 "
                           "a6 \"medium\" a3 \"GPU\" a9 \"lora_name\" c0 aa \"extra_keys\" 92 c0 c0 "
                           "a9 \"group_idx\" 03 05")));
  // --kv-events-format array --kv-events-hash bytes; a negative rank is None.
  c.encoding.layout = cache::kv::Layout::kArray;
  c.encoding.int_block_hashes = false;
  c.data_parallel_rank = -1;
  const BlockRemoved r = removed({7});
  const auto d = r.block_hashes[0].bytes();
  EXPECT_EQ(hex(encode_payload(c, 0.5, {r})),
            hex(spec_bytes("93 cb 3f e0 00 00 00 00 00 00 91 94 ac \"BlockRemoved\" 91 c4 20") +
                std::string(reinterpret_cast<const char*>(d.data()), d.size()) +
                spec_bytes("a3 \"GPU\" 00 c0")));
}

// ------------------------------------------------------------------------- offsets, config

TEST(SimKvOffsetEndpointPort, VllmRules) {
  EXPECT_EQ(offset_endpoint_port("tcp://*:5557", 0), "tcp://*:5557");
  EXPECT_EQ(offset_endpoint_port("tcp://*:5557", 1), "tcp://*:5558");
  EXPECT_EQ(offset_endpoint_port("tcp://localhost:5557", 2), "tcp://localhost:5559");
  EXPECT_EQ(offset_endpoint_port("tcp://[::1]:5557", 3), "tcp://[::1]:5560");
  EXPECT_EQ(offset_endpoint_port("tcp://*:0", 3), "tcp://*:0");
  EXPECT_EQ(offset_endpoint_port("inproc://cache", 0), "inproc://cache");
  EXPECT_EQ(offset_endpoint_port("inproc://cache", 1), "inproc://cache_dp1");
  EXPECT_EQ(offset_endpoint_port("ipc:///tmp/kv", 0), "ipc:///tmp/kv");
  EXPECT_EQ(offset_endpoint_port("ipc:///tmp/kv", 1), "");
  EXPECT_EQ(offset_endpoint_port("tcp://*:65535", 1), "");
  EXPECT_EQ(offset_endpoint_port("tcp://*:abc", 1), "");
  EXPECT_EQ(offset_endpoint_port("", 4), "");
}

TEST(SimKvBindRule, LikeVllm) {
  EXPECT_TRUE(kv_internal::pub_binds("tcp://*:5557"));
  EXPECT_TRUE(kv_internal::pub_binds("tcp://[::]:5557"));
  EXPECT_TRUE(kv_internal::pub_binds("ipc:///tmp/x"));
  EXPECT_TRUE(kv_internal::pub_binds("inproc://x"));
  EXPECT_FALSE(kv_internal::pub_binds("tcp://0.0.0.0:5557"));
  EXPECT_FALSE(kv_internal::pub_binds("tcp://127.0.0.1:5557"));
}

TEST(SimKvConfig, FullExample) {
  PublisherConfig c;
  c.data_parallel_rank = 2;
  ASSERT_EQ(parse_kv_events_config(
                R"({"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:6000",
                    "replay_endpoint":"tcp://*:6100","buffer_steps":100,"hwm":1000,
                    "max_queue_size":50,"topic":"kv-events"})",
                c),
            "");
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.publisher, "zmq");
  EXPECT_EQ(c.endpoint, "tcp://*:6000");
  EXPECT_EQ(c.replay_endpoint, "tcp://*:6100");
  EXPECT_EQ(c.buffer_steps, 100u);
  EXPECT_EQ(c.hwm, 1000u);
  EXPECT_EQ(c.max_queue_size, 50u);
  EXPECT_EQ(c.topic, "kv-events");
  EXPECT_EQ(c.data_parallel_rank, 2);  // not a config key: left alone
}

TEST(SimKvConfig, PublisherDefaultsFollowEnable) {
  PublisherConfig c;
  ASSERT_EQ(parse_kv_events_config(R"({"enable_kv_cache_events":true})", c), "");
  EXPECT_EQ(c.publisher, "zmq");
  EXPECT_EQ(c.endpoint, "tcp://*:5557");
  EXPECT_EQ(c.replay_endpoint, "");
  EXPECT_EQ(c.buffer_steps, 10000u);
  EXPECT_EQ(c.hwm, 100000u);
  EXPECT_EQ(c.max_queue_size, 100000u);
  EXPECT_EQ(c.topic, "");
  PublisherConfig d;
  ASSERT_EQ(parse_kv_events_config(R"({})", d), "");
  EXPECT_FALSE(d.enabled);
  EXPECT_EQ(d.publisher, "null");
  PublisherConfig e;
  ASSERT_EQ(parse_kv_events_config(
                R"({"enable_kv_cache_events":true,"publisher":null,"replay_endpoint":null})", e),
            "");
  EXPECT_EQ(e.publisher, "zmq");
  PublisherConfig f;
  ASSERT_EQ(parse_kv_events_config(R"({"enable_kv_cache_events":true,"publisher":"null"})", f), "");
  EXPECT_EQ(f.publisher, "null");
}

TEST(SimKvConfig, Errors) {
  const char* bad[] = {
      R"({"enable_kv_cache_events":true,"bogus":1})",
      R"({"enable_kv_cache_events":"yes"})",
      R"({"publisher":"kafka"})",
      R"({"publisher":3})",
      R"({"endpoint":5557})",
      R"({"replay_endpoint":5558})",
      R"({"buffer_steps":-1})",
      R"({"buffer_steps":1.5})",
      R"({"hwm":"1000"})",
      R"({"max_queue_size":true})",
      R"({"topic":null})",
      R"([1,2])",
      R"({"enable_kv_cache_events":true)",
  };
  for (const char* text : bad) {
    PublisherConfig c;
    c.topic = "unchanged";
    const std::string err = parse_kv_events_config(text, c);
    EXPECT_FALSE(err.empty()) << text;
    EXPECT_EQ(c.topic, "unchanged") << text;  // untouched on error
  }
  PublisherConfig c;
  EXPECT_NE(parse_kv_events_config(R"({"bogus":1})", c).find("bogus"), std::string::npos);
}

// ------------------------------------------------------------------------------ publisher

std::string local(std::string endpoint) {  // tcp://0.0.0.0:P -> tcp://127.0.0.1:P
  const std::string any = "tcp://0.0.0.0:";
  if (endpoint.starts_with(any)) endpoint = "tcp://127.0.0.1:" + endpoint.substr(any.size());
  return endpoint;
}

PublisherConfig tcp_config(ReplayLayout layout, uint32_t buffer_steps = 100) {
  PublisherConfig c;
  c.enabled = true;
  c.publisher = "zmq";
  c.endpoint = "tcp://*:0";
  c.replay_endpoint = "tcp://127.0.0.1:0";
  c.topic = "test";
  c.buffer_steps = buffer_steps;
  c.hwm = 1000;
  c.replay_layout = layout;
  return c;
}

std::vector<KvEvent> batch_events(int i) {
  return {stored({static_cast<uint64_t>(1000 + i)}, std::nullopt, {1, 2, 3, 4}, 4),
          removed({static_cast<uint64_t>(i)})};
}

std::string batch_payload(const PublisherConfig& c, int i) {
  return encode_payload(c, 1000.0 + i, batch_events(i));
}

const std::vector<KvEvent> kProbe{AllBlocksCleared{}};  // ts 0: never equal to a real batch

class Client {
 public:
  explicit Client(zmq::context_t& ctx) : ctx_(ctx) {}

  zmq::socket_t sub(const std::string& endpoint, const std::string& topic) {
    zmq::socket_t s(ctx_, zmq::socket_type::sub);
    s.set(zmq::sockopt::subscribe, topic);
    s.set(zmq::sockopt::rcvtimeo, 5000);
    s.set(zmq::sockopt::linger, 0);
    s.connect(endpoint);
    return s;
  }
  zmq::socket_t dealer(const std::string& endpoint) {
    zmq::socket_t s(ctx_, zmq::socket_type::dealer);
    s.set(zmq::sockopt::rcvtimeo, 5000);
    s.set(zmq::sockopt::linger, 0);
    s.connect(endpoint);
    return s;
  }

 private:
  zmq::context_t& ctx_;
};

std::vector<zmq::message_t> recv_all(zmq::socket_t& s) {
  std::vector<zmq::message_t> frames;
  const auto n = zmq::recv_multipart(s, std::back_inserter(frames));
  EXPECT_TRUE(n.has_value()) << "receive timed out";
  return frames;
}

bool readable(zmq::socket_t& s, std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  return zmq::poll(&item, 1, timeout) > 0;
}

// Slow joiner: publish probes until the SUB sees one, then restart the publisher so real batches
// start at seq 0, and drain the probes still in flight (recognised by payload).
void handshake(KvPublisher& pub, zmq::socket_t& sub) {
  bool joined = false;
  for (int i = 0; i < 500 && !joined; ++i) {
    pub.publish(0.0, kProbe);
    ASSERT_TRUE(pub.flush());
    joined = readable(sub, 10ms);
  }
  ASSERT_TRUE(joined) << "subscriber never joined";
  pub.fault_restart();
  ASSERT_TRUE(pub.flush());
  ASSERT_EQ(pub.next_sequence(), 0u);
}

struct Live {
  uint64_t seq;
  std::string payload;
};

// Next non-probe live message: checks the 3-frame layout and the topic.
Live next_live(zmq::socket_t& sub, const PublisherConfig& c) {
  const std::string probe = encode_payload(c, 0.0, kProbe);
  for (;;) {
    auto frames = recv_all(sub);
    if (frames.empty()) return {~0ull, ""};
    EXPECT_EQ(frames.size(), 3u);
    if (frames.size() != 3) return {~0ull, ""};
    EXPECT_EQ(frames[0].to_string(), c.topic);
    EXPECT_EQ(frames[1].size(), 8u);
    if (frames[2].to_string() == probe) continue;
    return {from_be64(frames[1]), frames[2].to_string()};
  }
}

struct Replayed {
  std::vector<std::pair<uint64_t, std::string>> batches;
  bool ended = false;
};

Replayed replay(zmq::socket_t& dealer, uint64_t start, ReplayLayout layout,
                const std::string& topic) {
  // A DEALER sends ["", start_seq]; the ROUTER sees [identity, "", start_seq].
  dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(be64(start)), zmq::send_flags::none);
  Replayed out;
  for (int guard = 0; guard < 100000; ++guard) {
    auto frames = recv_all(dealer);
    if (frames.empty()) break;
    EXPECT_EQ(frames[0].size(), 0u) << "leading empty delimiter";
    if (layout == ReplayLayout::kWithTopic) {
      EXPECT_EQ(frames.size(), 4u);
      if (frames.size() != 4) break;
      if (frames[3].size() == 0) {  // ["", END_SEQ, ""]
        EXPECT_EQ(frames[1].size(), 0u);
        EXPECT_EQ(from_be64(frames[2]), ~0ull);
        out.ended = true;
        break;
      }
      EXPECT_EQ(frames[1].to_string(), topic);
      out.batches.emplace_back(from_be64(frames[2]), frames[3].to_string());
    } else {
      EXPECT_EQ(frames.size(), 3u);
      if (frames.size() != 3) break;
      if (frames[2].size() == 0) {  // [END_SEQ, ""]
        EXPECT_EQ(from_be64(frames[1]), ~0ull);
        out.ended = true;
        break;
      }
      out.batches.emplace_back(from_be64(frames[1]), frames[2].to_string());
    }
  }
  return out;
}

class SimKvPublisherTest : public ::testing::TestWithParam<ReplayLayout> {};

TEST_P(SimKvPublisherTest, SeqFramingFromZero) {
  zmq::context_t ctx;
  Client cl(ctx);
  PublisherConfig c = tcp_config(GetParam());
  KvPublisher pub(c);
  ASSERT_EQ(pub.start(), "");
  ASSERT_TRUE(pub.bound_endpoint().starts_with("tcp://0.0.0.0:")) << pub.bound_endpoint();
  ASSERT_NE(pub.bound_endpoint(), "tcp://0.0.0.0:0");
  ASSERT_TRUE(pub.bound_replay_endpoint().starts_with("tcp://127.0.0.1:"));
  ASSERT_NE(pub.bound_replay_endpoint(), "tcp://127.0.0.1:0");
  auto sub = cl.sub(local(pub.bound_endpoint()), c.topic);
  handshake(pub, sub);
  for (int i = 0; i < 10; ++i) pub.publish(1000.0 + i, batch_events(i));
  ASSERT_TRUE(pub.flush());
  EXPECT_EQ(pub.next_sequence(), 10u);
  for (int i = 0; i < 10; ++i) {
    const Live m = next_live(sub, c);
    EXPECT_EQ(m.seq, static_cast<uint64_t>(i));
    EXPECT_EQ(hex(m.payload), hex(batch_payload(c, i)));
  }
  pub.stop();
  pub.publish(1.0, kProbe);  // after stop: no-op
  EXPECT_EQ(pub.next_sequence(), 10u);
}

TEST_P(SimKvPublisherTest, ReplayRangeAfterNineteenBatches) {
  zmq::context_t ctx;
  Client cl(ctx);
  PublisherConfig c = tcp_config(GetParam());
  KvPublisher pub(c);
  ASSERT_EQ(pub.start(), "");
  for (int i = 0; i < 19; ++i) pub.publish(1000.0 + i, batch_events(i));
  ASSERT_TRUE(pub.flush());
  auto dealer = cl.dealer(pub.bound_replay_endpoint());
  const Replayed r = replay(dealer, 10, c.replay_layout, c.topic);
  EXPECT_TRUE(r.ended);
  ASSERT_EQ(r.batches.size(), 9u);
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(r.batches[i].first, static_cast<uint64_t>(10 + i));
    EXPECT_EQ(hex(r.batches[i].second), hex(batch_payload(c, 10 + i)));
  }
  // Past the end: just the end marker.
  const Replayed none = replay(dealer, 19, c.replay_layout, c.topic);
  EXPECT_TRUE(none.ended);
  EXPECT_TRUE(none.batches.empty());
}

TEST_P(SimKvPublisherTest, BufferLimit) {
  zmq::context_t ctx;
  Client cl(ctx);
  PublisherConfig c = tcp_config(GetParam(), /*buffer_steps=*/20);
  KvPublisher pub(c);
  ASSERT_EQ(pub.start(), "");
  for (int i = 0; i < 30; ++i) pub.publish(1000.0 + i, batch_events(i));
  ASSERT_TRUE(pub.flush());
  auto dealer = cl.dealer(pub.bound_replay_endpoint());
  const Replayed r = replay(dealer, 0, c.replay_layout, c.topic);
  EXPECT_TRUE(r.ended);
  ASSERT_EQ(r.batches.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(r.batches[i].first, static_cast<uint64_t>(10 + i));
}

TEST_P(SimKvPublisherTest, InvalidReplayRequestsIgnored) {
  zmq::context_t ctx;
  Client cl(ctx);
  PublisherConfig c = tcp_config(GetParam());
  KvPublisher pub(c);
  ASSERT_EQ(pub.start(), "");
  for (int i = 0; i < 3; ++i) pub.publish(1000.0 + i, batch_events(i));
  ASSERT_TRUE(pub.flush());
  auto dealer = cl.dealer(pub.bound_replay_endpoint());
  // No delimiter ([identity, start] at the ROUTER).
  dealer.send(zmq::buffer(be64(0)), zmq::send_flags::none);
  // Start not 8 bytes.
  dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(std::string("\x01\x02\x03\x04", 4)), zmq::send_flags::none);
  // Non-empty delimiter.
  dealer.send(zmq::buffer(std::string("x")), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(be64(0)), zmq::send_flags::none);
  // Too many frames.
  dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(be64(0)), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(std::string("extra")), zmq::send_flags::none);
  EXPECT_FALSE(readable(dealer, 300ms)) << "an invalid request got a reply";
  // A valid request afterwards is answered, and its reply is the first thing received.
  const Replayed r = replay(dealer, 1, c.replay_layout, c.topic);
  EXPECT_TRUE(r.ended);
  ASSERT_EQ(r.batches.size(), 2u);
  EXPECT_EQ(r.batches[0].first, 1u);
  EXPECT_EQ(r.batches[1].first, 2u);
}

TEST_P(SimKvPublisherTest, DropFaultLeavesAGapReplayFills) {
  zmq::context_t ctx;
  Client cl(ctx);
  PublisherConfig c = tcp_config(GetParam());
  KvPublisher pub(c);
  ASSERT_EQ(pub.start(), "");
  auto sub = cl.sub(local(pub.bound_endpoint()), c.topic);
  handshake(pub, sub);
  pub.publish(1000.0, batch_events(0));
  pub.fault_drop(2);
  for (int i = 1; i < 5; ++i) pub.publish(1000.0 + i, batch_events(i));
  ASSERT_TRUE(pub.flush());
  EXPECT_EQ(pub.next_sequence(), 5u);
  EXPECT_EQ(next_live(sub, c).seq, 0u);
  EXPECT_EQ(next_live(sub, c).seq, 3u);  // 1 and 2 were dropped
  EXPECT_EQ(next_live(sub, c).seq, 4u);
  auto dealer = cl.dealer(pub.bound_replay_endpoint());
  const Replayed r = replay(dealer, 1, c.replay_layout, c.topic);
  ASSERT_EQ(r.batches.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r.batches[i].first, static_cast<uint64_t>(1 + i));
    EXPECT_EQ(hex(r.batches[i].second), hex(batch_payload(c, 1 + i)));
  }
}

TEST_P(SimKvPublisherTest, SkipFaultIsAnUnrecoverableGap) {
  zmq::context_t ctx;
  Client cl(ctx);
  PublisherConfig c = tcp_config(GetParam());
  KvPublisher pub(c);
  ASSERT_EQ(pub.start(), "");
  auto sub = cl.sub(local(pub.bound_endpoint()), c.topic);
  handshake(pub, sub);
  pub.publish(1000.0, batch_events(0));
  pub.fault_skip(3);
  pub.publish(1001.0, batch_events(1));
  ASSERT_TRUE(pub.flush());
  EXPECT_EQ(pub.next_sequence(), 5u);
  EXPECT_EQ(next_live(sub, c).seq, 0u);
  EXPECT_EQ(next_live(sub, c).seq, 4u);
  auto dealer = cl.dealer(pub.bound_replay_endpoint());
  const Replayed r = replay(dealer, 0, c.replay_layout, c.topic);
  ASSERT_EQ(r.batches.size(), 2u);
  EXPECT_EQ(r.batches[0].first, 0u);
  EXPECT_EQ(r.batches[1].first, 4u);
}

TEST_P(SimKvPublisherTest, RestartFaultResetsSeqAndBuffer) {
  zmq::context_t ctx;
  Client cl(ctx);
  PublisherConfig c = tcp_config(GetParam());
  KvPublisher pub(c);
  ASSERT_EQ(pub.start(), "");
  auto sub = cl.sub(local(pub.bound_endpoint()), c.topic);
  handshake(pub, sub);
  for (int i = 0; i < 3; ++i) pub.publish(1000.0 + i, batch_events(i));
  pub.fault_restart();
  pub.publish(1007.0, batch_events(7));
  ASSERT_TRUE(pub.flush());
  EXPECT_EQ(pub.next_sequence(), 1u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(next_live(sub, c).seq, i);
  const Live after = next_live(sub, c);
  EXPECT_EQ(after.seq, 0u);  // seq went backwards: a new publisher instance
  EXPECT_EQ(hex(after.payload), hex(batch_payload(c, 7)));
  auto dealer = cl.dealer(pub.bound_replay_endpoint());
  const Replayed r = replay(dealer, 0, c.replay_layout, c.topic);
  ASSERT_EQ(r.batches.size(), 1u);
  EXPECT_EQ(r.batches[0].first, 0u);
  EXPECT_EQ(hex(r.batches[0].second), hex(batch_payload(c, 7)));
}

INSTANTIATE_TEST_SUITE_P(SimKvLayouts, SimKvPublisherTest,
                         ::testing::Values(ReplayLayout::kWithTopic, ReplayLayout::kLegacy),
                         [](const auto& info) {
                           return info.param == ReplayLayout::kWithTopic ? std::string("WithTopic")
                                                                         : std::string("Legacy");
                         });

TEST(SimKvPublisher, ConnectsWhenEndpointHasNoWildcard) {
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.set(zmq::sockopt::rcvtimeo, 5000);
  sub.set(zmq::sockopt::linger, 0);
  sub.bind("tcp://127.0.0.1:0");
  PublisherConfig c = tcp_config(ReplayLayout::kWithTopic);
  c.endpoint = sub.get(zmq::sockopt::last_endpoint);  // no '*': vLLM connects
  c.replay_endpoint.clear();
  c.topic.clear();
  KvPublisher pub(c);
  ASSERT_EQ(pub.start(), "");
  EXPECT_EQ(pub.bound_endpoint(), c.endpoint);
  EXPECT_EQ(pub.bound_replay_endpoint(), "");
  handshake(pub, sub);
  pub.publish(1003.0, batch_events(3));
  ASSERT_TRUE(pub.flush());
  const Live m = next_live(sub, c);
  EXPECT_EQ(m.seq, 0u);
  EXPECT_EQ(hex(m.payload), hex(batch_payload(c, 3)));
}

TEST(SimKvPublisher, DataParallelRankOffsetsInprocAndTagsBatches) {
  PublisherConfig c;
  c.enabled = true;
  c.endpoint = "inproc://sim-kv-test";
  c.replay_endpoint = "inproc://sim-kv-test-replay";
  c.data_parallel_rank = 2;
  c.topic = "kv";
  c.encoding.layout = cache::kv::Layout::kArray;
  c.encoding.int_block_hashes = false;
  KvPublisher pub(c);
  ASSERT_EQ(pub.start(), "");
  EXPECT_EQ(pub.bound_endpoint(), "inproc://sim-kv-test_dp2");
  EXPECT_EQ(pub.bound_replay_endpoint(), "inproc://sim-kv-test-replay_dp2");
  Client cl(kv_internal::zmq_context());  // inproc: same context as the publisher
  auto sub = cl.sub(pub.bound_endpoint(), c.topic);
  handshake(pub, sub);
  pub.publish(1001.0, batch_events(1));
  ASSERT_TRUE(pub.flush());
  const Live m = next_live(sub, c);
  EXPECT_EQ(m.seq, 0u);
  EXPECT_EQ(hex(m.payload), hex(batch_payload(c, 1)));
  ASSERT_FALSE(m.payload.empty());
  EXPECT_EQ(static_cast<uint8_t>(m.payload.back()), 0x02);  // data_parallel_rank
  pub.stop();
}

TEST(SimKvPublisher, BadEndpointsReportErrors) {
  PublisherConfig c = tcp_config(ReplayLayout::kWithTopic);
  c.endpoint = "ipc:///tmp/sim-kv-x";
  c.data_parallel_rank = 1;  // ipc cannot be offset
  KvPublisher a(c);
  EXPECT_NE(a.start(), "");
  PublisherConfig d = tcp_config(ReplayLayout::kWithTopic);
  d.endpoint = "bogus://x*";
  KvPublisher b(d);
  EXPECT_NE(b.start(), "");
  EXPECT_EQ(b.bound_endpoint(), "");
}

TEST(SimKvPublisher, NullAndDisabledAreNoOps) {
  PublisherConfig off = tcp_config(ReplayLayout::kWithTopic);
  off.enabled = false;
  PublisherConfig null = tcp_config(ReplayLayout::kWithTopic);
  null.publisher = "null";
  for (const auto& c : {off, null}) {
    KvPublisher pub(c);
    EXPECT_EQ(pub.start(), "");
    EXPECT_EQ(pub.bound_endpoint(), "");
    EXPECT_EQ(pub.bound_replay_endpoint(), "");
    pub.publish(1.0, batch_events(0));
    pub.fault_skip(5);
    EXPECT_FALSE(pub.flush(10));
    EXPECT_EQ(pub.next_sequence(), 0u);
    pub.stop();
  }
}

TEST(SimKvPublisher, SmallQueueNeverLosesSequenceNumbers) {
  PublisherConfig c = tcp_config(ReplayLayout::kWithTopic);
  c.max_queue_size = 1;
  KvPublisher pub(c);
  ASSERT_EQ(pub.start(), "");
  for (int i = 0; i < 300; ++i) pub.publish(1000.0 + i, batch_events(i));
  ASSERT_TRUE(pub.flush());
  EXPECT_EQ(pub.next_sequence() + pub.dropped_batches(), 300u);
  pub.stop();
}

TEST(SimKvPublisher, StopDrainsTheQueue) {
  PublisherConfig c = tcp_config(ReplayLayout::kWithTopic);
  KvPublisher pub(c);
  ASSERT_EQ(pub.start(), "");
  for (int i = 0; i < 50; ++i) pub.publish(1000.0 + i, batch_events(i));
  pub.stop();
  EXPECT_EQ(pub.next_sequence(), 50u);
}

}  // namespace
}  // namespace ramjet::sim
