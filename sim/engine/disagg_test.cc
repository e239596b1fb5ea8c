// Prefill/decode disaggregation in the engine model (docs/sim.md §8.4): a remote-decode request
// holds its blocks after it finishes until released; a remote-prefill request is admitted without
// computing, waits for its pull, caches the pulled blocks and computes only its last token; a
// failed pull follows vLLM's kv_load_failure_policy.
#include <gtest/gtest.h>

#include <variant>
#include <vector>

#include "sim/engine/engine.h"
#include "sim/engine/engine_core.h"

namespace ramjet::sim {
namespace {

struct Recorder : KvEventSink {
  std::vector<std::vector<KvEvent>> batches;
  void publish(double, std::vector<KvEvent> events) override { batches.push_back(std::move(events)); }
  std::vector<BlockStored> stored() const {
    std::vector<BlockStored> out;
    for (const auto& b : batches) {
      for (const auto& e : b) {
        if (const auto* s = std::get_if<BlockStored>(&e)) out.push_back(*s);
      }
    }
    return out;
  }
};

EngineConfig connector(bool recompute = false) {
  EngineConfig c = *preset("tiny");  // block size 16
  c.kv_connector = true;
  c.kv_load_recompute = recompute;
  return c;
}

std::vector<uint32_t> tokens(uint32_t n, uint32_t base = 5000) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = base + i;
  return t;
}

std::vector<RequestOutput> drain(Engine& e, std::vector<KvLoad>* loads = nullptr, int max_steps = 10000) {
  std::vector<RequestOutput> all;
  for (int i = 0; i < max_steps && !e.idle(); ++i) {
    StepResult r = e.step(0);
    all.insert(all.end(), r.outputs.begin(), r.outputs.end());
    if (loads) loads->insert(loads->end(), r.kv_loads.begin(), r.kv_loads.end());
  }
  return all;
}

const RequestOutput* finishing(const std::vector<RequestOutput>& outs, uint64_t id) {
  for (const auto& o : outs) {
    if (o.id == id && o.finish != FinishReason::kNone) return &o;
  }
  return nullptr;
}

TEST(EngineDisagg, ARemoteDecodeRequestHoldsItsBlocksAfterItsFinishUntilReleased) {
  Engine e(connector(), nullptr);
  ASSERT_TRUE(e.add_request(1, tokens(100), 1, {}, KvTransfer::kRemoteDecode));
  auto outs = drain(e);
  const RequestOutput* fin = finishing(outs, 1);
  ASSERT_NE(fin, nullptr);
  EXPECT_EQ(fin->finish, FinishReason::kLength);
  EXPECT_TRUE(fin->held);
  EXPECT_EQ(fin->held_blocks.size(), 7u) << "6 full blocks and the partial one";
  EXPECT_EQ(fin->held_tokens, 100u) << "the prompt: the sampled token has no KV yet";
  EngineStats s = e.stats();
  EXPECT_TRUE(e.idle());
  EXPECT_EQ(s.held_requests, 1u);
  EXPECT_EQ(s.held_blocks, 7u);
  EXPECT_EQ(s.free_blocks, s.num_gpu_blocks - 1 - 7);
  EXPECT_GT(s.kv_cache_usage, 0.0);
  EXPECT_EQ(s.external_prefix_cache_queries, 100u) << "the connector was asked, and had nothing";
  EXPECT_EQ(s.external_prefix_cache_hits, 0u);
  EXPECT_TRUE(e.release_held(1));
  EXPECT_FALSE(e.release_held(1));
  s = e.stats();
  EXPECT_EQ(s.held_requests, 0u);
  EXPECT_EQ(s.free_blocks, s.num_gpu_blocks - 1);
  EXPECT_EQ(e.resident_prefix_tokens(tokens(100)), 96u) << "released blocks stay cached";
}

TEST(EngineDisagg, AnOrdinaryRequestIsFreedAtItsFinishAndAnAbortReleasesAHeldOne) {
  Engine e(connector(), nullptr);
  ASSERT_TRUE(e.add_request(1, tokens(50), 2));
  auto outs = drain(e);
  EXPECT_FALSE(finishing(outs, 1)->held);
  EXPECT_EQ(e.stats().free_blocks, e.stats().num_gpu_blocks - 1);
  ASSERT_TRUE(e.add_request(2, tokens(50, 9000), 1, {}, KvTransfer::kRemoteDecode));
  drain(e);
  EXPECT_EQ(e.stats().held_requests, 1u);
  e.abort(2);
  EXPECT_EQ(e.stats().held_requests, 0u);
  EXPECT_EQ(e.stats().free_blocks, e.stats().num_gpu_blocks - 1);
  EXPECT_TRUE(e.step(0).outputs.empty()) << "a held request finished already: no abort output";
}

TEST(EngineDisagg, ARemotePrefillIsPulledNotComputedThenCachesItsBlocksAndComputesOneToken) {
  Recorder rec;
  Engine e(connector(), &rec);
  ASSERT_TRUE(e.add_request(1, tokens(100), 3, {}, KvTransfer::kRemotePrefill));
  StepResult first = e.step(0);
  ASSERT_EQ(first.kv_loads.size(), 1u);
  EXPECT_EQ(first.kv_loads[0].id, 1u);
  EXPECT_EQ(first.kv_loads[0].local_tokens, 0u);
  EXPECT_EQ(first.kv_loads[0].external_tokens, 100u);
  EXPECT_EQ(first.scheduled_tokens, 0u) << "nothing computed while the KV is pulled";
  EXPECT_TRUE(first.outputs.empty());
  EXPECT_TRUE(e.idle()) << "a request waiting for its pull is not stepped";
  EXPECT_EQ(e.stats().waiting, 1u);
  EXPECT_EQ(e.stats().loading, 1u);
  EXPECT_EQ(e.stats().free_blocks, e.stats().num_gpu_blocks - 1 - 7) << "slots for the whole prompt";
  EXPECT_TRUE(rec.stored().empty()) << "not cached before the KV arrived";

  EXPECT_FALSE(e.finish_kv_load(1, true).has_value());
  EXPECT_FALSE(e.idle());
  StepResult resumed = e.step(0);
  EXPECT_EQ(resumed.scheduled_tokens, 1u) << "only the last prompt token is computed";
  ASSERT_EQ(resumed.outputs.size(), 1u);
  EXPECT_EQ(resumed.outputs[0].new_tokens, 1u);
  EXPECT_TRUE(resumed.outputs[0].prefill_done);
  EXPECT_EQ(resumed.outputs[0].cached_tokens, 100u) << "local + external, as PrefillStats counts them";
  EXPECT_EQ(resumed.outputs[0].created_cache_tokens, 0u);
  const auto stored = rec.stored();
  ASSERT_EQ(stored.size(), 1u) << "the pulled full blocks, in one BlockStored";
  EXPECT_EQ(stored[0].block_hashes.size(), 6u);
  EXPECT_EQ(stored[0].token_ids.size(), 96u);
  EXPECT_FALSE(stored[0].parent_block_hash.has_value());
  auto outs = drain(e);
  ASSERT_NE(finishing(outs, 1), nullptr);
  EXPECT_EQ(finishing(outs, 1)->finish, FinishReason::kLength);
  const EngineStats s = e.stats();
  EXPECT_EQ(s.prefix_cache_queries, 100u);
  EXPECT_EQ(s.prefix_cache_hits, 0u);
  EXPECT_EQ(s.external_prefix_cache_queries, 100u);
  EXPECT_EQ(s.external_prefix_cache_hits, 100u);
  EXPECT_EQ(s.free_blocks, s.num_gpu_blocks - 1);
}

TEST(EngineDisagg, ALocalPrefixHitIsNotPulledAgain) {
  Engine e(connector(), nullptr);
  ASSERT_TRUE(e.add_request(1, tokens(64), 1));
  drain(e);
  auto prompt = tokens(64);
  auto more = tokens(36, 8000);
  prompt.insert(prompt.end(), more.begin(), more.end());
  ASSERT_TRUE(e.add_request(2, prompt, 2, {}, KvTransfer::kRemotePrefill));
  StepResult r = e.step(0);
  ASSERT_EQ(r.kv_loads.size(), 1u);
  EXPECT_EQ(r.kv_loads[0].local_tokens, 64u);
  EXPECT_EQ(r.kv_loads[0].external_tokens, 36u);
  EXPECT_EQ(e.stats().external_prefix_cache_hits, 36u);
}

TEST(EngineDisagg, AFailedPullFailsTheRequestUnderTheDefaultPolicy) {
  Recorder rec;
  Engine e(connector(), &rec);
  ASSERT_TRUE(e.add_request(1, tokens(100), 3, {}, KvTransfer::kRemotePrefill));
  e.step(0);
  auto out = e.finish_kv_load(1, false);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->finish, FinishReason::kError);
  EXPECT_TRUE(e.idle());
  EXPECT_EQ(e.stats().waiting, 0u);
  EXPECT_EQ(e.stats().free_blocks, e.stats().num_gpu_blocks - 1);
  EXPECT_TRUE(rec.stored().empty());
  EXPECT_FALSE(e.finish_kv_load(1, true).has_value()) << "gone: a late report is ignored";
}

TEST(EngineDisagg, AFailedPullIsComputedLocallyUnderTheRecomputePolicy) {
  Recorder rec;
  Engine e(connector(/*recompute=*/true), &rec);
  ASSERT_TRUE(e.add_request(1, tokens(100), 2, {}, KvTransfer::kRemotePrefill));
  e.step(0);
  EXPECT_FALSE(e.finish_kv_load(1, false).has_value());
  StepResult r = e.step(0);
  EXPECT_TRUE(r.kv_loads.empty()) << "no second pull";
  EXPECT_EQ(r.scheduled_tokens, 100u) << "the whole prompt, computed here";
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].cached_tokens, 0u);
  auto outs = drain(e);
  ASSERT_NE(finishing(outs, 1), nullptr);
  EXPECT_EQ(finishing(outs, 1)->finish, FinishReason::kLength);
  ASSERT_EQ(rec.stored().size(), 1u);
  EXPECT_EQ(rec.stored()[0].block_hashes.size(), 6u);
}

TEST(EngineDisagg, AnAbortWhileWaitingForThePullFreesTheSlotsAndIsReported) {
  Engine e(connector(), nullptr);
  ASSERT_TRUE(e.add_request(1, tokens(100), 3, {}, KvTransfer::kRemotePrefill));
  e.step(0);
  e.abort(1);
  EXPECT_EQ(e.stats().loading, 0u);
  EXPECT_EQ(e.stats().free_blocks, e.stats().num_gpu_blocks - 1);
  EXPECT_FALSE(e.finish_kv_load(1, true).has_value());
  StepResult r = e.step(0);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].finish, FinishReason::kAbort);
}

TEST(EngineDisagg, HeldBlocksStayOutOfTheFreeQueueSoAFullPoolMakesLaterRequestsWait) {
  EngineConfig c = connector();
  c.num_gpu_blocks = 16;  // 15 usable blocks of 16 tokens
  Engine e(c, nullptr);
  ASSERT_TRUE(e.add_request(1, tokens(200), 1, {}, KvTransfer::kRemoteDecode));  // 13 blocks
  drain(e);
  ASSERT_TRUE(e.add_request(2, tokens(100, 9000), 1));  // needs 7 blocks, 2 are free
  e.step(0);
  EXPECT_EQ(e.stats().waiting, 1u);
  EXPECT_EQ(e.stats().running, 0u);
  ASSERT_TRUE(e.release_held(1));
  auto outs = drain(e);
  ASSERT_NE(finishing(outs, 2), nullptr);
}

TEST(EngineDisagg, SleepReleasesHeldBlocksAndDropsPendingPulls) {
  Engine e(connector(), nullptr);
  ASSERT_TRUE(e.add_request(1, tokens(100), 1, {}, KvTransfer::kRemoteDecode));
  drain(e);
  ASSERT_TRUE(e.add_request(2, tokens(100, 9000), 2, {}, KvTransfer::kRemotePrefill));
  e.step(0);
  auto aborted = e.sleep(0);
  ASSERT_EQ(aborted.size(), 1u) << "the pending pull; the held request had finished already";
  EXPECT_EQ(aborted[0].id, 2u);
  const EngineStats s = e.stats();
  EXPECT_EQ(s.held_requests, 0u);
  EXPECT_EQ(s.loading, 0u);
  EXPECT_EQ(s.free_blocks, s.num_gpu_blocks - 1);
}

}  // namespace
}  // namespace ramjet::sim
