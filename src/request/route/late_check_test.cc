#include "request/route/late_check.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace ramjet::route {
namespace {

// The index as the lookup sees it: how many tokens it holds, changed by the test.
struct Index {
  std::atomic<uint32_t> holds{0};
  LateCheck::Lookup lookup() {
    return [this](size_t, std::span<const uint32_t> tokens, std::string_view, std::string_view) {
      return std::optional<uint32_t>(std::min<uint32_t>(holds.load(), static_cast<uint32_t>(tokens.size())));
    };
  }
};

Misprediction beat(uint64_t predicted, uint64_t cached) {
  Misprediction u;
  u.tokens.assign(cached, 7);
  u.predicted = predicted;
  u.cached = cached;
  u.block_size = 32;
  return u;
}

uint64_t results(const PredictionCheck& c, std::string_view result) {
  metrics::Exposition x;
  c.write_metrics(x);
  const std::string text = x.take();
  const std::string key = "ramjet_exact_predictions_total{upstream=\"0\",result=\"" + std::string(result) + "\"} ";
  const size_t at = text.find(key);
  return at == std::string::npos ? 0 : std::stoull(text.substr(at + key.size()));
}

void wait_until(const std::function<bool()>& done) {
  for (int i = 0; i < 400 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

TEST(LateCheck, EventsTheIndexAlreadyHoldsMakeItLateAtOnce) {
  PredictionCheck check(1, PredictionCheckConfig{}, SteadyClock::instance());
  Index index;
  LateCheck late(check, index.lookup());
  index.holds = 4096;
  late.submit(beat(1024, 4096));
  EXPECT_EQ(late.pending(), 0u);
  EXPECT_EQ(results(check, "late"), 1u);
  EXPECT_EQ(results(check, "miss"), 0u);
}

TEST(LateCheck, EventsThatArriveBeforeTheSecondLookMakeItLate) {
  PredictionCheck check(1, PredictionCheckConfig{.miss_limit = 1}, SteadyClock::instance());
  Index index;
  LateCheck late(check, index.lookup(), {}, LateCheckConfig{.delay_ms = 100});
  index.holds = 1024;
  late.submit(beat(1024, 4096));
  EXPECT_EQ(late.pending(), 1u);
  index.holds = 4096;  // the events arrive
  wait_until([&] { return late.pending() == 0 && results(check, "late") == 1; });
  EXPECT_EQ(results(check, "late"), 1u);
  EXPECT_EQ(results(check, "miss"), 0u);
  EXPECT_FALSE(check.withdrawn(0));
}

// ramjet's tokens are not the engine's: the index never holds them that far. A miss, and misses
// in a row still withdraw the engine.
TEST(LateCheck, AnIndexThatNeverCatchesUpIsAMiss) {
  PredictionCheck check(1, PredictionCheckConfig{.miss_limit = 2}, SteadyClock::instance());
  Index index;
  LateCheck late(check, index.lookup(), {}, LateCheckConfig{.delay_ms = 20});
  index.holds = 1024;
  late.submit(beat(1024, 4096));
  late.submit(beat(1024, 4096));
  wait_until([&] { return late.pending() == 0 && results(check, "miss") == 2; });
  EXPECT_EQ(results(check, "miss"), 2u);
  EXPECT_TRUE(check.withdrawn(0));
}

TEST(LateCheck, WithNoRoomForASecondLookItIsRecordedAsItStands) {
  PredictionCheck check(1, PredictionCheckConfig{}, SteadyClock::instance());
  Index index;
  LateCheck late(check, index.lookup(), {}, LateCheckConfig{.delay_ms = 60000, .max_pending = 1});
  late.submit(beat(0, 4096));
  late.submit(beat(0, 4096));
  EXPECT_EQ(late.pending(), 1u);
  EXPECT_EQ(results(check, "miss"), 1u);
}  // the destructor drops the waiting look and joins its thread

// An over-prediction: the engine found `cached` of the `predicted` tokens. The index's answer to
// "held since the decision?" is the test's.
struct Held {
  std::atomic<int> answer{1};  // 1 held, 0 not (removed in between), -1 busy
  LateCheck::HeldSince held_since() {
    return [this](size_t, std::span<const uint32_t> tokens, std::string_view, std::string_view, uint64_t from,
                  const ExactStamp& stamp) -> std::optional<bool> {
      EXPECT_EQ(stamp.revision, 41u);  // the prediction's stamp is what is asked about
      EXPECT_LT(from, tokens.size());
      const int a = answer.load();
      if (a < 0) return std::nullopt;
      return a == 1;
    };
  }
};

Misprediction short_of(uint64_t predicted, uint64_t cached) {
  Misprediction u;
  u.tokens.assign(predicted, 7);
  u.predicted = predicted;
  u.cached = cached;
  u.block_size = 32;
  u.stamp.revision = 41;
  return u;
}

// The engine evicted predicted blocks between the decision and the prefill: its events say so.
// Not a miss, and no number of them withdraws the engine.
TEST(LateCheck, AnOverPredictionTheEventsRemovedIsAnEviction) {
  PredictionCheck check(1, PredictionCheckConfig{.miss_limit = 1}, SteadyClock::instance());
  Index index;
  Held held;
  held.answer = 0;
  LateCheck late(check, index.lookup(), held.held_since());
  for (int i = 0; i < 5; ++i) late.submit(short_of(4096, 1024));
  EXPECT_EQ(late.pending(), 0u);
  EXPECT_EQ(results(check, "evicted"), 5u);
  EXPECT_EQ(results(check, "miss"), 0u);
  EXPECT_FALSE(check.withdrawn(0));
}

// The removal reaches ramjet after the response (vLLM publishes a step's events late).
TEST(LateCheck, AnEvictionWhoseEventsArriveLaterIsAnEviction) {
  PredictionCheck check(1, PredictionCheckConfig{.miss_limit = 1}, SteadyClock::instance());
  Index index;
  Held held;
  LateCheck late(check, index.lookup(), held.held_since(), LateCheckConfig{.delay_ms = 2000});
  late.submit(short_of(4096, 1024));
  EXPECT_EQ(late.pending(), 1u);
  held.answer = 0;
  wait_until([&] { return late.pending() == 0 && results(check, "evicted") == 1; });
  EXPECT_EQ(results(check, "evicted"), 1u);
  EXPECT_EQ(results(check, "miss"), 0u);
  EXPECT_FALSE(check.withdrawn(0));
}

// The blocks the engine did not find were in the index, untouched, all along: ramjet predicted
// tokens the engine does not have (a template or tokenizer mismatch). A miss, and misses in a row
// withdraw the engine's exact trust — also when a look raced the index's writer.
TEST(LateCheck, AnOverPredictionOfBlocksHeldAllAlongIsAMiss) {
  PredictionCheck check(1, PredictionCheckConfig{.miss_limit = 2}, SteadyClock::instance());
  Index index;
  Held held;
  LateCheck late(check, index.lookup(), held.held_since(), LateCheckConfig{.delay_ms = 20});
  late.submit(short_of(4096, 1024));
  held.answer = -1;
  late.submit(short_of(4096, 1024));
  wait_until([&] { return late.pending() == 0 && results(check, "miss") == 2; });
  EXPECT_EQ(results(check, "miss"), 2u);
  EXPECT_EQ(results(check, "evicted"), 0u);
  EXPECT_TRUE(check.withdrawn(0));
}

// Without the eviction look (held_since not given), an over-prediction stands as checked.
TEST(LateCheck, WithoutTheEvictionLookAnOverPredictionIsAMiss) {
  PredictionCheck check(1, PredictionCheckConfig{}, SteadyClock::instance());
  Index index;
  LateCheck late(check, index.lookup(), {}, LateCheckConfig{.delay_ms = 10});
  late.submit(short_of(4096, 1024));
  wait_until([&] { return late.pending() == 0 && results(check, "miss") == 1; });
  EXPECT_EQ(results(check, "miss"), 1u);
}

}  // namespace
}  // namespace ramjet::route
