#include "upstream/peer_load.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "upstream/engine_load.h"
#include "upstream/fleet.h"
#include "upstream/fleet_testing.h"

namespace ramjet::upstream {
namespace {

PeerSecret secret(uint8_t fill) {
  PeerSecret s;
  s.fill(fill);
  return s;
}

PeerMessage message(size_t n) {
  PeerMessage m{.sender = 0x1122334455667788, .seq = 7, .sent_unix_ms = 1'780'000'000'000, .entries = {}};
  for (size_t i = 0; i < n; ++i) m.entries.push_back(PeerEntry{0xabc0 + i, uint32_t(i), uint32_t(3 * i)});
  return m;
}

TEST(PeerCodec, RoundTripsAndChecksTheMac) {
  const auto bytes = encode_peer_message(message(5), secret(1));
  EXPECT_EQ(bytes.size(), kPeerHeaderBytes + 5 * kPeerEntryBytes + kPeerMacBytes);
  const PeerDecoded d = decode_peer_message(bytes, secret(1));
  ASSERT_EQ(d.outcome, PeerOutcome::kAccepted);
  EXPECT_EQ(d.message.sender, 0x1122334455667788u);
  EXPECT_EQ(d.message.seq, 7u);
  EXPECT_EQ(d.message.sent_unix_ms, 1'780'000'000'000u);
  EXPECT_EQ(d.message.entries, message(5).entries);
  EXPECT_EQ(decode_peer_message(bytes, secret(2)).outcome, PeerOutcome::kBadMac) << "another secret";
}

TEST(PeerCodec, EveryTruncationAndEveryFlippedBitIsRefused) {
  const auto bytes = encode_peer_message(message(3), secret(9));
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_NE(decode_peer_message(std::span(bytes).first(n), secret(9)).outcome, PeerOutcome::kAccepted) << n;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      auto b = bytes;
      b[i] ^= static_cast<uint8_t>(1 << bit);
      EXPECT_NE(decode_peer_message(b, secret(9)).outcome, PeerOutcome::kAccepted) << i << "/" << bit;
    }
  }
  auto longer = bytes;
  longer.push_back(0);
  EXPECT_EQ(decode_peer_message(longer, secret(9)).outcome, PeerOutcome::kMalformed) << "a trailing byte";
}

TEST(PeerCodec, ACountOverTheLimitIsMalformedBeforeAnyMac) {
  auto bytes = encode_peer_message(message(0), secret(1));
  bytes[32] = 0xff, bytes[33] = 0xff;  // n = 65535: over kMaxPeerEntries, and the size disagrees
  EXPECT_EQ(decode_peer_message(bytes, secret(1)).outcome, PeerOutcome::kMalformed);
  EXPECT_EQ(encode_peer_message(message(kMaxPeerEntries + 5), secret(1)).size(), kMaxDatagram) << "capped";
}

TEST(PeerCodec, EngineKeysAreStableAndKeyed) {
  config::UpstreamUrl a{"10.0.0.1", 8000, ""}, b{"10.0.0.1", 8001, ""};
  EXPECT_EQ(peer_engine_key(a, secret(1)), peer_engine_key(a, secret(1)));
  EXPECT_NE(peer_engine_key(a, secret(1)), peer_engine_key(b, secret(1)));
  EXPECT_NE(peer_engine_key(a, secret(1)), peer_engine_key(a, secret(2)));
  EXPECT_EQ(peer_engine_key(config::UpstreamUrl{"VLLM-0", 8000, ""}, secret(1)),
            peer_engine_key(config::UpstreamUrl{"vllm-0", 8000, ""}, secret(1))) << "host names ignore case";
}

TEST(PeerCodec, AZeroSenderIsMalformedEvenSigned) {
  PeerMessage m = message(1);
  m.sender = 0;
  EXPECT_EQ(decode_peer_message(encode_peer_message(m, secret(1)), secret(1)).outcome, PeerOutcome::kMalformed);
}

TEST(PeerLoadBoard, SumsFreshPeersAndForgetsStaleOnes) {
  ManualClock clock;
  clock.set_ms(1000);
  PeerLoadBoard board(3, 200, clock);
  EXPECT_EQ(board.apply(1, 1, std::vector<PeerEntry>{{0, 2, 5}, {0, 0, 0}, {0, 1, 1}}), PeerOutcome::kAccepted);
  EXPECT_EQ(board.apply(2, 1, std::vector<PeerEntry>{{0, 1, 4}}), PeerOutcome::kAccepted);
  EXPECT_EQ(board.units(0, clock.now_ms()), 9);
  EXPECT_EQ(board.inflight(0, clock.now_ms()), 3);
  EXPECT_EQ(board.units(2, clock.now_ms()), 1);
  EXPECT_EQ(board.units(1, clock.now_ms()), 0);
  EXPECT_EQ(board.units(7, clock.now_ms()), 0) << "an ordinal past the board";
  EXPECT_EQ(board.fresh_peers(clock.now_ms()), 2u);
  // Absolute values: the next message replaces the sender's state; an old one is refused.
  EXPECT_EQ(board.apply(1, 2, std::vector<PeerEntry>{{0, 0, 1}}), PeerOutcome::kAccepted);
  EXPECT_EQ(board.apply(1, 2, std::vector<PeerEntry>{{0, 9, 9}}), PeerOutcome::kReplayed);
  EXPECT_EQ(board.apply(1, 1, std::vector<PeerEntry>{{0, 9, 9}}), PeerOutcome::kReplayed);
  EXPECT_EQ(board.units(0, clock.now_ms()), 5);
  EXPECT_EQ(board.units(2, clock.now_ms()), 0);
  clock.advance_ms(150);
  EXPECT_EQ(board.apply(2, 2, std::vector<PeerEntry>{{0, 1, 4}}), PeerOutcome::kAccepted);
  clock.advance_ms(100);  // sender 1 is 250 ms old: stale; sender 2 is 100 ms old
  board.refresh(clock.now_ms());  // the writer's tick
  EXPECT_EQ(board.units(0, clock.now_ms()), 4);
  EXPECT_EQ(board.fresh_peers(clock.now_ms()), 1u);
  clock.advance_ms(201);  // no refresh for longer than the stale time: the writer stalled
  EXPECT_EQ(board.units(0, clock.now_ms()), 0);
  EXPECT_EQ(board.fresh_peers(clock.now_ms()), 0u);
}

TEST(PeerLoadBoard, AQuietSendersOldDatagramsStayRefusedWhileANewSenderArrives) {
  ManualClock clock;
  PeerLoadBoard board(1, 200, clock, 10'000);
  ASSERT_EQ(board.apply(7, 50, std::vector<PeerEntry>{{0, 1, 1}}), PeerOutcome::kAccepted);
  clock.advance_ms(1000);  // sender 7 went quiet (a restart: the new process is sender 8)
  ASSERT_EQ(board.apply(8, 1, std::vector<PeerEntry>{{0, 2, 2}}), PeerOutcome::kAccepted);
  EXPECT_EQ(board.apply(7, 49, std::vector<PeerEntry>{{0, 9, 9}}), PeerOutcome::kReplayed) << "a recorded datagram";
  EXPECT_EQ(board.units(0, clock.now_ms()), 2);
}

TEST(PeerLoadBoard, SixtyFourPeersLeaveNoRoomUntilOneIsRetired) {
  ManualClock clock;
  clock.set_ms(0);
  PeerLoadBoard board(1, 100, clock, 1000);
  for (uint64_t s = 1; s <= PeerLoadBoard::kMaxPeers; ++s) {
    ASSERT_EQ(board.apply(s, 1, std::vector<PeerEntry>{{0, 1, 1}}), PeerOutcome::kAccepted);
  }
  EXPECT_EQ(board.apply(999, 1, std::vector<PeerEntry>{{0, 1, 1}}), PeerOutcome::kNoRoom);
  EXPECT_EQ(board.units(0, 0), int64_t(PeerLoadBoard::kMaxPeers));
  clock.advance_ms(101);  // stale, but not retired: their sequences still guard their slots
  EXPECT_EQ(board.apply(999, 1, std::vector<PeerEntry>{{0, 1, 7}}), PeerOutcome::kNoRoom);
  clock.advance_ms(900);
  EXPECT_EQ(board.apply(999, 1, std::vector<PeerEntry>{{0, 1, 7}}), PeerOutcome::kAccepted);
  EXPECT_EQ(board.units(0, clock.now_ms()), 7);
}

TEST(EngineLoadBoardWithPeers, PeersCountLiveAndTheScrapeCountsOnlyTheRest) {
  ManualClock clock;
  clock.set_ms(0);
  PeerLoadBoard peers(2, 200, clock);
  EngineLoadBoard board(clock, EngineLoadConfig{.enabled = true, .stale_ms = 1500, .waiting_units = 2});
  board.set_peers(&peers);
  EXPECT_TRUE(board.enabled());
  ASSERT_EQ(peers.apply(5, 1, std::vector<PeerEntry>{{0, 3, 6}}), PeerOutcome::kAccepted);
  EXPECT_EQ(board.foreign_units(0), 6) << "the peers' units, before any scrape";
  // The engine runs 5: 1 of ours, 3 of the peer's, 1 from a client going around ramjet.
  board.record(0, 5, 0, 1);
  EXPECT_EQ(board.foreign_units(0), 6 + 1);
  // The peer's requests end: it says so at once; the scrape's share stays the one client.
  ASSERT_EQ(peers.apply(5, 2, std::vector<PeerEntry>{{0, 0, 0}}), PeerOutcome::kAccepted);
  EXPECT_EQ(board.foreign_units(0), 1);
  // Peers alone (the scrape off): the board still counts them.
  EngineLoadBoard only_peers(clock, EngineLoadConfig{.enabled = false});
  EXPECT_FALSE(only_peers.enabled());
  only_peers.set_peers(&peers);
  EXPECT_TRUE(only_peers.enabled());
  ASSERT_EQ(peers.apply(5, 3, std::vector<PeerEntry>{{0, 2, 4}}), PeerOutcome::kAccepted);
  EXPECT_EQ(only_peers.foreign_units(0), 4);
}

// Several routers' places in a burst (EngineLoadBoard::spread): replica k of R (its lane: fresh
// peers with a smaller sender id) with j requests in flight its peers have not heard of takes
// place k + j·(R − 1); one replica alone has no place to take.
TEST(EngineLoadBoardWithPeers, EachReplicaTakesItsOwnPlaceInABurst) {
  ManualClock clock;
  clock.set_ms(0);
  PeerLoadBoard peers(2, 200, clock);
  peers.set_self(50);
  EngineLoadBoard board(clock, EngineLoadConfig{.enabled = false});
  board.set_peers(&peers);
  EXPECT_EQ(board.spread(clock.now_ms(), 0).routers, 1u) << "no peer heard from yet";
  EXPECT_EQ(board.spread(clock.now_ms(), 5).place, 0u);
  peers.load_sent(4);  // 4 requests in flight went out to the peers
  ASSERT_EQ(peers.apply(10, 1, std::vector<PeerEntry>{}), PeerOutcome::kAccepted);  // below 50
  ASSERT_EQ(peers.apply(90, 1, std::vector<PeerEntry>{}), PeerOutcome::kAccepted);  // above
  EXPECT_EQ(peers.lane(clock.now_ms()), 1u);
  for (int64_t j = 0; j < 3; ++j) {  // a burst: this replica's own requests pile up
    const SpreadPlace p = board.spread(clock.now_ms(), 4 + j);
    EXPECT_EQ(p.routers, 3u);
    EXPECT_EQ(p.place, 1 + j * 2) << j;
  }
  EXPECT_EQ(board.spread(clock.now_ms(), 2).place, 1u) << "fewer in flight than the peers know of";
  peers.load_sent(7);
  EXPECT_EQ(board.spread(clock.now_ms(), 7).place, 1u) << "the peers have heard of them all";
  // The peer below goes stale: this replica is lane 0 of 2.
  clock.advance_ms(150);
  ASSERT_EQ(peers.apply(90, 2, std::vector<PeerEntry>{}), PeerOutcome::kAccepted);
  clock.advance_ms(100);
  peers.refresh(clock.now_ms());
  const SpreadPlace p = board.spread(clock.now_ms(), 8);
  EXPECT_EQ(p.routers, 2u);
  EXPECT_EQ(p.place, 1u);  // lane 0, one request the peer has not heard of: 0 + 1 x 1
  // The order of equal engines turns with the wall clock's second, the same in every replica.
  EXPECT_GT(p.tie, 1'700'000'000u);
  // No peers configured: one router.
  EngineLoadBoard alone(clock, EngineLoadConfig{.enabled = true});
  EXPECT_EQ(alone.spread(clock.now_ms(), 3).routers, 1u);
}

// Two replicas on loopback, the same engines listed in another order: each sees the other's load
// on the right engine within a few intervals; a third with another secret is refused.
TEST(PeerSync, TwoReplicasSeeEachOthersLoadByEngineNotOrdinal) {
  const auto urls = test_support::urls(3);
  const std::vector<config::UpstreamUrl> reversed(urls.rbegin(), urls.rend());
  const Clock& clock = SteadyClock::instance();
  Fleet fa(urls, clock, 30000), fb(reversed, clock, 30000);
  PeerLoadBoard ba(3, 500, clock), bb(3, 500, clock);
  PeerSyncConfig ca{.listen = "127.0.0.1:0", .peers = {}, .secret = secret(4), .interval_ms = 10};
  PeerSyncConfig cb = ca;
  PeerSync a(ca, fa, ba);
  PeerSync b(cb, fb, bb);
  ASSERT_FALSE(a.start());
  ASSERT_FALSE(b.start());
  a.stop(), b.stop();  // started to learn the ports; now with each other as peers
  PeerSyncConfig ca2 = ca, cb2 = cb;
  ca2.listen = "127.0.0.1:" + std::to_string(a.port());
  cb2.listen = "127.0.0.1:" + std::to_string(b.port());
  ca2.peers = {cb2.listen};
  cb2.peers = {ca2.listen};
  PeerSync a2(ca2, fa, ba), b2(cb2, fb, bb);
  ASSERT_FALSE(a2.start());
  ASSERT_FALSE(b2.start());
  fa.at(0).add_load(2, 7);  // replica A: 2 requests, 7 units on engine-host-0 (B's ordinal 2)
  bool seen = false;
  for (int i = 0; i < 300 && !seen; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    seen = bb.units(2, clock.now_ms()) == 7 && bb.inflight(2, clock.now_ms()) == 2;
  }
  EXPECT_TRUE(seen);
  EXPECT_EQ(bb.units(0, clock.now_ms()), 0);
  EXPECT_EQ(ba.units(0, clock.now_ms()), 0) << "B has no load";
  fa.at(0).add_load(-2, -7);
  seen = false;
  for (int i = 0; i < 300 && !seen; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    seen = bb.units(2, clock.now_ms()) == 0;
  }
  EXPECT_TRUE(seen) << "the release arrives as the next absolute value";
  // A replica with another secret: its datagrams are counted bad_mac and change nothing.
  PeerLoadBoard bc(3, 500, clock);
  PeerSyncConfig cc{.listen = "127.0.0.1:0", .peers = {cb2.listen}, .secret = secret(5), .interval_ms = 10};
  Fleet fc(urls, clock, 30000);
  fc.at(1).add_load(5, 50);
  PeerSync c(cc, fc, bc);
  ASSERT_FALSE(c.start());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  c.stop();
  metrics::Exposition x;
  b2.write_metrics(x);
  const std::string text = x.take();
  EXPECT_NE(text.find("ramjet_peer_datagrams_total{outcome=\"bad_mac\"} "), std::string::npos);
  EXPECT_EQ(text.find("ramjet_peer_datagrams_total{outcome=\"bad_mac\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ramjet_peers_fresh 1\n"), std::string::npos) << text;
  EXPECT_EQ(bb.units(1, clock.now_ms()), 0);
}

}  // namespace
}  // namespace ramjet::upstream
