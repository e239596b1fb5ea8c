// loadgen/workload: what to send. Builds chat `messages` arrays (JSON text) deterministically
// from a seed: shared-prefix multi-turn sessions, unique prompts, and trace replays whose shared
// blocks follow the trace's hash_ids. Pure and thread-safe (one mutex for session state); when
// and where requests go is runner.*'s business.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trace.h"

namespace ramjet::bench {

struct WorkRequest {
  std::string messages;     // JSON array text
  uint32_t max_tokens = 0;  // 0: let the server decide
  uint64_t session = 0;     // shared-prefix: the conversation this turn belongs to
  uint32_t turn = 0;
  bool wants_answer = false;  // complete() needs the answer text
  double arrival_s = -1;      // trace replay: when to send, seconds after the step start
};

// --max-tokens: a fixed value or a list picked per request by a seeded hash of a stable key.
class MaxTokens {
 public:
  MaxTokens() = default;
  MaxTokens(std::vector<uint32_t> choices, uint64_t seed) : choices_(std::move(choices)), seed_(seed) {}
  uint32_t pick(uint64_t key) const;
  std::string describe() const;  // "128" or "128,1024"

 private:
  std::vector<uint32_t> choices_;
  uint64_t seed_ = 0;
};

class Workload {
 public:
  virtual ~Workload() = default;
  virtual std::string describe() const = 0;
  // Resets per-step state. `sessions` is the closed-loop concurrency (shared-prefix uses it when
  // --sessions is 0), 0 for open-loop and trace steps.
  virtual void begin_step(size_t sessions) { (void)sessions; }
  // The next request; nullopt when the workload is exhausted (end of a trace).
  virtual std::optional<WorkRequest> next() = 0;
  // The outcome of a request from next(). `answer` is the assistant text (when wants_answer).
  virtual void complete(const WorkRequest& req, bool ok, std::string_view answer) {
    (void)req, (void)ok, (void)answer;
  }
  // Trace replays are scheduled by timestamp rather than pulled with next().
  virtual const class TraceWorkload* as_trace() const { return nullptr; }
};

// The /v1/chat/completions body. `model_json` is the model name as a JSON string literal.
// Streaming asks for the usage chunk (stream_options.include_usage).
std::string chat_body(std::string_view model_json, const WorkRequest& req, bool stream,
                      bool ignore_eos);

// JSON text of a single-message array: [{"role":"user","content":"..."}].
std::string single_user_messages(std::string_view content);

struct SharedPrefixParams {
  uint32_t apps = 4;
  double prefix_kib = 24;
  uint32_t sessions = 0;  // 0: as many as the closed-loop concurrency (open loop: on demand)
  uint32_t turns = 4;
  uint32_t user_words = 48;
  MaxTokens max_tokens;
  uint64_t seed = 1;
};

// N apps, each with its own system prompt; sessions are spread over the apps (session k uses app
// k mod N). A session is a conversation of `turns` requests; each turn appends the previous
// answer and a new user message, so every prompt extends the previous one. A finished or failed
// session is replaced by a fresh one (new id), so conversations never repeat.
class SharedPrefixWorkload final : public Workload {
 public:
  explicit SharedPrefixWorkload(SharedPrefixParams p);
  std::string describe() const override;
  void begin_step(size_t sessions) override;
  std::optional<WorkRequest> next() override;
  void complete(const WorkRequest& req, bool ok, std::string_view answer) override;

  const std::string& system_prompt(uint32_t app) const { return system_prompts_[app]; }
  // The user message of turn `turn` of session `session` (exposed for tests).
  std::string user_message(uint64_t session, uint32_t turn) const;
  size_t live_sessions() const;

 private:
  struct Session {
    uint32_t app = 0;
    uint32_t turn = 0;
    std::string messages;  // the array so far, without the closing ']'
  };
  uint64_t new_session_locked();  // creates a session and returns its id (not queued)

  SharedPrefixParams p_;
  std::vector<std::string> system_prompts_;  // JSON-escaped once, they are reused every turn
  mutable std::mutex mu_;
  uint64_t next_id_ = 0;
  std::unordered_map<uint64_t, Session> sessions_;
  std::deque<uint64_t> idle_;
};

// Every request a fresh single-message prompt of `prompt_kib` KiB.
class UniqueWorkload final : public Workload {
 public:
  UniqueWorkload(double prompt_kib, MaxTokens max_tokens, uint64_t seed)
      : kib_(prompt_kib),
        bytes_(static_cast<size_t>(prompt_kib * 1024)),
        max_tokens_(std::move(max_tokens)),
        seed_(seed) {}
  std::string describe() const override;
  std::optional<WorkRequest> next() override;
  WorkRequest at(uint64_t index) const;  // request number `index` (next() counts from 0)

 private:
  double kib_;
  size_t bytes_;
  MaxTokens max_tokens_;
  uint64_t seed_;
  std::atomic<uint64_t> counter_{0};
};

struct TraceParams {
  uint32_t block_tokens = 512;  // words per hash id block (one word = one sim token)
  double time_scale = 1.0;      // arrival = (timestamp − first timestamp) × time_scale
  bool override_max_tokens = false;  // use --max-tokens instead of output_length
  MaxTokens max_tokens;
  uint64_t seed = 1;
};

// Replays a trace: request i's prompt is the concatenation of one text block per hash id (the same
// id always yields the same block; the last block is cut to fit input_length), then unique filler
// for any input_length beyond the blocks. max_tokens = output_length.
class TraceWorkload final : public Workload {
 public:
  TraceWorkload(std::vector<TraceEntry> entries, TraceParams p, std::string name);
  std::string describe() const override;
  void begin_step(size_t) override { cursor_.store(0); }
  const TraceWorkload* as_trace() const override { return this; }
  std::optional<WorkRequest> next() override;

  size_t size() const { return entries_.size(); }
  WorkRequest at(size_t i) const;
  std::string prompt_text(size_t i) const;  // the user content of request i (exposed for tests)

 private:
  std::vector<TraceEntry> entries_;
  TraceParams p_;
  std::string name_;
  std::atomic<size_t> cursor_{0};
};

}  // namespace ramjet::bench
