// cache/events/fence: the sequence fence of one engine's KV-event stream. vLLM numbers its
// published batches 0, 1, 2, … per publisher instance (a restarted engine starts again at 0)
// and keeps the last buffer_steps of them for replay; a subscriber that misses one (ZeroMQ drops
// on its high-water mark, or while disconnected) no longer knows what the engine caches. The
// fence decides, batch by batch, whether the exact index may apply a batch, must fetch missed
// ones by replay first, or cannot be trusted until the engine clears its cache. It is pure: it
// sees sequence numbers and "this batch clears everything", never sockets or payloads; the
// subscriber (cache/events/subscriber) does what it says, and the index is trusted for routing
// only while trusted() is true.
//
// Transitions (docs/life-of-a-request.md, "Exact routing"):
//  - any batch with AllBlocksCleared: clear the index, apply, trusted (the engine's cache is
//    known from here on, whatever came before);
//  - the first batch of a publisher: seq 0 -> trusted; seq S with S + 1 <= replay_limit -> replay
//    0..S into a cleared index; otherwise observe only (fenced until a clear);
//  - later, live: seq == expected -> apply; seq < expected from the live socket -> the publisher
//    restarted (new generation, first-batch rules); gap of at most replay_limit -> replay the
//    missing range, holding live batches meanwhile (at most tail_limit); larger gap -> fenced;
//  - a replay must start at what was asked and run on without holes to at least the batch that
//    revealed the gap; anything else (or a timeout) -> fenced. A fenced engine tries one full
//    replay from 0 at its next live batch, then waits for a clear;
//  - a socket disconnect -> fenced at once;
//  - on (re)connect while fenced: a full replay from 0 of whatever the engine holds (the same
//    publisher after a network blip, or a restarted one), so an idle engine is trusted without
//    waiting for its next batch; an empty replay means the publisher has published nothing yet;
//  - still fenced after that: the same full replay again on the subscriber's backoff (on_retry:
//    1 s, doubling to 60 s), so a replay that failed for a passing reason is not the last word.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ramjet::cache::events {

struct FenceLimits {
  uint64_t replay_limit = 8192;  // batches one replay may ask for (RJ_KV_EVENT_REPLAY_LIMIT)
  uint64_t tail_limit = 4096;    // live batches held while a replay runs (RJ_KV_EVENT_REPLAY_TAIL_LIMIT)
};

enum class FenceMode : uint8_t { kFenced, kReplaying, kTrusted };
std::string_view label(FenceMode m);  // "fenced" | "replaying" | "trusted"

// What to do with one batch.
enum class Verdict : uint8_t {
  kApply,      // apply it to the index (clear first when Step::clear_index)
  kDuplicate,  // already applied: drop it
  kObserve,    // the index is not trusted and this batch cannot help: drop it
  kHold,       // a replay is running: keep it and hand it to on_held() once the replay ends
};

// Counted transitions (metric label ramjet_kv_fence_transitions_total{event}).
enum class FenceEvent : uint8_t {
  kNone,
  kFirstBatchTrusted,  // first batch was seq 0
  kFullReplay,         // a replay from 0 was asked for
  kGapReplay,          // a replay of a gap was asked for
  kReplayDone,         // a replay covered what it had to: trusted
  kReplayFailed,       // short, holey, late or refused replay: fenced
  kGapTooLarge,        // a gap beyond replay_limit: fenced
  kHoldOverflow,       // more live batches arrived during a replay than tail_limit: fenced
  kRestart,            // the publisher's sequence went back: new generation
  kCleared,            // AllBlocksCleared: trusted from scratch
  kDisconnect,         // the socket went away: fenced
  kIndexError,         // the index could not follow a batch (conflict, capacity): fenced
  kRetry,              // a fenced engine's recovery tried again after a backoff (on_retry)
  kCount_,
};
std::string_view label(FenceEvent e);

struct ReplayRequest {
  uint64_t ticket = 0;   // results of this replay carry it; others are stale
  uint64_t from = 0;     // the first sequence asked for (sent to the engine)
  uint64_t through = 0;  // the replay must reach at least this one
};

struct Step {
  Verdict verdict = Verdict::kObserve;
  bool clear_index = false;             // clear the index before anything else
  bool drop_held = false;               // the replay was given up: drop the batches held for it
  std::optional<ReplayRequest> replay;  // start this replay (any earlier one is stale)
  uint32_t events = 0;                  // what happened, for the counters: bits 1 << FenceEvent

  bool has(FenceEvent e) const { return (events & (1u << static_cast<unsigned>(e))) != 0; }
  Step& with(FenceEvent e) {
    events |= 1u << static_cast<unsigned>(e);
    return *this;
  }
};

class SequenceFence {
 public:
  explicit SequenceFence(FenceLimits limits = {}) : limits_(limits) {}

  // A batch from the live socket; `ts` is the batch's own timestamp (the publisher's clock). A
  // sequence below the expected one is a duplicate of a replayed batch when it is no newer than
  // what was applied, and a restarted publisher when it is newer (or not above the last live one).
  Step on_live(uint64_t seq, bool clears_all, double ts = 0);
  // A held batch, handed back in order after the replay ended (whatever it ended with).
  Step on_held(uint64_t seq, bool clears_all, double ts = 0);
  // One batch of the replay with this ticket, in the order received; kApply or kObserve (stale
  // ticket, or a batch the replay should not have sent: the replay has then failed).
  Step on_replay_batch(uint64_t ticket, uint64_t seq, bool clears_all, double ts = 0);
  // The replay's end: `complete` when the engine's end marker arrived before the deadline.
  Step on_replay_end(uint64_t ticket, bool complete);
  Step on_disconnect();
  // The live socket is connected (the first time, or again): see the header.
  Step on_connect();
  // The index refused a batch the fence let through: fenced (and cleared) until it can be whole.
  Step on_index_error();
  // While fenced, the subscriber's backoff has passed: a full replay from 0 of whatever the
  // engine holds, as on a connect (a replay that failed under load, an endpoint that was down).
  // An engine whose replay holds the batch that fenced it stays fenced until its cache clears; one
  // whose live sequence is past the replay limit is not asked (it cannot be whole from 0).
  Step on_retry();

  FenceMode mode() const { return mode_; }
  bool trusted() const { return mode_ == FenceMode::kTrusted; }
  uint64_t generation() const { return generation_; }  // bumped whenever the index is cleared
  std::optional<uint64_t> expected() const { return expected_; }
  uint64_t held() const { return held_; }
  const FenceLimits& limits() const { return limits_; }

 private:
  Step first_batch(uint64_t seq, bool clears_all);
  Step in_sequence(uint64_t seq, bool clears_all);
  Step hold(uint64_t seq, bool clears_all);
  Step start_replay(uint64_t from, uint64_t through, bool full, Step step);
  Step fence(FenceEvent why);
  Step clear_and_trust(uint64_t seq);
  Step replay_whatever_it_holds(Step step);

  FenceLimits limits_;
  FenceMode mode_ = FenceMode::kFenced;
  uint64_t generation_ = 0;
  std::optional<uint64_t> expected_;   // next sequence to apply (none: no publisher seen yet)
  std::optional<uint64_t> last_live_;  // highest sequence seen on the live socket
  double last_ts_ = 0;                 // newest timestamp of a batch applied or held
  bool full_replay_tried_ = false;     // this fenced episode already tried a replay from 0
  // The running replay.
  uint64_t ticket_ = 0;
  uint64_t replay_from_ = 0, replay_through_ = 0;
  std::optional<uint64_t> replay_last_;  // last batch the replay delivered
  bool replay_full_ = false;
  bool replay_through_any_ = false;  // a connect replay: whatever the engine holds from 0
  bool replay_broken_ = false;
  uint64_t held_ = 0;
};

}  // namespace ramjet::cache::events
