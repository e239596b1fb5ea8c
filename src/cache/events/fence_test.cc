#include "cache/events/fence.h"

#include <gtest/gtest.h>

namespace ramjet::cache::events {
namespace {

constexpr FenceLimits kLimits{.replay_limit = 100, .tail_limit = 3};

TEST(SequenceFence, StartsFencedAndTrustsAPublisherSeenFromItsFirstBatch) {
  SequenceFence f(kLimits);
  EXPECT_EQ(f.mode(), FenceMode::kFenced);
  const Step s = f.on_live(0, false);
  EXPECT_EQ(s.verdict, Verdict::kApply);
  EXPECT_TRUE(s.has(FenceEvent::kFirstBatchTrusted));
  EXPECT_TRUE(f.trusted());
  EXPECT_EQ(f.on_live(1, false).verdict, Verdict::kApply);
  EXPECT_EQ(f.expected(), 2u);
}

TEST(SequenceFence, AFirstBatchWithinTheReplayLimitAsksForEverythingFromZero) {
  SequenceFence f(kLimits);
  const auto gen = f.generation();
  const Step s = f.on_live(40, false);
  EXPECT_EQ(s.verdict, Verdict::kHold);
  EXPECT_TRUE(s.clear_index);
  ASSERT_TRUE(s.replay);
  EXPECT_EQ(s.replay->from, 0u);
  EXPECT_EQ(s.replay->through, 40u);
  EXPECT_TRUE(s.has(FenceEvent::kFullReplay));
  EXPECT_GT(f.generation(), gen);
  EXPECT_EQ(f.mode(), FenceMode::kReplaying);
  EXPECT_EQ(f.on_live(41, false).verdict, Verdict::kHold);
  for (uint64_t q = 0; q <= 41; ++q) EXPECT_EQ(f.on_replay_batch(s.replay->ticket, q, false).verdict, Verdict::kApply);
  const Step end = f.on_replay_end(s.replay->ticket, true);
  EXPECT_TRUE(end.has(FenceEvent::kReplayDone));
  EXPECT_TRUE(f.trusted());
  // The held batches were in the replay too.
  EXPECT_EQ(f.on_held(40, false).verdict, Verdict::kDuplicate);
  EXPECT_EQ(f.on_held(41, false).verdict, Verdict::kDuplicate);
  EXPECT_EQ(f.on_live(42, false).verdict, Verdict::kApply);
}

TEST(SequenceFence, AFirstBatchBeyondTheReplayLimitOnlyObservesUntilAClear) {
  SequenceFence f(kLimits);
  EXPECT_EQ(f.on_live(500, false).verdict, Verdict::kObserve);
  EXPECT_EQ(f.on_live(501, false).verdict, Verdict::kObserve);
  EXPECT_FALSE(f.trusted());
  const Step s = f.on_live(502, true);
  EXPECT_EQ(s.verdict, Verdict::kApply);
  EXPECT_TRUE(s.clear_index);
  EXPECT_TRUE(s.has(FenceEvent::kCleared));
  EXPECT_TRUE(f.trusted());
  EXPECT_EQ(f.on_live(503, false).verdict, Verdict::kApply);
}

TEST(SequenceFence, AGapIsReplayedAndLiveBatchesWaitForIt) {
  SequenceFence f(kLimits);
  f.on_live(0, false);
  f.on_live(1, false);
  const Step gap = f.on_live(5, false);  // 2, 3, 4 missed
  EXPECT_EQ(gap.verdict, Verdict::kHold);
  ASSERT_TRUE(gap.replay);
  EXPECT_FALSE(gap.clear_index) << "a gap replay keeps what the index has";
  EXPECT_EQ(gap.replay->from, 2u);
  EXPECT_EQ(gap.replay->through, 5u);
  EXPECT_FALSE(f.trusted()) << "trust is suspended while the replay runs";
  EXPECT_EQ(f.on_live(6, false).verdict, Verdict::kHold);
  // vLLM replays everything it has from `from` on: 2..5 here (6 came after the replay was served).
  for (uint64_t q = 2; q <= 5; ++q) EXPECT_EQ(f.on_replay_batch(gap.replay->ticket, q, false).verdict, Verdict::kApply);
  EXPECT_TRUE(f.on_replay_end(gap.replay->ticket, true).has(FenceEvent::kReplayDone));
  EXPECT_EQ(f.on_held(5, false).verdict, Verdict::kDuplicate);
  EXPECT_EQ(f.on_held(6, false).verdict, Verdict::kApply);
  EXPECT_EQ(f.on_live(7, false).verdict, Verdict::kApply);
}

TEST(SequenceFence, AGapBeyondTheReplayLimitFencesAndClears) {
  SequenceFence f(kLimits);
  f.on_live(0, false);
  const auto gen = f.generation();
  const Step s = f.on_live(1 + kLimits.replay_limit, false);
  EXPECT_EQ(s.verdict, Verdict::kObserve);
  EXPECT_TRUE(s.clear_index);
  EXPECT_TRUE(s.has(FenceEvent::kGapTooLarge));
  EXPECT_GT(f.generation(), gen);
  EXPECT_FALSE(f.trusted());
}

TEST(SequenceFence, AReplayThatStartsLateHasAHoleOrEndsShortFences) {
  for (int kind = 0; kind < 4; ++kind) {
    SequenceFence f(kLimits);
    f.on_live(0, false);
    const Step gap = f.on_live(4, false);
    const uint64_t t = gap.replay->ticket;
    if (kind == 0) {  // the engine no longer had 1: starts at 2
      f.on_replay_batch(t, 2, false);
    } else if (kind == 1) {  // a hole
      f.on_replay_batch(t, 1, false);
      EXPECT_EQ(f.on_replay_batch(t, 3, false).verdict, Verdict::kObserve);
    } else if (kind == 2) {  // ends before the batch that revealed the gap
      f.on_replay_batch(t, 1, false);
      f.on_replay_batch(t, 2, false);
    } else {  // deadline passed
      for (uint64_t q = 1; q <= 4; ++q) f.on_replay_batch(t, q, false);
    }
    const Step end = f.on_replay_end(t, /*complete=*/kind != 3);
    EXPECT_TRUE(end.has(FenceEvent::kReplayFailed)) << kind;
    EXPECT_TRUE(end.clear_index);
    EXPECT_TRUE(end.drop_held);
    EXPECT_EQ(f.mode(), FenceMode::kFenced);
    // One full replay is tried at the next live batch (the engine is young enough).
    const Step next = f.on_live(5, false);
    ASSERT_TRUE(next.replay) << kind;
    EXPECT_EQ(next.replay->from, 0u);
  }
}

TEST(SequenceFence, AFailedFullReplayIsNotRetriedUntilSomethingChanges) {
  SequenceFence f(kLimits);
  const Step s = f.on_live(10, false);
  f.on_replay_batch(s.replay->ticket, 3, false);  // buffer no longer reaches 0
  f.on_replay_end(s.replay->ticket, true);
  EXPECT_EQ(f.on_live(11, false).verdict, Verdict::kObserve);
  EXPECT_FALSE(f.on_live(12, false).replay);
  EXPECT_TRUE(f.on_live(13, true).has(FenceEvent::kCleared));
  EXPECT_TRUE(f.trusted());
}

// The subscriber's backoff (1 s, doubling): a fenced engine whose replay failed tries again,
// whatever the engine holds from 0, and is trusted when that replay is whole.
TEST(SequenceFence, ARetryReplaysWhateverTheEngineHoldsAgain) {
  SequenceFence f(kLimits);
  const Step first = f.on_live(40, false);
  ASSERT_TRUE(first.replay);
  EXPECT_TRUE(f.on_replay_end(first.replay->ticket, false).has(FenceEvent::kReplayFailed));  // timed out
  EXPECT_EQ(f.on_live(41, false).verdict, Verdict::kObserve) << "a live batch does not retry";
  const Step retry = f.on_retry();
  EXPECT_TRUE(retry.has(FenceEvent::kRetry));
  EXPECT_TRUE(retry.has(FenceEvent::kFullReplay));
  EXPECT_TRUE(retry.clear_index);
  ASSERT_TRUE(retry.replay);
  EXPECT_EQ(retry.replay->from, 0u);
  EXPECT_EQ(f.mode(), FenceMode::kReplaying);
  EXPECT_EQ(f.on_retry().verdict, Verdict::kObserve) << "only while fenced";
  EXPECT_FALSE(f.on_retry().replay);
  EXPECT_EQ(f.on_live(42, false).verdict, Verdict::kHold);
  for (uint64_t q = 0; q <= 42; ++q) EXPECT_EQ(f.on_replay_batch(retry.replay->ticket, q, false).verdict, Verdict::kApply);
  EXPECT_TRUE(f.on_replay_end(retry.replay->ticket, true).has(FenceEvent::kReplayDone));
  EXPECT_TRUE(f.trusted());
  EXPECT_EQ(f.on_held(42, false).verdict, Verdict::kDuplicate);
  EXPECT_EQ(f.on_live(43, false).verdict, Verdict::kApply);
  EXPECT_FALSE(f.on_retry().replay) << "a trusted engine is not replayed";
}

TEST(SequenceFence, NoRetryForAPublisherPastTheReplayLimit) {
  SequenceFence f(kLimits);
  EXPECT_EQ(f.on_live(500, false).verdict, Verdict::kObserve);  // joined late: only a clear helps
  const Step retry = f.on_retry();
  EXPECT_FALSE(retry.replay);
  EXPECT_FALSE(retry.has(FenceEvent::kRetry));
  EXPECT_EQ(f.mode(), FenceMode::kFenced);
}

TEST(SequenceFence, TooManyLiveBatchesDuringAReplayFence) {
  SequenceFence f(kLimits);
  f.on_live(0, false);
  f.on_live(3, false);  // holds 1
  EXPECT_EQ(f.on_live(4, false).verdict, Verdict::kHold);
  EXPECT_EQ(f.on_live(5, false).verdict, Verdict::kHold);
  const Step s = f.on_live(6, false);
  EXPECT_TRUE(s.has(FenceEvent::kHoldOverflow));
  EXPECT_TRUE(s.drop_held);
  EXPECT_EQ(f.mode(), FenceMode::kFenced);
}

TEST(SequenceFence, AStaleReplayIsIgnored) {
  SequenceFence f(kLimits);
  f.on_live(0, false);
  const Step first = f.on_live(3, false);
  f.on_live(4, true);  // a clear ends the wait: trusted, the replay is moot
  EXPECT_TRUE(f.trusted());
  EXPECT_EQ(f.on_replay_batch(first.replay->ticket, 1, false).verdict, Verdict::kObserve);
  EXPECT_FALSE(f.on_replay_end(first.replay->ticket, true).has(FenceEvent::kReplayDone));
  EXPECT_TRUE(f.trusted());
}

TEST(SequenceFence, ASequenceThatGoesBackIsARestartedPublisher) {
  SequenceFence f(kLimits);
  for (uint64_t q = 0; q < 20; ++q) f.on_live(q, false);
  const auto gen = f.generation();
  const Step s = f.on_live(0, false);  // the engine restarted
  EXPECT_TRUE(s.has(FenceEvent::kRestart));
  EXPECT_TRUE(s.clear_index);
  EXPECT_EQ(s.verdict, Verdict::kApply);
  EXPECT_GT(f.generation(), gen);
  EXPECT_TRUE(f.trusted());
  // A restart seen late (its first batches missed) replays from 0.
  for (uint64_t q = 1; q < 20; ++q) f.on_live(q, false);
  const Step late = f.on_live(5, false);
  EXPECT_TRUE(late.has(FenceEvent::kRestart));
  ASSERT_TRUE(late.replay);
  EXPECT_EQ(late.replay->from, 0u);
}

TEST(SequenceFence, ANewerBatchBelowTheExpectedSequenceIsARestartAnOlderOneADuplicate) {
  // Sequences learned by replay only (no live watermark): the batch's own timestamp tells.
  SequenceFence f(kLimits);
  const Step r = f.on_connect();
  for (uint64_t q = 0; q <= 4; ++q) f.on_replay_batch(r.replay->ticket, q, false, 100.0 + q);
  f.on_replay_end(r.replay->ticket, true);
  EXPECT_EQ(f.on_live(4, false, 104.0).verdict, Verdict::kDuplicate) << "replayed, then delivered live";
  const Step s = f.on_live(0, false, 200.0);
  EXPECT_TRUE(s.has(FenceEvent::kRestart));
  EXPECT_EQ(s.verdict, Verdict::kApply);
  EXPECT_TRUE(s.clear_index);
}

TEST(SequenceFence, ADisconnectFencesAtOnceAndAReconnectReplaysFromZero) {
  SequenceFence f(kLimits);
  for (uint64_t q = 0; q < 10; ++q) f.on_live(q, false);
  const Step d = f.on_disconnect();
  EXPECT_TRUE(d.has(FenceEvent::kDisconnect));
  EXPECT_TRUE(d.clear_index);
  EXPECT_FALSE(f.trusted());
  const Step r = f.on_connect();
  ASSERT_TRUE(r.replay);
  EXPECT_EQ(r.replay->from, 0u);
  EXPECT_TRUE(r.clear_index);
  for (uint64_t q = 0; q <= 12; ++q) f.on_replay_batch(r.replay->ticket, q, false);
  EXPECT_TRUE(f.on_replay_end(r.replay->ticket, true).has(FenceEvent::kReplayDone));
  EXPECT_EQ(f.on_live(12, false).verdict, Verdict::kDuplicate) << "replayed, then delivered live";
  EXPECT_EQ(f.on_live(13, false).verdict, Verdict::kApply);
  // The engine restarted while disconnected: its new publisher has fewer batches than were seen.
  SequenceFence g(kLimits);
  for (uint64_t q = 0; q < 50; ++q) g.on_live(q, false);
  g.on_disconnect();
  const Step again = g.on_connect();
  for (uint64_t q = 0; q <= 2; ++q) g.on_replay_batch(again.replay->ticket, q, false);
  EXPECT_TRUE(g.on_replay_end(again.replay->ticket, true).has(FenceEvent::kReplayDone));
  EXPECT_TRUE(g.trusted());
  EXPECT_EQ(g.on_live(3, false).verdict, Verdict::kApply);
}

TEST(SequenceFence, AFirstConnectReplaysWhateverTheEngineHolds) {
  SequenceFence idle(kLimits);  // published nothing yet: an empty replay, trusted at once
  const Step r = idle.on_connect();
  ASSERT_TRUE(r.replay);
  EXPECT_EQ(r.replay->from, 0u);
  EXPECT_TRUE(idle.on_replay_end(r.replay->ticket, true).has(FenceEvent::kReplayDone));
  EXPECT_TRUE(idle.trusted());
  EXPECT_EQ(idle.on_live(0, false).verdict, Verdict::kApply);

  SequenceFence busy(kLimits);  // published 0..6 before ramjet came
  const Step b = busy.on_connect();
  for (uint64_t q = 0; q <= 6; ++q) busy.on_replay_batch(b.replay->ticket, q, false);
  busy.on_replay_end(b.replay->ticket, true);
  EXPECT_TRUE(busy.trusted());
  EXPECT_EQ(busy.on_live(7, false).verdict, Verdict::kApply);

  SequenceFence old(kLimits);  // its buffer no longer reaches 0: fenced, no second try from 0
  const Step o = old.on_connect();
  old.on_replay_batch(o.replay->ticket, 40, false);
  EXPECT_TRUE(old.on_replay_end(o.replay->ticket, true).has(FenceEvent::kReplayFailed));
  EXPECT_EQ(old.on_live(45, false).verdict, Verdict::kObserve);
  EXPECT_TRUE(old.on_live(46, true).has(FenceEvent::kCleared));
}

}  // namespace
}  // namespace ramjet::cache::events
