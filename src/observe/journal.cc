#include "observe/journal.h"

#include <array>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "common/log.h"
#include "request/ingress/endpoint.h"
#include "request/route/terms.h"

namespace ramjet::observe {
namespace {

// A small JSON object writer: keys are our own literals, string values are closed-set labels
// (escaped anyway).
class Line {
 public:
  Line() { out_.reserve(512); }
  void open() {
    out_ += '{';
    first_ = true;
  }
  void close() {
    out_ += '}';
    first_ = false;
  }
  void key(std::string_view k) {
    if (!first_) out_ += ',';
    first_ = false;
    out_ += '"';
    out_ += k;
    out_ += "\":";
  }
  void str(std::string_view k, std::string_view v) {
    key(k);
    out_ += '"';
    out_ += log::json_escape(v);
    out_ += '"';
  }
  void u64(std::string_view k, uint64_t v) {
    key(k);
    num(v);
  }
  void i64(std::string_view k, int64_t v) {
    key(k);
    num(v);
  }
  void boolean(std::string_view k, bool v) {
    key(k);
    out_ += v ? "true" : "false";
  }
  void null(std::string_view k) {
    key(k);
    out_ += "null";
  }
  template <typename T>
  void opt_u64(std::string_view k, const std::optional<T>& v) {
    if (v)
      u64(k, static_cast<uint64_t>(*v));
    else
      null(k);
  }
  // Shortest representation that reads back as the same double (alpha, scores: replay needs
  // them exact). Non-finite values are not JSON: null.
  void exact(std::string_view k, double v) {
    key(k);
    if (!std::isfinite(v)) {
      out_ += "null";
      return;
    }
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out_.append(buf, r.ptr);
  }
  // One candidate term (request/route/terms.h), by its member type.
  void term(std::string_view k, bool v) { boolean(k, v); }
  void term(std::string_view k, uint32_t v) { u64(k, v); }
  void term(std::string_view k, size_t v) { u64(k, v); }
  void term(std::string_view k, int64_t v) { i64(k, v); }
  void term(std::string_view k, double v) { exact(k, v); }
  void term(std::string_view k, route::Profile v) { str(k, route::profile_label(v)); }
  void term(std::string_view k, route::AdapterSlot v) { str(k, route::adapter_slot_label(v)); }
  // Milliseconds: fixed, three decimals (microsecond resolution).
  void ms(std::string_view k, std::optional<double> v) {
    key(k);
    if (!v || !std::isfinite(*v)) {
      out_ += "null";
      return;
    }
    char buf[48];
    auto r = std::to_chars(buf, buf + sizeof buf, *v, std::chars_format::fixed, 3);
    if (r.ec != std::errc()) {
      out_ += "null";
      return;
    }
    out_.append(buf, r.ptr);
  }
  void array(std::string_view k) {
    key(k);
    out_ += '[';
    first_ = true;
  }
  void end_array() {
    out_ += ']';
    first_ = false;
  }
  void element() {
    if (!first_) out_ += ',';
    first_ = true;
    out_ += '{';
  }
  std::string take() {
    out_ += '\n';
    return std::move(out_);
  }

 private:
  template <typename T>
  void num(T v) {
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out_.append(buf, r.ptr);
  }
  std::string out_;
  bool first_ = true;
};

}  // namespace

std::string_view output_limit_bucket(std::optional<uint64_t> n) {
  if (!n) return "unset";
  if (*n == 0) return "invalid";
  if (*n <= 64) return "1_64";
  if (*n <= 256) return "65_256";
  if (*n <= 1024) return "257_1024";
  if (*n <= 4096) return "1025_4096";
  return "4097_plus";
}

std::string format_start(const JournalStart& s) {
  const route::Decision& d = s.decision;
  const route::RouteConfig& c = s.config;
  Line l;
  l.open();
  l.u64("v", kJournalVersion);
  l.str("event", "start");
  l.u64("seq", s.seq);
  l.i64("unix_ms", s.unix_ms);
  l.str("endpoint", request::endpoint_label(s.request.endpoint));
  l.str("policy", s.policy);
  l.u64("request_bytes", s.request.body_bytes);
  l.u64("total_blocks", s.request.total_blocks);
  if (d.ranked.empty())
    l.null("chosen");
  else
    l.u64("chosen", d.ranked.front().ordinal);
  l.str("outcome", route::outcome_label(d.outcome));
  l.u64("rotation", d.rotation);
  l.u64("routers", d.routers);
  l.u64("spread_place", d.spread_place);
  l.u64("spread_tie", d.spread_tie);
  l.exact("alpha", c.alpha);
  l.u64("max_affinity_blocks", c.max_overlap_blocks);
  l.str("credit_basis", c.relative_credit ? "relative" : "absolute");
  l.u64("chunk_bytes", c.chunk_bytes);
  l.u64("load_unit_bytes", c.load_unit_bytes);
  l.u64("max_load_units", c.max_load_units);
  l.u64("short_max_tokens", c.short_max_tokens);
  l.u64("adapter_load_units", c.adapter_load_units);
  l.boolean("phase_aware_load", s.phase_aware_load);
  l.boolean("single_flight", s.single_flight);
  l.boolean("cold", s.cold);
  l.boolean("fail_open", d.fail_open);
  l.str("wanted_profile", route::profile_label(s.request.wanted));
  l.str("output_limit", output_limit_bucket(s.max_output_tokens));
  l.str("score_tie_break", "overlap");
  // Exact routing: its outcome label and the tokens it predicted the winner holds (a count).
  if (s.exact == route::ExactOutcome::kNone)
    l.null("exact_outcome");
  else
    l.str("exact_outcome", route::label(s.exact));
  if (!d.ranked.empty() && d.ranked.front().ordinal < s.exact_tokens.size() &&
      !(d.ranked.front().ordinal < s.exact_stamps.size() && s.exact_stamps[d.ranked.front().ordinal].estimated))
    l.u64("predicted_cached_tokens", s.exact_tokens[d.ranked.front().ordinal]);
  else
    l.null("predicted_cached_tokens");
  // The same by tier, when the chosen engine holds some of it in an offload tier (counts only).
  if (!d.ranked.empty() && d.ranked.front().ordinal < s.exact_tiers.size()) {
    const cache::TierBlocks& t = s.exact_tiers[d.ranked.front().ordinal];
    if (t.by_tier[1] + t.by_tier[2] > 0) {
      l.key("predicted_tier_tokens");
      l.open();
      for (size_t i = 0; i < cache::kTiers; ++i) l.u64(cache::label(static_cast<cache::Tier>(i)), t.by_tier[i]);
      l.close();
    }
  }
  if (s.session && s.session->enabled && s.session_config) {
    // Ordinals and a label only: never the session or its hash.
    const route::SessionNote& n = *s.session;
    l.key("session_affinity");
    l.open();
    l.u64("policy_version", route::kSessionAffinityPolicyVersion);
    l.str("mode", route::session_mode_label(s.session_config->mode));
    l.u64("bonus_blocks", s.session_config->bonus_blocks);
    l.i64("max_load_delta", s.session_config->max_load_delta);
    l.str("outcome", route::session_outcome_label(n.outcome));
    l.opt_u64("primary", n.primary);
    l.opt_u64("secondary", n.secondary);
    l.opt_u64("target", n.target);
    l.close();
  }
  l.array("candidates");
  for (size_t rank = 0; rank < d.ranked.size(); ++rank) {
    const route::CandidateTerms& t = d.ranked[rank];
    l.element();
    route::for_each_term([&](const auto& row) {
      l.term(row.journal, t.*row.member);
      // The rank follows the ordinal (the one size_t row), as the journal has always had it.
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(row)>, route::Term<size_t>>) l.u64("rank", rank);
    });
    l.close();
  }
  l.end_array();
  l.close();
  return l.take();
}

std::string format_finish(const JournalFinish& f) {
  Line l;
  l.open();
  l.u64("v", kJournalVersion);
  l.str("event", "finish");
  l.u64("seq", f.seq);
  l.i64("unix_ms", f.unix_ms);
  l.str("result", f.result);
  l.opt_u64("upstream", f.upstream);
  l.u64("request_load_units", f.request_load_units);
  l.u64("status", f.status);
  l.ms("duration_ms", f.duration_ms);
  l.ms("first_byte_ms", f.first_byte_ms);
  l.ms("ttft_ms", f.ttft_ms);
  l.ms("queue_ms", f.queue_ms);
  if (f.queue_reason.empty()) {
    l.null("queue_reason");
  } else {
    l.str("queue_reason", f.queue_reason);
  }
  l.str("class", f.priority_class);
  l.u64("response_bytes", f.response_bytes);
  l.opt_u64("prompt_tokens", f.prompt_tokens);
  l.opt_u64("cached_tokens", f.cached_tokens);
  l.opt_u64("completion_tokens", f.completion_tokens);
  if (!f.disagg.empty()) {
    l.key("disagg");
    l.open();
    l.str("choice", f.disagg);
    l.opt_u64("prefill_upstream", f.prefill_upstream);
    l.ms("prefill_ms", f.prefill_ms);
    l.u64("uncached_tokens", f.uncached_tokens);
    l.close();
  }
  l.close();
  return l.take();
}

std::unique_ptr<Journal> Journal::open(const JournalConfig& config, std::string* error) {
  int fd = -1;
  if (!config.path.empty()) {
    fd = ::open(config.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0) {
      if (error)
        *error = "cannot open route journal file " + config.path + ": " + std::strerror(errno);
      return nullptr;
    }
  }
  return std::unique_ptr<Journal>(new Journal(config, fd));
}

Journal::Journal(const JournalConfig& config, int fd) : config_(config), fd_(fd) {
  writer_ = std::thread([this] { run(); });
}

Journal::~Journal() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();
  flush();
  if (fd_ >= 0) ::close(fd_);
}

void Journal::append(std::string&& line) {
  bool kick = false;
  {
    std::lock_guard lock(mu_);
    if (pending_.size() + line.size() > config_.max_pending_bytes) {
      dropped_.inc();
      return;
    }
    if (pending_.empty() && pending_.capacity() < line.size() * 4) pending_.reserve(64 * 1024);
    pending_ += line;
    records_.inc();
    // Wake the writer early once the backlog reaches half the bound, so a burst is written
    // before it has to be dropped.
    if (!kicked_ && pending_.size() * 2 >= config_.max_pending_bytes) kick = kicked_ = true;
  }
  if (kick) cv_.notify_one();
}

void Journal::run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, config_.flush_interval, [this] { return stop_ || kicked_; });
    if (stop_) break;
    lock.unlock();
    flush();
    lock.lock();
  }
}

void Journal::flush() {
  std::lock_guard write_lock(write_mu_);
  std::string batch;
  {
    std::lock_guard lock(mu_);
    batch.swap(pending_);
    kicked_ = false;
  }
  if (!batch.empty()) write_out(batch);
}

void Journal::write_out(const std::string& batch) {
  if (fd_ < 0) {
    // One fwrite per line: stdio's stream lock keeps each line whole against the logger's
    // lines on the same stream.
    size_t pos = 0;
    while (pos < batch.size()) {
      size_t end = batch.find('\n', pos);
      end = end == std::string::npos ? batch.size() : end + 1;
      if (std::fwrite(batch.data() + pos, 1, end - pos, stderr) != end - pos) write_errors_.inc();
      pos = end;
    }
    std::fflush(stderr);
    return;
  }
  const char* p = batch.data();
  size_t left = batch.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      write_errors_.inc();
      return;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

Journal::Stats Journal::stats() const {
  return Stats{records_.get(), dropped_.get(), write_errors_.get()};
}

namespace {

constexpr std::array<metrics::Family, 3> kJournalFamilies = {{
    {"ramjet_journal_records_total", metrics::MetricKind::kCounter, "", "Route journal records accepted for writing."},
    {"ramjet_journal_dropped_total", metrics::MetricKind::kCounter, "",
     "Route journal records dropped because the write backlog was full."},
    {"ramjet_journal_write_errors_total", metrics::MetricKind::kCounter, "", "Failed writes to the route journal sink."},
}};

}  // namespace

std::span<const metrics::Family> journal_families() { return kJournalFamilies; }

void Journal::write_metrics(metrics::Exposition& out) const {
  const metrics::Counter* values[] = {&records_, &dropped_, &write_errors_};  // in kJournalFamilies order
  for (size_t i = 0; i < kJournalFamilies.size(); ++i) {
    out.family(kJournalFamilies[i]);
    out.sample(kJournalFamilies[i].name, "", values[i]->get());
  }
}

namespace {

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void JournalObserver::decided(request::ExchangeRecord& x) {
  x.seq = journal_.next_seq();
  journal_.start(JournalStart{
      .seq = x.seq,
      .unix_ms = unix_ms_now(),
      .cold = x.routed->cold,
      .max_output_tokens = x.prep->max_output_tokens,
      .decision = x.routed->decision,
      .config = router_.config(),
      .request = x.routed->request,
      .policy = router_.policy()->name(),
      .phase_aware_load = phase_aware_load_,
      .single_flight = router_.single_flight_enabled(),
      .exact = x.routed->exact,
      .exact_tokens = x.routed->exact_tokens,
      .exact_tiers = x.routed->exact_tiers,
      .exact_stamps = x.routed->exact_stamps,
      .session = &x.routed->session,
      .session_config = &router_.session_affinity(),
  });
}

void JournalObserver::finished(request::ExchangeRecord& x) {
  auto ms_since_start = [&](int64_t at) -> std::optional<double> {
    if (at == 0) return std::nullopt;
    return static_cast<double>(at - x.start_ns) / 1e6;
  };
  JournalFinish f;
  f.seq = x.seq;
  f.unix_ms = unix_ms_now();
  f.result = x.result;
  f.upstream = x.upstream;
  f.request_load_units = x.units;
  f.status = x.status;
  f.duration_ms = static_cast<double>(x.end_ns - x.start_ns) / 1e6;
  f.first_byte_ms = ms_since_start(x.head_ns);
  f.ttft_ms = ms_since_start(x.first_token_ns);
  if (x.queued_ns > 0) {
    f.queue_ms = static_cast<double>(x.queued_ns) / 1e6;
    f.queue_reason = x.waited_for_wake ? "wake" : "room";
  }
  f.priority_class = x.batch ? "batch" : "interactive";
  f.response_bytes = x.response_bytes;
  if (x.accounted && x.usage_read) {
    f.prompt_tokens = x.usage_read->prompt_tokens;
    f.cached_tokens = x.usage_read->cached_tokens;
    f.completion_tokens = x.usage_read->completion_tokens;
  }
  if (x.disagg != request::DisaggChoice::kNone) {
    f.disagg = request::label(x.disagg);
    f.prefill_upstream = x.prefill_upstream;
    if (x.prefill_ns > 0) f.prefill_ms = static_cast<double>(x.prefill_ns) / 1e6;
    f.uncached_tokens = x.uncached_tokens;
  }
  journal_.finish(f);
}

}  // namespace ramjet::observe
