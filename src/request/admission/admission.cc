// request/admission/admission (see admission.h).
#include "request/admission/admission.h"

#include <algorithm>
#include <cmath>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace ramjet::request {

namespace asio = boost::asio;

namespace {

constexpr std::array kFamilies = {
    metrics::Family{"ramjet_admission_requests_total", metrics::MetricKind::kCounter, "class,outcome",
                    "Inference requests through the waiting room (RJ_ADMISSION_ENGINE_MAX_INFLIGHT or "
                    "RJ_ADMISSION_ENGINE_MAX_WAITING set) by priority class (interactive, batch) and outcome: "
                    "immediate (room at once), admitted (after waiting), shed_full (the queue was at "
                    "RJ_ADMISSION_QUEUE_MAX or RJ_ADMISSION_QUEUE_MAX_BYTES: 429), shed_timeout (waited "
                    "RJ_ADMISSION_QUEUE_TIMEOUT_MS: 429), client_gone (left while waiting; no engine saw it), "
                    "burst (no regular room, placed at once in a burst slot, RJ_ADMISSION_ENGINE_BURST, for a "
                    "client under its fair share)."},
    metrics::Family{"ramjet_admission_queue_depth", metrics::MetricKind::kGauge, "class",
                    "Requests waiting for room, by priority class."},
    metrics::Family{"ramjet_admission_wait_seconds", metrics::MetricKind::kHistogram, "class",
                    "How long admitted requests waited for room (immediate ones are not observed)."},
    metrics::Family{"ramjet_admission_client_tokens_total", metrics::MetricKind::kCounter, "client",
                    "Estimated tokens (prompt bytes / 4 plus the requested output) of the requests admitted, by "
                    "client: the API key's name (RJ_API_KEYS_FILE), \"other\" for unnamed keys and clients "
                    "without a key. The waiting room shares by these tokens between clients of a class."},
};

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr double kRateHalfLifeMs = 10000;

}  // namespace

std::string_view to_string(AdmissionClass c) { return c == AdmissionClass::kBatch ? "batch" : "interactive"; }

std::string_view to_string(AdmissionOutcome o) {
  switch (o) {
    case AdmissionOutcome::kImmediate: return "immediate";
    case AdmissionOutcome::kAdmitted: return "admitted";
    case AdmissionOutcome::kShedFull: return "shed_full";
    case AdmissionOutcome::kShedTimeout: return "shed_timeout";
    case AdmissionOutcome::kClientGone: return "client_gone";
    case AdmissionOutcome::kBurst: return "burst";
    case AdmissionOutcome::kCount: break;
  }
  return "immediate";
}

std::span<const metrics::Family> admission_families() { return kFamilies; }

struct Admission::Waiter {
  explicit Waiter(asio::any_io_executor ex) : timer(ex) {}
  asio::steady_timer timer;
  std::string pool;
  AdmissionClass cls = AdmissionClass::kInteractive;
  uint64_t bytes = 0;
  bool admitted = false;  // under mu_
};

Admission::Ticket& Admission::Ticket::operator=(Ticket&& o) noexcept {
  if (this != &o) {
    release();
    owner_ = o.owner_;
    pool_ = std::move(o.pool_);
    burst_ = o.burst_;
    waited_ns_ = o.waited_ns_;
    o.owner_ = nullptr;
  }
  return *this;
}

void Admission::Ticket::release() {
  if (Admission* a = std::exchange(owner_, nullptr)) a->released(pool_, burst_);
}

Admission::Admission(AdmissionConfig config)
    : config_(std::move(config)),
      wait_{metrics::Histogram(metrics::exponential_buckets(0.001, 2, 16)),
            metrics::Histogram(metrics::exponential_buckets(0.001, 2, 16))},
      client_tokens_(config_.client_labels.size() + 1) {}

Admission::~Admission() = default;

void Admission::released(const std::string& pool, bool burst) {
  std::lock_guard lock(mu_);
  const auto it = pools_.find(pool);
  if (it == pools_.end()) return;
  uint64_t& pending = burst ? it->second.burst_pending : it->second.pending;
  if (pending > 0) --pending;
  grant(it->second);
}

void Admission::notify() {
  std::lock_guard lock(mu_);
  for (auto& [key, p] : pools_) grant(p);
}

void Admission::grant(Pool& p) {
  while (!p.queue.empty() && p.room && p.room() > p.pending) {
    const uint64_t id = *p.queue.pop();
    const auto it = waiters_.find(id);
    if (it == waiters_.end()) continue;
    std::shared_ptr<Waiter> w = it->second;
    w->admitted = true;
    ++p.pending;
    forget(id, *w);
    // Wakes it on its own thread (a cancel posted there runs after it is suspended on the timer).
    asio::post(w->timer.get_executor(), [w] { w->timer.cancel(); });
  }
}

void Admission::forget(uint64_t id, const Waiter& w) {
  waiters_.erase(id);
  queued_bytes_ -= std::min(queued_bytes_, w.bytes);
  --depth_[static_cast<size_t>(w.cls)];
}

asio::awaitable<AdmissionOutcome> Admission::admit(Request r, Room room, const bool& gone, Ticket& ticket) {
  const size_t cls = static_cast<size_t>(r.cls);
  const auto label = std::find(config_.client_labels.begin(), config_.client_labels.end(), r.label);
  metrics::Counter& tokens = client_tokens_[static_cast<size_t>(label - config_.client_labels.begin())];
  int64_t waited_ns = 0;  // kAdmitted's wait
  auto done = [&](AdmissionOutcome o) {
    outcomes_[cls][static_cast<size_t>(o)].inc();
    ticket.waited_ns_ = o == AdmissionOutcome::kAdmitted ? waited_ns : 0;
    if (o == AdmissionOutcome::kImmediate || o == AdmissionOutcome::kAdmitted || o == AdmissionOutcome::kBurst) {
      tokens.inc(r.cost);
      ticket.owner_ = this;
      ticket.pool_ = r.pool;
      ticket.burst_ = o == AdmissionOutcome::kBurst;
    }
    return o;
  };
  const asio::any_io_executor ex = co_await asio::this_coro::executor;
  std::shared_ptr<Waiter> w;
  uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    Pool& p = pools_[r.pool];
    p.room = room;
    if (p.queue.empty() && room() > p.pending) {
      ++p.pending;
      co_return done(AdmissionOutcome::kImmediate);
    }
    if (r.burst && r.burst() > p.burst_pending) {  // a client under its share: past the queue
      ++p.burst_pending;
      co_return done(AdmissionOutcome::kBurst);
    }
    if (waiters_.size() >= config_.max_queued || queued_bytes_ + r.bytes > config_.max_queued_bytes)
      co_return done(AdmissionOutcome::kShedFull);
    id = next_id_++;
    w = std::make_shared<Waiter>(ex);
    w->pool = r.pool;
    w->cls = r.cls;
    w->bytes = r.bytes;
    waiters_.emplace(id, w);
    queued_bytes_ += r.bytes;
    ++depth_[cls];
    p.queue.push(id, cls, r.client, r.cost, 1.0, r.deadline_ms);
  }
  // However this frame ends — a return below, or destroyed with its io context at shutdown — the
  // waiter leaves the queue (its timer must not outlive its io context inside waiters_).
  struct Leave {
    Admission& a;
    uint64_t id;
    ~Leave() {
      std::lock_guard lock(a.mu_);
      const auto it = a.waiters_.find(id);
      if (it == a.waiters_.end()) return;
      const std::shared_ptr<Waiter> w = it->second;
      a.pools_[w->pool].queue.remove(id);
      a.forget(id, *w);
    }
  } leave{*this, id};
  const auto began = std::chrono::steady_clock::now();
  const auto deadline = began + config_.max_wait;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    w->timer.expires_after(std::min<std::chrono::steady_clock::duration>(config_.poll, std::max(deadline - now, {})));
    boost::system::error_code ec;
    co_await w->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    std::lock_guard lock(mu_);
    Pool& p = pools_[r.pool];
    if (!w->admitted) grant(p);  // room the scrape freed wakes nobody: look again
    if (w->admitted) {
      if (gone) {  // admitted as it left: the place goes to the next one
        if (p.pending > 0) --p.pending;
        grant(p);
        co_return done(AdmissionOutcome::kClientGone);
      }
      const auto waited = std::chrono::steady_clock::now() - began;
      wait_[cls].observe(std::chrono::duration<double>(waited).count());
      waited_ns = std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count());
      const int64_t t = now_ms();
      rate_ = rate_ * std::exp2(-static_cast<double>(t - rate_at_ms_) / kRateHalfLifeMs) + 1;
      rate_at_ms_ = t;
      co_return done(AdmissionOutcome::kAdmitted);
    }
    if (gone || std::chrono::steady_clock::now() >= deadline) {
      p.queue.remove(id);
      forget(id, *w);
      co_return done(gone ? AdmissionOutcome::kClientGone : AdmissionOutcome::kShedTimeout);
    }
  }
}

size_t Admission::queued() const {
  std::lock_guard lock(mu_);
  return waiters_.size();
}

uint32_t Admission::retry_after_s() const {
  std::lock_guard lock(mu_);
  // Admissions per second over the last ~10 s (a decaying count: rate_ / (half-life / ln 2)).
  const double decayed = rate_ * std::exp2(-static_cast<double>(now_ms() - rate_at_ms_) / kRateHalfLifeMs);
  const double per_s = decayed / (kRateHalfLifeMs / 1000.0 / std::log(2.0));
  if (per_s <= 0.01) return static_cast<uint32_t>(std::clamp<int64_t>(config_.max_wait.count() / 1000, 1, 60));
  return static_cast<uint32_t>(std::clamp<double>(std::ceil(static_cast<double>(waiters_.size() + 1) / per_s), 1, 60));
}

void Admission::write_metrics(metrics::Exposition& out) const {
  const auto& F = kFamilies;
  out.family(F[0]);
  for (size_t c = 0; c < kAdmissionClassCount; ++c)
    for (size_t o = 0; o < static_cast<size_t>(AdmissionOutcome::kCount); ++o)
      out.sample(F[0].name,
                 "class=\"" + std::string(to_string(static_cast<AdmissionClass>(c))) + "\",outcome=\"" +
                     std::string(to_string(static_cast<AdmissionOutcome>(o))) + "\"",
                 outcomes_[c][o].get());
  std::array<int64_t, kAdmissionClassCount> depth{};
  {
    std::lock_guard lock(mu_);
    depth = depth_;
  }
  out.family(F[1]);
  for (size_t c = 0; c < kAdmissionClassCount; ++c)
    out.sample(F[1].name, "class=\"" + std::string(to_string(static_cast<AdmissionClass>(c))) + "\"", depth[c]);
  out.family(F[2]);
  for (size_t c = 0; c < kAdmissionClassCount; ++c)
    wait_[c].write(out, F[2].name, "class=\"" + std::string(to_string(static_cast<AdmissionClass>(c))) + "\"");
  out.family(F[3]);
  for (size_t i = 0; i < client_tokens_.size(); ++i)
    out.sample(F[3].name,
               "client=\"" +
                   metrics::escape_label_value(i < config_.client_labels.size() ? config_.client_labels[i] : "other") +
                   "\"",
               client_tokens_[i].get());
}

}  // namespace ramjet::request
