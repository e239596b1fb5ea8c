// sim/engine: a deterministic model of one vLLM v1 engine — waiting/running queues,
// max_num_seqs, a per-step token budget with chunked prefill, a prefix-caching block pool
// (chained block hashes, refcounts, LRU eviction of free cached blocks, preemption), a timing
// model (batched decode, prefill cost, speculative decoding), and KV events.
// No I/O and no clock: the caller calls step() and waits the returned virtual duration.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/kv_sink.h"
#include "sim/engine/prefix_hash.h"

namespace ramjet::sim {

// Timing model parameters (seconds). Step time =
//   step_base + per_seq * running_seqs + per_kv_token * context_tokens_in_batch
//   + per_prefill_token * prefill_tokens_this_step  (+ spec_overhead_per_draft * k * seqs when speculating)
//   (+ spec_step_overhead_per_draft * k once per step when any sequence speculates)
//   (+ offload_load_per_token * tokens loaded from the CPU offload tier this step)
// running_seqs = sequences scheduled this step; context_tokens_in_batch = KV tokens they attend
// over (computed + newly scheduled, per sequence); prefill_tokens = scheduled tokens of sequences
// still computing their prompt (or recomputing after preemption). Equations and calibration:
// docs/sim.md.
struct TimingModel {
  double step_base = 0.0;
  double per_seq = 0.0;
  double per_kv_token = 0.0;
  double per_prefill_token = 0.0;
  // Speculative decoding (MTP): k draft tokens per step; acceptance[i] = probability that draft
  // position i is accepted given positions < i were (a step yields 1 + accepted tokens).
  uint32_t speculative_tokens = 0;
  std::vector<double> acceptance;
  double spec_overhead_per_draft = 0.0;  // extra step time per draft token per running sequence
  double spec_step_overhead_per_draft = 0.0;  // extra step time per draft position per step (the
                                              // k sequential draft passes), batch-independent
  // CPU offload tier (--cpu-offload-blocks): step time per prompt token a request loads back from
  // CPU instead of prefilling it. Below 0: a tenth of per_prefill_token (a PCIe copy of the
  // token's KV against its prefill compute; docs/sim.md).
  double offload_load_per_token = -1.0;
  double load_per_token() const { return offload_load_per_token >= 0 ? offload_load_per_token : per_prefill_token / 10; }
};

struct EngineConfig {
  std::string preset = "tiny";       // see presets(); the flags below override it
  uint32_t block_size = 16;
  uint32_t num_gpu_blocks = 8192;
  uint32_t max_num_seqs = 256;
  uint32_t max_num_batched_tokens = 8192;
  uint32_t max_model_len = 131072;
  bool enable_prefix_caching = true;
  std::string hash_seed = "0";       // like PYTHONHASHSEED: NONE_HASH = hash(seed)
  uint64_t random_seed = 1;          // speculative acceptance draws (deterministic)
  // A hybrid layout (--hybrid-mamba): KV cache group 0 is full attention, group 1 a mamba group
  // in vLLM's "align" prefix-caching mode with the same block size (docs/sim.md §2.1).
  bool hybrid_mamba = false;
  // --delay-cache-blocks: newly full blocks enter the prefix cache at the end of the step that
  // computes them (vLLM's delay_cache_blocks, as with an asynchronous KV load), not when they
  // are allocated; requests admitted in the same step then compute, and cache, their own copies.
  bool delay_cache_blocks = false;
  // --cpu-offload-blocks: a CPU offload tier of this many blocks (vLLM's OffloadingConnector with
  // the CPU spec: sim/engine/cpu_tier.h); 0 = none. Needs prefix caching; not with hybrid_mamba.
  uint32_t cpu_offload_blocks = 0;
  // LoRA (--max-loras; 1 when --lora-modules is given without it, as vLLM's --enable-lora): the
  // adapters the running batch may use at once. A waiting request of another adapter while
  // max_loras adapters run is skipped (keeps its place) until one of them drains. 0 = no LoRA.
  uint32_t max_loras = 0;
  // A KV connector (--kv-role, docs/sim.md §8.4): requests may carry kv_transfer_params
  // (KvTransfer below), and every admission is also a query of the connector (vLLM's
  // external_prefix_cache_* counters). `kv_load_recompute`: vLLM's kv_load_failure_policy
  // "recompute" (a failed pull computes the prompt locally) instead of its default "fail".
  bool kv_connector = false;
  bool kv_load_recompute = false;
  TimingModel timing;
};

// Named, documented presets (calibration table in docs/sim.md).
std::optional<EngineConfig> preset(const std::string& name);
std::vector<std::string> preset_names();

// kError: vLLM's FINISHED_ERROR (a failed KV pull under kv_load_failure_policy "fail"; the API
// answers 500 "Internal server error").
enum class FinishReason { kNone, kStop, kLength, kAbort, kError };

// What a request's kv_transfer_params ask of vLLM's NixlConnector (pull mode), engine-side:
// kRemoteDecode (do_remote_decode, the prefill leg): at its finish the request's blocks are held
// for a consumer to pull instead of being freed (request_finished's delay_free_blocks);
// kRemotePrefill (do_remote_prefill, the decode leg): at admission the prompt beyond the local
// prefix hit is loaded from the producer instead of computed (get_num_new_matched_tokens,
// load_kv_async); the owner performs the pull (StepResult::kv_loads) and reports its end
// (Engine::finish_kv_load).
enum class KvTransfer { kNone, kRemoteDecode, kRemotePrefill };

// What happened to one request during a step.
struct RequestOutput {
  uint64_t id = 0;
  uint32_t new_tokens = 0;            // tokens generated this step (0 while prefilling)
  bool prefill_done = false;          // the prompt is fully computed (first token follows)
  uint32_t cached_tokens = 0;         // prefix-cache hit at scheduling time (set once, with the first output;
                                      // the same value in every later output of the request):
                                      // the GPU hit plus what the CPU tier loaded, as vLLM counts
                                      // num_computed_tokens (local + external)
  // vLLM 0.32's num_cache_creation_tokens (PrefillStats.finalize at the request's first output):
  // prompt tokens in the request's cached blocks then, minus cached_tokens. Set with the first
  // output (new tokens or a finish) and repeated in every later one; 0 before.
  uint32_t created_cache_tokens = 0;
  FinishReason finish = FinishReason::kNone;
  // A KvTransfer::kRemoteDecode request, in its finishing output (length or stop): its blocks
  // stay allocated (held) until Engine::release_held — vLLM's remote_block_ids and
  // remote_num_tokens (the computed tokens, prompt + output - 1).
  bool held = false;
  std::vector<uint32_t> held_blocks;
  uint32_t held_tokens = 0;
};

// A KvTransfer::kRemotePrefill request admitted this step: its blocks are allocated and it
// waits (vLLM's WAITING_FOR_REMOTE_KVS) until the owner has pulled `external_tokens` tokens of
// KV and calls Engine::finish_kv_load.
struct KvLoad {
  uint64_t id = 0;
  uint32_t local_tokens = 0;     // the local prefix hit (not pulled)
  uint32_t external_tokens = 0;  // prompt - local_tokens: pulled from the producer
};

struct StepResult {
  double duration_s = 0;              // virtual time this step takes
  std::vector<RequestOutput> outputs;
  uint32_t scheduled_tokens = 0;
  uint32_t running = 0;
  std::vector<KvLoad> kv_loads;       // pulls to start (KvTransfer::kRemotePrefill admissions)
};

struct EngineStats {
  uint32_t running = 0;
  uint32_t waiting = 0;
  double kv_cache_usage = 0;           // used blocks / total blocks
  uint64_t prefix_cache_queries = 0;   // tokens
  uint64_t prefix_cache_hits = 0;      // tokens
  uint64_t prompt_tokens = 0;
  uint64_t generation_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::vector<uint64_t> spec_accepted_per_pos;
  uint32_t num_gpu_blocks = 0, block_size = 0, free_blocks = 0, cached_blocks = 0;
  uint32_t cpu_offload_blocks = 0, cpu_cached_blocks = 0;  // the CPU tier's capacity and content
  uint64_t cpu_loaded_tokens = 0;  // prompt tokens loaded back from the CPU tier
  // With a KV connector: its queries (tokens beyond the local hit) and hits (tokens loaded), as
  // vllm:external_prefix_cache_*; requests holding blocks for a pull and those blocks; requests
  // waiting for their pull (counted in `waiting` too, as vLLM's waiting queue holds them).
  uint64_t external_prefix_cache_queries = 0, external_prefix_cache_hits = 0;
  uint32_t held_requests = 0, held_blocks = 0, loading = 0;
  // With max_loras: the adapters with running or waiting requests (running ones first). vLLM
  // 0.32 names every such adapter in both running_lora_adapters and waiting_lora_adapters of
  // vllm:lora_requests_info (LoRARequestStates counts each, zeros included).
  std::vector<std::string> loras;
};

class Engine {
 public:
  Engine(EngineConfig config, KvEventSink* sink);  // sink may be null
  ~Engine();

  // Queues a request, cached in namespace `ns` (its LoRA adapter and cache_salt). Returns false
  // (and queues nothing) when prompt + max_tokens exceeds max_model_len or the prompt is empty.
  bool add_request(uint64_t id, std::vector<uint32_t> prompt, uint32_t max_tokens, CacheNamespace ns = {},
                   KvTransfer kv = KvTransfer::kNone);
  void abort(uint64_t id);             // frees its blocks (cached blocks stay cached); reported once,
                                       // with FinishReason::kAbort, in the next step's outputs
  bool idle() const;                   // nothing waiting or running (a request waiting for
                                       // its pull is not stepped: finish_kv_load wakes it)

  // The pull of a StepResult::kv_loads entry ended. ok: its full prompt blocks enter the prefix
  // cache (one BlockStored, with the next step's events, as vLLM's _update_waiting_for_remote_kv)
  // and it computes only its last prompt token. Failed: with kv_load_recompute it computes its
  // whole prompt locally; else it ends at once with FinishReason::kError, returned here (vLLM's
  // "fail" policy). Unknown ids (aborted meanwhile) are ignored.
  std::optional<RequestOutput> finish_kv_load(uint64_t id, bool ok);
  // Frees the blocks a KvTransfer::kRemoteDecode request held after its finish (pulled, or its
  // lease expired). False when `id` holds nothing.
  bool release_held(uint64_t id);

  // Runs one scheduler step (schedule, "execute", advance, free finished, emit events).
  // `now_wall_s` stamps the event batch.
  StepResult step(double now_wall_s);

  // Clears the prefix cache (POST /reset_prefix_cache): AllBlocksCleared. Fails (false) while
  // requests are running, as vLLM does.
  bool reset_prefix_cache(double now_wall_s);

  // Sleep mode (POST /sleep, level 1 or 2, mode=abort): every request ends aborted (returned
  // here, not in a later step's outputs) and the prefix cache is reset (AllBlocksCleared), which
  // frees every block. The caller stops stepping until it wakes; requests added meanwhile wait.
  std::vector<RequestOutput> sleep(double now_wall_s);

  // Oracle: how many leading tokens of `tokens` (in namespace `ns`) a request could reuse from
  // the prefix cache (full blocks; for a hybrid layout, up to the last block whose mamba state
  // is cached too).
  uint32_t resident_prefix_tokens(const std::vector<uint32_t>& tokens, const CacheNamespace& ns = {}) const;

  EngineStats stats() const;
  const EngineConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ramjet::sim
