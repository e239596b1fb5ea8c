#include "cache/events/fence.h"

#include <algorithm>

namespace ramjet::cache::events {

std::string_view label(FenceMode m) {
  switch (m) {
    case FenceMode::kFenced: return "fenced";
    case FenceMode::kReplaying: return "replaying";
    case FenceMode::kTrusted: return "trusted";
  }
  return "fenced";
}

std::string_view label(FenceEvent e) {
  switch (e) {
    case FenceEvent::kNone: return "none";
    case FenceEvent::kFirstBatchTrusted: return "first_batch_trusted";
    case FenceEvent::kFullReplay: return "full_replay";
    case FenceEvent::kGapReplay: return "gap_replay";
    case FenceEvent::kReplayDone: return "replay_done";
    case FenceEvent::kReplayFailed: return "replay_failed";
    case FenceEvent::kGapTooLarge: return "gap_too_large";
    case FenceEvent::kHoldOverflow: return "hold_overflow";
    case FenceEvent::kRestart: return "restart";
    case FenceEvent::kCleared: return "cleared";
    case FenceEvent::kDisconnect: return "disconnect";
    case FenceEvent::kIndexError: return "index_error";
    case FenceEvent::kRetry: return "retry";
    case FenceEvent::kCount_: break;
  }
  return "none";
}

namespace {
Step verdict(Verdict v) {
  Step s;
  s.verdict = v;
  return s;
}
}  // namespace

// The index is cleared whenever the fence is entered, so a fenced index is always empty: seq 0
// then completes it, and so does a replay from 0.
Step SequenceFence::fence(FenceEvent why) {
  const bool was_replaying = mode_ == FenceMode::kReplaying;
  if (was_replaying && replay_full_) full_replay_tried_ = true;
  mode_ = FenceMode::kFenced;
  ++generation_;
  expected_.reset();
  held_ = 0;
  Step s = verdict(Verdict::kObserve);
  s.clear_index = true;
  s.drop_held = was_replaying;
  return s.with(why);
}

Step SequenceFence::clear_and_trust(uint64_t seq) {
  Step s = verdict(Verdict::kApply);
  s.clear_index = true;
  s.drop_held = mode_ == FenceMode::kReplaying;
  mode_ = FenceMode::kTrusted;
  ++generation_;
  expected_ = seq + 1;
  full_replay_tried_ = false;
  held_ = 0;
  return s.with(FenceEvent::kCleared);
}

Step SequenceFence::start_replay(uint64_t from, uint64_t through, bool full, Step step) {
  mode_ = FenceMode::kReplaying;
  ++ticket_;
  replay_from_ = from;
  replay_through_ = through;
  replay_last_.reset();
  replay_full_ = full;
  replay_through_any_ = false;
  replay_broken_ = false;
  held_ = step.verdict == Verdict::kHold ? 1 : 0;
  expected_ = from;
  if (full) {
    full_replay_tried_ = true;
    ++generation_;
    step.clear_index = true;
  }
  step.replay = ReplayRequest{ticket_, from, through};
  return step.with(full ? FenceEvent::kFullReplay : FenceEvent::kGapReplay);
}

Step SequenceFence::first_batch(uint64_t seq, bool clears_all) {
  if (clears_all) return clear_and_trust(seq);
  if (seq == 0) {
    mode_ = FenceMode::kTrusted;
    expected_ = 1;
    full_replay_tried_ = false;
    return verdict(Verdict::kApply).with(FenceEvent::kFirstBatchTrusted);
  }
  if (!full_replay_tried_ && seq + 1 <= limits_.replay_limit) {
    return start_replay(0, seq, /*full=*/true, verdict(Verdict::kHold));
  }
  return verdict(Verdict::kObserve);
}

Step SequenceFence::in_sequence(uint64_t seq, bool clears_all) {
  if (clears_all) return clear_and_trust(seq);
  if (seq < *expected_) return verdict(Verdict::kDuplicate);
  if (seq == *expected_) {
    expected_ = seq + 1;
    return verdict(Verdict::kApply);
  }
  if (seq - *expected_ + 1 <= limits_.replay_limit) {
    return start_replay(*expected_, seq, /*full=*/false, verdict(Verdict::kHold));
  }
  return fence(FenceEvent::kGapTooLarge);
}

Step SequenceFence::hold(uint64_t seq, bool clears_all) {
  if (clears_all) return clear_and_trust(seq);
  if (seq < replay_from_) return verdict(Verdict::kDuplicate);
  if (held_ >= limits_.tail_limit) return fence(FenceEvent::kHoldOverflow);
  ++held_;
  return verdict(Verdict::kHold);
}

Step SequenceFence::on_live(uint64_t seq, bool clears_all, double ts) {
  const bool restart = (last_live_ && seq <= *last_live_) ||
                       (mode_ == FenceMode::kTrusted && expected_ && seq < *expected_ && ts > last_ts_);
  last_live_ = seq;
  last_ts_ = std::max(last_ts_, ts);
  if (restart) {
    // A new publisher instance: what the index holds says nothing about its cache.
    Step reset = fence(FenceEvent::kRestart);
    full_replay_tried_ = false;
    Step s = first_batch(seq, clears_all);
    s.clear_index = true;
    s.drop_held = s.drop_held || reset.drop_held;
    s.events |= reset.events;
    return s;
  }
  switch (mode_) {
    case FenceMode::kFenced: return first_batch(seq, clears_all);
    case FenceMode::kReplaying: return hold(seq, clears_all);
    case FenceMode::kTrusted: return in_sequence(seq, clears_all);
  }
  return verdict(Verdict::kObserve);
}

Step SequenceFence::on_held(uint64_t seq, bool clears_all, double ts) {
  last_ts_ = std::max(last_ts_, ts);
  switch (mode_) {
    case FenceMode::kTrusted: return in_sequence(seq, clears_all);
    case FenceMode::kReplaying: return hold(seq, clears_all);  // a held batch revealed another gap
    case FenceMode::kFenced: return clears_all ? clear_and_trust(seq) : verdict(Verdict::kObserve);
  }
  return verdict(Verdict::kObserve);
}

Step SequenceFence::on_replay_batch(uint64_t ticket, uint64_t seq, bool clears_all, double ts) {
  if (mode_ != FenceMode::kReplaying || ticket != ticket_ || replay_broken_) return verdict(Verdict::kObserve);
  last_ts_ = std::max(last_ts_, ts);
  const uint64_t want = replay_last_ ? *replay_last_ + 1 : replay_from_;
  if (seq != want) {  // started late (the engine no longer had it), a hole, or out of order
    replay_broken_ = true;
    return verdict(Verdict::kObserve);
  }
  replay_last_ = seq;
  expected_ = seq + 1;
  (void)clears_all;  // a clear inside the replay is applied like any other event
  return verdict(Verdict::kApply);
}

Step SequenceFence::on_replay_end(uint64_t ticket, bool complete) {
  if (mode_ != FenceMode::kReplaying || ticket != ticket_) return verdict(Verdict::kObserve);
  const bool covered = replay_through_any_ ? true : replay_last_ && *replay_last_ >= replay_through_;
  if (!complete || replay_broken_ || !covered) return fence(FenceEvent::kReplayFailed);
  if (!replay_last_) expected_ = replay_from_;  // nothing published yet
  mode_ = FenceMode::kTrusted;
  full_replay_tried_ = false;
  held_ = 0;
  return verdict(Verdict::kObserve).with(FenceEvent::kReplayDone);
}

Step SequenceFence::on_disconnect() {
  Step s = fence(FenceEvent::kDisconnect);
  full_replay_tried_ = false;
  return s;
}

Step SequenceFence::on_index_error() { return fence(FenceEvent::kIndexError); }

Step SequenceFence::on_connect() {
  if (mode_ != FenceMode::kFenced) return verdict(Verdict::kObserve);
  // Whatever publisher is there now (the same one after a blip, or a restarted engine with fewer
  // batches): a replay that starts at 0 and runs on without holes is the whole of its cache. The
  // live watermark belonged to the connection before.
  last_live_.reset();
  return replay_whatever_it_holds(verdict(Verdict::kObserve));
}

Step SequenceFence::on_retry() {
  if (mode_ != FenceMode::kFenced) return verdict(Verdict::kObserve);
  // A publisher already past what one replay may ask for cannot be made whole from 0 (the
  // first-batch rule): asking again would only make the engine send its whole buffer for nothing.
  if (last_live_ && *last_live_ + 1 > limits_.replay_limit) return verdict(Verdict::kObserve);
  return replay_whatever_it_holds(verdict(Verdict::kObserve).with(FenceEvent::kRetry));
}

Step SequenceFence::replay_whatever_it_holds(Step step) {
  Step s = start_replay(0, 0, /*full=*/true, step);
  replay_through_any_ = true;
  return s;
}

}  // namespace ramjet::cache::events
