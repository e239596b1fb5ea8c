// sim/kv tests: msgspec-exact encoding (vllm-contracts.md §1.2 examples), seq framing, replay
// over real tcp loopback sockets in both reply layouts, faults, DP offsets, config parsing.
#include <gtest/gtest.h>

#include <zmq_addon.hpp>

#include <chrono>
#include <cstring>
#include <thread>

#include "sim/kv/kv_internal.h"
#include "sim/kv/publisher.h"

namespace ramjet::sim {
namespace {

using namespace std::chrono_literals;

// A digest whose last 8 bytes (big-endian) are `low`; the first 24 bytes are filler so a wrong
// byte order or offset shows up.
Digest digest(uint64_t low) {
  Digest d;
  for (size_t i = 0; i < 24; ++i) d[i] = static_cast<uint8_t>(0xa0 + i);
  for (int i = 0; i < 8; ++i) d[31 - i] = static_cast<uint8_t>(low >> (8 * i));
  return d;
}

// Parses the notation of vllm-contracts.md: hex byte pairs and "quoted" strings (raw bytes).
std::string spec_bytes(std::string_view text) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ') {
      ++i;
    } else if (c == '"') {
      const size_t end = text.find('"', i + 1);
      out.append(text.substr(i + 1, end - i - 1));
      i = end + 1;
    } else {
      out.push_back(static_cast<char>(std::stoi(std::string(text.substr(i, 2)), nullptr, 16)));
      i += 2;
    }
  }
  return out;
}

std::string hex(std::string_view s) {
  static const char* k = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (!out.empty()) out.push_back(' ');
    out.push_back(k[c >> 4]);
    out.push_back(k[c & 15]);
  }
  return out;
}

std::string be64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
  return s;
}

uint64_t from_be64(const zmq::message_t& m) {
  EXPECT_EQ(m.size(), 8u);
  uint64_t v = 0;
  for (size_t i = 0; i < m.size(); ++i) v = (v << 8) | static_cast<const uint8_t*>(m.data())[i];
  return v;
}

BlockStored stored(std::vector<uint64_t> hashes, std::optional<uint64_t> parent,
                   std::vector<uint32_t> tokens, uint32_t block_size) {
  BlockStored s;
  for (uint64_t h : hashes) s.block_hashes.push_back(digest(h));
  if (parent) s.parent_block_hash = digest(*parent);
  s.token_ids = std::move(tokens);
  s.block_size = block_size;
  return s;
}

BlockRemoved removed(std::vector<uint64_t> hashes) {
  BlockRemoved r;
  for (uint64_t h : hashes) r.block_hashes.push_back(digest(h));
  return r;
}

constexpr uint64_t kKthenaHash = 15760518052499183552ull;  // 0xdab89baa7b5857c0

// ---------------------------------------------------------------------------------- encoding

TEST(SimKvEncode, Low64IsLastEightBytesBigEndian) {
  EXPECT_EQ(kv_internal::low64(digest(kKthenaHash)), kKthenaHash);
  EXPECT_EQ(kv_internal::low64(digest(7)), 7u);
}

// vllm-contracts.md §1.2 "Example bytes (encoded with msgpack) for a 1-block store, a remove and
// a clear": the 8-field BlockStored / 3-field BlockRemoved array layout (≈v0.10).
TEST(SimKvEncode, LegacyArrayExampleFromSpec) {
  const std::string expected = spec_bytes(
      "93 cb 41 d9 54 fc 40 20 00 00 93 98 ab \"BlockStored\" 91 cf da b8 9b aa 7b 58 57 c0 c0 94 "
      "01 02 03 04 04 c0 a3 \"GPU\" c0 93 ac \"BlockRemoved\" 91 07 a3 \"GPU\" 91 b0 "
      "\"AllBlocksCleared\" 00");
  const std::vector<KvEvent> events{stored({kKthenaHash}, std::nullopt, {1, 2, 3, 4}, 4),
                                    removed({7}), AllBlocksCleared{}};
  const std::string got = kv_internal::encode_batch_ex(
      1700000000.5, events, 0, KvEventsFormat::kArray, BlockHashType::kU64,
      kv_internal::ArrayLayout{8, 3, true});
  EXPECT_EQ(hex(got), hex(expected));
}

// The public array format is the last array_like one: BlockStored 12 fields, BlockRemoved 4.
TEST(SimKvEncode, ArrayFormatLatestLayout) {
  const std::string expected = spec_bytes(
      "93 cb 41 d9 54 fc 40 20 00 00 93 9c ab \"BlockStored\" 91 cf da b8 9b aa 7b 58 57 c0 c0 94 "
      "01 02 03 04 04 c0 a3 \"GPU\" c0 91 c0 00 ae \"full_attention\" c0 "
      "94 ac \"BlockRemoved\" 91 07 a3 \"GPU\" 00 91 b0 \"AllBlocksCleared\" 00");
  const std::vector<KvEvent> events{stored({kKthenaHash}, std::nullopt, {1, 2, 3, 4}, 4),
                                    removed({7}), AllBlocksCleared{}};
  EXPECT_EQ(hex(encode_batch(1700000000.5, events, 0, KvEventsFormat::kArray, BlockHashType::kU64)),
            hex(expected));
}

// §1.2 map example (vLLM 0.26 capture): "93 cb <ts> 93 8b a4 "type" ab "BlockStored" ac
// "block_hashes" 91 cf <8 bytes> …" — with three events (the hex start's events array is 0x93).
TEST(SimKvEncode, MapFormatExampleFromSpec) {
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 16; ++i) tokens.push_back(1000 + i * 17);
  const std::vector<KvEvent> events{stored({kKthenaHash}, std::nullopt, tokens, 16), removed({7}),
                                    AllBlocksCleared{}};
  const double ts = 1789095808.83;
  const std::string got = encode_batch(ts, events, 0, KvEventsFormat::kMap, BlockHashType::kU64);
  uint64_t bits;
  std::memcpy(&bits, &ts, 8);
  const std::string prefix = spec_bytes("93 cb") + be64(bits) +
                             spec_bytes("93 8b a4 \"type\" ab \"BlockStored\" ac \"block_hashes\" "
                                        "91 cf da b8 9b aa 7b 58 57 c0");
  ASSERT_GE(got.size(), prefix.size());
  EXPECT_EQ(hex(got.substr(0, prefix.size())), hex(prefix));

  std::string tok = spec_bytes("dc 00 10");
  for (uint32_t t : tokens) tok += spec_bytes("cd") + be64(t).substr(6);
  const std::string rest =
      spec_bytes("b1 \"parent_block_hash\" c0 a9 \"token_ids\"") + tok +
      spec_bytes("aa \"block_size\" 10 a7 \"lora_id\" c0 a6 \"medium\" a3 \"GPU\" a9 \"lora_name\" c0 "
                 "aa \"extra_keys\" 91 c0 a9 \"group_idx\" 00 b2 \"kv_cache_spec_kind\" "
                 "ae \"full_attention\" "
                 "84 a4 \"type\" ac \"BlockRemoved\" ac \"block_hashes\" 91 07 a6 \"medium\" "
                 "a3 \"GPU\" a9 \"group_idx\" 00 "
                 "81 a4 \"type\" b0 \"AllBlocksCleared\" 00");
  EXPECT_EQ(hex(got), hex(prefix + rest));
}

TEST(SimKvEncode, MapOmitsNoneSpecKindAndKeepsExtraKeysPerBlock) {
  BlockStored s = stored({1, 2}, 9, {1, 2, 3, 4}, 2);
  s.kv_cache_spec_kind.clear();  // None == default -> omitted
  s.group_idx = 3;
  const std::string got =
      encode_batch(1.0, {s}, 5, KvEventsFormat::kMap, BlockHashType::kU64);
  const std::string expected =
      spec_bytes("93 cb 3f f0 00 00 00 00 00 00 91 8a a4 \"type\" ab \"BlockStored\" "
                 "ac \"block_hashes\" 92 01 02 b1 \"parent_block_hash\" 09 a9 \"token_ids\" "
                 "94 01 02 03 04 aa \"block_size\" 02 a7 \"lora_id\" c0 a6 \"medium\" a3 \"GPU\" "
                 "a9 \"lora_name\" c0 aa \"extra_keys\" 92 c0 c0 a9 \"group_idx\" 03 05");
  EXPECT_EQ(hex(got), hex(expected));
  // Array format: every field, None as nil.
  const std::string arr = encode_batch(1.0, {s}, 5, KvEventsFormat::kArray, BlockHashType::kU64);
  EXPECT_EQ(hex(arr), hex(spec_bytes("93 cb 3f f0 00 00 00 00 00 00 91 9c ab \"BlockStored\" "
                                     "92 01 02 09 94 01 02 03 04 02 c0 a3 \"GPU\" c0 92 c0 c0 03 "
                                     "c0 c0 05")));
}

TEST(SimKvEncode, BytesHashesAreBin32) {
  const Digest d = digest(kKthenaHash);
  const std::string got = encode_batch(0.5, {removed({kKthenaHash})}, 0, KvEventsFormat::kArray,
                                       BlockHashType::kBytes);
  const std::string expected =
      spec_bytes("93 cb 3f e0 00 00 00 00 00 00 91 94 ac \"BlockRemoved\" 91 c4 20") +
      std::string(reinterpret_cast<const char*>(d.data()), 32) + spec_bytes("a3 \"GPU\" 00 00");
  EXPECT_EQ(hex(got), hex(expected));
}

TEST(SimKvEncode, ShortestIntForms) {
  struct Case {
    uint64_t v;
    const char* bytes;
  } cases[] = {{0, "00"},
               {0x7f, "7f"},
               {0x80, "cc 80"},
               {0xff, "cc ff"},
               {0x100, "cd 01 00"},
               {0xffff, "cd ff ff"},
               {0x10000, "ce 00 01 00 00"},
               {0xffffffff, "ce ff ff ff ff"},
               {0x100000000, "cf 00 00 00 01 00 00 00 00"},
               {0x7fffffffffffffff, "cf 7f ff ff ff ff ff ff ff"},
               {0x8000000000000000, "cf 80 00 00 00 00 00 00 00"}};
  for (const auto& c : cases) {
    const std::string got =
        encode_batch(0.0, {removed({c.v})}, 0, KvEventsFormat::kArray, BlockHashType::kU64);
    const std::string expected = spec_bytes("93 cb 00 00 00 00 00 00 00 00 91 94 ac \"BlockRemoved\" 91 ") +
                                 spec_bytes(c.bytes) + spec_bytes("a3 \"GPU\" 00 00");
    EXPECT_EQ(hex(got), hex(expected)) << c.v;
  }
}

TEST(SimKvEncode, LongStringsUseStr8AndManyEventsArray16) {
  BlockRemoved r = removed({1});
  r.medium = std::string(40, 'M');
  std::vector<KvEvent> events(16, KvEvent{AllBlocksCleared{}});
  events[0] = r;
  const std::string got = encode_batch(0.0, events, 0, KvEventsFormat::kMap, BlockHashType::kU64);
  std::string expected = spec_bytes("93 cb 00 00 00 00 00 00 00 00 dc 00 10 84 a4 \"type\" "
                                    "ac \"BlockRemoved\" ac \"block_hashes\" 91 01 a6 \"medium\" d9 28") +
                         std::string(40, 'M') + spec_bytes("a9 \"group_idx\" 00");
  for (int i = 1; i < 16; ++i) expected += spec_bytes("81 a4 \"type\" b0 \"AllBlocksCleared\"");
  expected += spec_bytes("00");
  EXPECT_EQ(hex(got), hex(expected));
}

TEST(SimKvEncode, OldestArrayLayoutHasNoRankAndSixFields) {
  const std::string got = kv_internal::encode_batch_ex(
      0.0, {stored({1}, std::nullopt, {5}, 1), removed({2})}, 0, KvEventsFormat::kArray,
      BlockHashType::kU64, kv_internal::ArrayLayout{6, 2, false});
  EXPECT_EQ(hex(got), hex(spec_bytes("92 cb 00 00 00 00 00 00 00 00 92 96 ab \"BlockStored\" 91 01 "
                                     "c0 91 05 01 c0 92 ac \"BlockRemoved\" 91 02")));
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
  return encode_batch(1000.0 + i, batch_events(i), c.data_parallel_rank, c.format, c.hash_type);
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
  const std::string probe = encode_batch(0.0, kProbe, c.data_parallel_rank, c.format, c.hash_type);
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
  c.format = KvEventsFormat::kArray;
  c.hash_type = BlockHashType::kBytes;
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
