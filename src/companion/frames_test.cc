#include "companion/frames.h"

#include <gtest/gtest.h>

#include <numeric>

namespace ramjet::companion {
namespace {

SessionSecret secret(uint8_t start = 1) {
  SessionSecret s{};
  std::iota(s.begin(), s.end(), start);
  return s;
}

Challenge challenge(uint8_t fill = 0xab) {
  Challenge c{};
  c.fill(fill);
  return c;
}

std::span<const uint8_t> bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

TEST(Hello, OpensWithTheSessionSecretOnly) {
  const auto hello = seal_hello(secret(), challenge());
  auto c = open_hello(hello, secret());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, challenge());
  EXPECT_EQ(open_hello(hello, secret(2)).error().code, FrameErrc::kBadMac);
  auto bad = hello;
  bad[20] ^= 1;  // the challenge
  EXPECT_EQ(open_hello(bad, secret()).error().code, FrameErrc::kBadMac);
  bad = hello;
  bad[0] = 'x';
  EXPECT_EQ(open_hello(bad, secret()).error().code, FrameErrc::kBadMagic);
  EXPECT_EQ(open_hello(std::span(hello).first(40), secret()).error().code, FrameErrc::kTruncated);
}

TEST(Frames, ATailOpensInOrderWithEveryType) {
  FrameSealer out(secret(), challenge(), 7, Direction::kToRamjet);
  FrameOpener in(secret(), challenge(), Direction::kToRamjet);
  const std::string batch = "\x93\xcb\x41\xd9\x00\x00\x00\x00\x00\x00\x90\x00";
  const std::vector<std::string> frames = {out.snapshot("snapshot-bytes"),
                                           out.event(41, bytes(batch)),
                                           out.caught_up(41),
                                           out.caught_up(std::nullopt),
                                           out.identity("engine-0/rev-b"),
                                           out.disconnect(DisconnectReason::kReset)};
  for (size_t i = 0; i < frames.size(); ++i) {
    auto size = in.frame_size(bytes(frames[i]).first(kFrameHeaderBytes));
    ASSERT_TRUE(size.ok());
    EXPECT_EQ(*size, frames[i].size());
    auto f = in.open(bytes(frames[i]));
    ASSERT_TRUE(f.ok()) << i << " " << f.error().reason();
    EXPECT_EQ(f->delivery_sequence, i);
    EXPECT_EQ(f->generation, 7u);
  }
  FrameOpener again(secret(), challenge(), Direction::kToRamjet);
  auto f = again.open(bytes(frames[0]));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->type, FrameType::kSnapshot);
  EXPECT_EQ(std::string(f->payload.begin(), f->payload.end()), "snapshot-bytes");
  f = again.open(bytes(frames[1]));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->type, FrameType::kEvent);
  EXPECT_EQ(f->event_sequence, 41u);
  EXPECT_EQ(std::string(f->batch.begin(), f->batch.end()), batch);
  f = again.open(bytes(frames[2]));
  EXPECT_TRUE(f->has_event_sequence);
  EXPECT_EQ(f->event_sequence, 41u);
  f = again.open(bytes(frames[3]));
  EXPECT_FALSE(f->has_event_sequence);
  f = again.open(bytes(frames[4]));
  EXPECT_EQ(f->identity, "engine-0/rev-b");
  f = again.open(bytes(frames[5]));
  EXPECT_EQ(f->reason, DisconnectReason::kReset);
}

TEST(Frames, AGapAReplayAndAnotherGenerationAreErrors) {
  FrameSealer out(secret(), challenge(), 7, Direction::kToRamjet);
  const auto f0 = out.caught_up(1), f1 = out.caught_up(2), f2 = out.caught_up(3);
  FrameOpener in(secret(), challenge(), Direction::kToRamjet);
  ASSERT_TRUE(in.open(bytes(f0)).ok());
  EXPECT_EQ(in.open(bytes(f0)).error().code, FrameErrc::kGap) << "a replayed frame";
  EXPECT_EQ(in.open(bytes(f2)).error().code, FrameErrc::kGap) << "a skipped frame";
  ASSERT_TRUE(in.open(bytes(f1)).ok());
  FrameSealer next_gen(secret(), challenge(), 8, Direction::kToRamjet);
  next_gen.caught_up(0);
  next_gen.caught_up(0);
  EXPECT_EQ(in.open(bytes(next_gen.caught_up(0))).error().code, FrameErrc::kGenerationChanged);
  // A frame whose generation field was rewritten does not authenticate under either key.
  std::string forged = out.caught_up(4);
  forged[16] = static_cast<char>(9);  // the generation's low byte (after magic, type, dir, u16, u32)
  EXPECT_EQ(in.open(bytes(forged)).error().code, FrameErrc::kBadMac);
}

TEST(Frames, FramesOfAnotherConnectionSecretOrDirectionDoNotOpen) {
  const auto frame = FrameSealer(secret(), challenge(), 1, Direction::kToRamjet).caught_up(5);
  EXPECT_EQ(FrameOpener(secret(), challenge(0xcd), Direction::kToRamjet).open(bytes(frame)).error().code,
            FrameErrc::kBadMac);
  EXPECT_EQ(FrameOpener(secret(9), challenge(), Direction::kToRamjet).open(bytes(frame)).error().code,
            FrameErrc::kBadMac);
  EXPECT_EQ(FrameOpener(secret(), challenge(), Direction::kToCompanion).open(bytes(frame)).error().code,
            FrameErrc::kWrongDirection);
  std::string reflected = frame;
  reflected[9] = static_cast<char>(Direction::kToCompanion);  // relabelled: the MAC no longer fits
  EXPECT_EQ(FrameOpener(secret(), challenge(), Direction::kToCompanion).open(bytes(reflected)).error().code,
            FrameErrc::kBadMac);
  for (size_t i = 0; i < frame.size(); ++i) {  // every flipped bit is caught
    std::string bad = frame;
    bad[i] ^= 0x10;
    EXPECT_FALSE(FrameOpener(secret(), challenge(), Direction::kToRamjet).open(bytes(bad)).ok()) << i;
  }
}

TEST(Frames, LimitsAndShapesAreChecked) {
  FrameSealer out(secret(), challenge(), 1, Direction::kToRamjet);
  const auto code = [](const std::string& f, FrameLimits l = {}) {
    auto r = FrameOpener(secret(), challenge(), Direction::kToRamjet, l).open(bytes(f));
    return r.ok() ? std::optional<FrameErrc>() : r.error().code;
  };
  const auto frame = out.identity("x");  // sequence 0
  EXPECT_EQ(code(frame.substr(0, 10)), FrameErrc::kTruncated);
  EXPECT_EQ(code(frame.substr(0, frame.size() - 1)), FrameErrc::kTruncated);
  EXPECT_EQ(code(frame + "y"), FrameErrc::kMalformed);
  std::string bad = frame;
  bad[8] = 9;
  EXPECT_EQ(code(bad), FrameErrc::kUnknownType);
  bad = frame;
  bad[10] = 1;
  EXPECT_EQ(code(bad), FrameErrc::kBadVersion);
  EXPECT_EQ(code(frame, {.max_identity_bytes = 0}), FrameErrc::kOversized);
  FrameSealer s2(secret(), challenge(), 1, Direction::kToRamjet);
  const std::string big(100, 'b');
  EXPECT_EQ(code(s2.event(1, bytes(big)), {.max_tail_frame = 120}), FrameErrc::kOversized);
  FrameSealer s3(secret(), challenge(), 1, Direction::kToRamjet);
  EXPECT_EQ(code(s3.event(1, bytes(big)), {.max_batch_payload = 99}), FrameErrc::kOversized);
  FrameSealer s4(secret(), challenge(), 1, Direction::kToRamjet);
  EXPECT_EQ(code(s4.seal(FrameType::kEvent, bytes(std::string(8, '\0')))), FrameErrc::kMalformed) << "no batch";
  FrameSealer s5(secret(), challenge(), 1, Direction::kToRamjet);
  EXPECT_EQ(code(s5.seal(FrameType::kDisconnect, bytes(std::string(1, '\x09')))), FrameErrc::kMalformed);
  // The tail limit is the issue's: an 8 MiB batch plus its sequence fits, with room for the header.
  EXPECT_GE(FrameLimits{}.max_tail_frame, kFrameHeaderBytes + 8 + FrameLimits{}.max_batch_payload + kMacBytes);
}

TEST(Frames, ASnapshotFrameCarriesADecodableSnapshot) {
  Snapshot s;
  s.header.challenge = challenge();
  s.header.incarnation = "e";
  const std::string env = encode_snapshot(s);
  FrameSealer out(secret(), challenge(), 1, Direction::kToRamjet);
  FrameOpener in(secret(), challenge(), Direction::kToRamjet);
  const std::string frame = out.snapshot(env);
  auto f = in.open(bytes(frame));
  ASSERT_TRUE(f.ok());
  auto d = decode_snapshot(f->payload);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->header.incarnation, "e");
}

}  // namespace
}  // namespace ramjet::companion
