// observe/journal: the routing decision journal (RJ_ROUTE_JOURNAL). One JSON object per line
// (JSONL): a `start` record right after each routing decision with every term the policy saw,
// and a `finish` record when the request ends, joined by `seq`. tools/route_replay recomputes
// the decisions offline under other parameters. Schema and privacy rules: docs/journal.md.
//
// Privacy: a record carries closed-set labels, ordinals, sizes, counts and timings only. It
// never carries prompts, text, request ids, fingerprints, token ids, hosts or URLs; the types
// below hold nothing from which such a value could be written.
//
// The data plane never waits for the disk: start()/finish() format the line on the calling
// thread and append it to a bounded in-memory buffer under a short lock; a writer thread writes
// the buffer every flush_interval. When the buffer is full the record is dropped and counted.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "metrics/metrics.h"
#include "request/route/policy.h"
#include "request/route/router.h"
#include "request/stream/observer.h"

namespace ramjet::observe {

inline constexpr int kJournalVersion = 18;

struct JournalConfig {
  bool enabled = false;                 // RJ_ROUTE_JOURNAL (the caller skips open() when false)
  std::string path;                     // RJ_ROUTE_JOURNAL_FILE; "" = stderr
  size_t max_pending_bytes = 8u << 20;  // records beyond this wait-to-write backlog are dropped
  std::chrono::milliseconds flush_interval{200};
};

// One per routed request, written right after the decision. endpoint and request_bytes come
// from `request` (RouteRequest::body_bytes is the post-shim body length).
struct JournalStart {
  uint64_t seq = 0;  // Journal::next_seq()
  int64_t unix_ms = 0;
  bool cold = false;        // new prefix: the dispatched engine leads single-flight
  // The request's output limit (PreparedRequest::max_output_tokens), journalled as a bucket only:
  // unset|invalid|1_64|65_256|257_1024|1025_4096|4097_plus (0 = invalid). The preference it
  // produced is journalled exactly as wanted_profile (from `request`).
  std::optional<uint64_t> max_output_tokens;
  const route::Decision& decision;
  route::RouteConfig config;  // the weights this decision was made with
  route::RouteRequest request;  // endpoint, body_bytes, wanted profile
  std::string_view policy;      // Policy::name(): prefix|load|round_robin
  bool phase_aware_load = false;
  bool single_flight = false;  // RJ_ROUTE_SINGLE_FLIGHT was on
  // Exact routing (route::Routed): how the exact source answered (kNone: no exact source, or it
  // was not asked) and, when it looked the prompt up, each engine's predicted resident prompt
  // tokens by ordinal (empty otherwise), and which engines had a fingerprint estimate instead
  // (exact_partial). Only the chosen engine's count is journalled (null when it was estimated).
  route::ExactOutcome exact = route::ExactOutcome::kNone;
  std::span<const uint32_t> exact_tokens = {};
  std::span<const cache::TierBlocks> exact_tiers = {};  // exact_tokens by tier (written when some are offloaded)
  std::span<const route::ExactStamp> exact_stamps = {};
  // Session affinity (route::Routed::session): written as session_affinity when enabled.
  const route::SessionNote* session = nullptr;
  const route::SessionAffinityConfig* session_config = nullptr;
};

// One per routed request, when its response (or its failure) is over.
struct JournalFinish {
  uint64_t seq = 0;
  int64_t unix_ms = 0;
  // complete|client_disconnect|upstream_read_error|upstream_error|no_upstream
  std::string_view result;
  std::optional<size_t> upstream;   // the ordinal that served (or failed) last
  uint32_t request_load_units = 0;  // units actually reserved on `upstream`
  unsigned status = 0;              // HTTP status sent to the client (0: none)
  double duration_ms = 0;
  std::optional<double> first_byte_ms, ttft_ms;
  std::optional<double> queue_ms;  // waited in the waiting room (RJ_ADMISSION_*); null: did not wait
  // What it waited for: "room" (saturated engines) or "wake" (a parked engine waking); "" with no queue_ms.
  std::string_view queue_reason;
  std::string_view priority_class = "interactive";  // interactive|batch (RJ_ADMISSION_BATCH_KEYS, header)
  uint64_t response_bytes = 0;
  std::optional<uint64_t> prompt_tokens, cached_tokens, completion_tokens;
  // Prefill/decode disaggregation (RJ_UPSTREAM_ROLE): how it was served ("" : not a disaggregated
  // fleet's inference request), its prefill engine and leg time (two legs), the prompt tokens its
  // decode engine would have computed (estimated).
  std::string_view disagg;
  std::optional<size_t> prefill_upstream;
  std::optional<double> prefill_ms;
  uint64_t uncached_tokens = 0;
};

// The output-limit bucket label for a requested limit (docs/journal.md).
std::string_view output_limit_bucket(std::optional<uint64_t> max_output_tokens);

// The JSON lines (with the trailing '\n'); exposed for tests and tools.
std::string format_start(const JournalStart& s);
std::string format_finish(const JournalFinish& f);

// The families Journal::write_metrics exports (names, labels, help; docs/metrics.md).
std::span<const metrics::Family> journal_families();

class Journal {
 public:
  // Opens the sink (the file in append mode, created 0640 when missing; stderr for an empty path)
  // and starts the writer thread. nullptr and *error set when the file cannot be opened.
  static std::unique_ptr<Journal> open(const JournalConfig& config, std::string* error);
  ~Journal();  // flushes what is buffered and joins the writer thread
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // The records' numbering: one per routed exchange (JournalObserver), 1, 2, ...
  uint64_t next_seq() { return seq_.fetch_add(1, std::memory_order_relaxed) + 1; }  // 1, 2, ...

  // Thread-safe; never blocks on I/O.
  void start(const JournalStart& s) { append(format_start(s)); }
  void finish(const JournalFinish& f) { append(format_finish(f)); }
  // Writes what is buffered now, on the calling thread (tests, shutdown).
  void flush();

  struct Stats {
    uint64_t records = 0;       // records accepted into the buffer
    uint64_t dropped = 0;       // records dropped because the buffer was full
    uint64_t write_errors = 0;  // failed writes to the sink (their records are lost)
  };
  Stats stats() const;
  // ramjet_journal_records_total, ramjet_journal_dropped_total, ramjet_journal_write_errors_total
  void write_metrics(metrics::Exposition& out) const;

 private:
  Journal(const JournalConfig& config, int fd);
  void append(std::string&& line);
  void run();
  void write_out(const std::string& batch);

  const JournalConfig config_;
  const int fd_;  // -1 = stderr (through stdio, so lines do not tear against log lines)
  std::atomic<uint64_t> seq_{0};

  mutable std::mutex mu_;  // guards pending_, kicked_, stop_
  std::condition_variable cv_;
  std::string pending_;
  bool kicked_ = false;  // the writer was woken early for a half-full buffer
  bool stop_ = false;

  std::mutex write_mu_;  // one batch at a time, in order (writer thread vs flush())
  metrics::Counter records_, dropped_, write_errors_;
  std::thread writer_;
};

// The journal as an exchange observer: a start record at each decision, a finish record when
// the exchange is over.
class JournalObserver final : public request::ExchangeObserver {
 public:
  // `router` gives the policy's name and parameters; `phase_aware_load` is RJ_ROUTE_PHASE_AWARE_LOAD.
  JournalObserver(Journal& journal, const route::Router& router, bool phase_aware_load)
      : ExchangeObserver(request::kDecided | request::kFinished),
        journal_(journal),
        router_(router),
        phase_aware_load_(phase_aware_load) {}
  void decided(request::ExchangeRecord& x) override;
  void finished(request::ExchangeRecord& x) override;

 private:
  Journal& journal_;
  const route::Router& router_;
  bool phase_aware_load_;
};

}  // namespace ramjet::observe
