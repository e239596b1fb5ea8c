#include "upstream/parking.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "net/client.h"

namespace ramjet::upstream {

namespace asio = boost::asio;
using metrics::Family;
using metrics::MetricKind;

namespace {

enum class F { kState, kTransitions, kDecisions, kFleetIdle, kLoad, kActions, kActionSeconds, kCount };
constexpr std::array<Family, static_cast<size_t>(F::kCount)> kFamilies = {{
    {"ramjet_idle_drain_state", MetricKind::kGauge, "upstream",
     "The upstream's idle-drain state (RJ_IDLE_DRAIN_MODE): 0 warm, 1 draining (out of placement, "
     "awake), 2 drained (asleep, or parked without the sleep actuator), 3 waking, 4 failed (accepted "
     "/sleep but did not wake in RJ_IDLE_DRAIN_WAKE_TIMEOUT_SECONDS: fenced). In observe mode, the "
     "state it would be in."},
    {"ramjet_idle_drain_transitions_total", MetricKind::kCounter, "upstream,state",
     "Idle-drain state changes by the state entered: warm, draining, drained, waking, failed."},
    {"ramjet_idle_drain_decisions_total", MetricKind::kCounter, "action,reason",
     "Idle-drain decisions (made in observe mode too) by action: drain, sleep, wake, undrain; and "
     "reason: engine_idle, fleet_idle, grace_over, load (requests per warm engine past "
     "RJ_IDLE_DRAIN_RESUME_LOAD_PER_REPLICA), demand (a request waits for a pool with no warm engine)."},
    {"ramjet_idle_drain_fleet_idle", MetricKind::kGauge, "",
     "1 while no request reached any engine for RJ_IDLE_DRAIN_IDLE_AFTER_SECONDS."},
    {"ramjet_idle_drain_load_per_replica", MetricKind::kGauge, "",
     "The busiest model pool's requests in flight per warm engine, at the last decision."},
    {"ramjet_engine_park_actions_total", MetricKind::kCounter, "upstream,action,outcome",
     "Sleep-mode calls to the engine by action: sleep (POST /sleep, then GET /is_sleeping true), "
     "wake (POST /wake_up, then GET /is_sleeping false and GET /health 200); and outcome: ok, error "
     "(refused, an unexpected answer), timeout."},
    {"ramjet_engine_park_action_seconds", MetricKind::kHistogram, "action",
     "How long a successful sleep or wake took, from the call to the engine answering as asleep "
     "(sleep) or awake and healthy (wake: the wake latency a held request waits)."},
}};
const Family& fam(F f) { return kFamilies[static_cast<size_t>(f)]; }

enum class Outcome { kOk, kError, kTimeout };
constexpr std::array<std::string_view, 3> kOutcomes = {"ok", "error", "timeout"};
size_t call_slot(bool wake, Outcome o) { return (wake ? 3 : 0) + static_cast<size_t>(o); }

// {"is_sleeping": true|false} (vLLM's answer): nullopt when the body says neither.
std::optional<bool> read_is_sleeping(std::string_view body) {
  const size_t k = body.find("\"is_sleeping\"");
  if (k == std::string_view::npos) return std::nullopt;
  size_t p = body.find(':', k);
  if (p == std::string_view::npos) return std::nullopt;
  ++p;
  while (p < body.size() && (body[p] == ' ' || body[p] == '\t' || body[p] == '\n' || body[p] == '\r')) ++p;
  if (body.substr(p, 4) == "true") return true;
  if (body.substr(p, 5) == "false") return false;
  return std::nullopt;
}

constexpr size_t kMaxBody = 4096;

}  // namespace

std::span<const metrics::Family> parking_families() { return kFamilies; }

EngineParking::EngineParking(Fleet& fleet, asio::io_context& ctx, const Clock& clock, IdleDrainConfig config,
                             std::string bearer)
    : fleet_(fleet),
      ctx_(ctx),
      clock_(clock),
      config_(config),
      bearer_(std::move(bearer)),
      timer_(ctx),
      states_(std::make_unique<std::atomic<ParkState>[]>(fleet.size())),
      wanted_(std::make_unique<std::atomic<bool>[]>(fleet.size())),
      since_ms_(fleet.size(), 0),
      last_request_ms_(fleet.size(), 0),
      seen_dispatches_(fleet.size(), 0),
      busy_(fleet.size(), 0),
      parked_incarnation_(fleet.size(), 0),
      transitions_(fleet.size()),
      calls_(fleet.size()),
      wake_seconds_(metrics::exponential_buckets(0.05, 2, 14)),
      sleep_seconds_(metrics::exponential_buckets(0.05, 2, 14)) {
  const int64_t now = clock_.now_ms();
  last_drain_ms_ = now - config_.cooldown_ms;  // the first drain needs no cooldown
  last_request_ms_fleet_ = now;                // quiet is counted from the start
  for (size_t i = 0; i < fleet.size(); ++i) {
    states_[i].store(ParkState::kWarm);
    wanted_[i].store(false);
    since_ms_[i] = now;
    last_request_ms_[i] = now;
  }
}

EngineParking::~EngineParking() = default;

void EngineParking::start() { asio::co_spawn(ctx_, loop(), asio::detached); }

void EngineParking::stop() {
  stopped_ = true;
  asio::post(ctx_, [this] { timer_.cancel(); });
}

bool EngineParking::coming(size_t i) const {
  const ParkState s = state(i);
  return s == ParkState::kDraining || s == ParkState::kDrained || s == ParkState::kWaking;
}

void EngineParking::want(const EngineSet* pool) {
  bool any = false;
  for (size_t i = 0; i < fleet_.size(); ++i) {
    if ((pool == nullptr || pool->has(i)) && state(i) != ParkState::kWarm && !wanted_[i].exchange(true)) any = true;
  }
  if (any && !stopped_) asio::post(ctx_, [this] { timer_.cancel(); });  // decide now
}

asio::awaitable<void> EngineParking::loop() {
  while (!stopped_) {
    tick();
    timer_.expires_after(std::chrono::milliseconds(config_.interval_ms));
    boost::system::error_code ec;
    co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

void EngineParking::enter(size_t i, ParkState to) {
  const ParkState from = states_[i].exchange(to, std::memory_order_acq_rel);
  since_ms_[i] = clock_.now_ms();
  if (from == to) return;
  transitions_[i][static_cast<size_t>(to)].inc();
  spdlog::info("idle drain{}: upstream {} {} -> {}", config_.mode == DrainMode::kObserve ? " (observe)" : "", i,
               park_state_label(from), park_state_label(to));
}

void EngineParking::tick() {
  if (stopped_) return;
  const int64_t now = clock_.now_ms();
  std::vector<ParkFacts> facts(fleet_.size());
  for (size_t i = 0; i < fleet_.size(); ++i) {
    const Engine& e = fleet_.at(i);
    // Another engine holds the slot now (the parked one left, upstream/membership.h): it was
    // never put to sleep by us, so it starts warm.
    if (state(i) != ParkState::kWarm && !busy_[i] && fleet_.roster().incarnation(i) != parked_incarnation_[i]) {
      fleet_.set_parked(i, false);
      last_request_ms_[i] = now;
      enter(i, ParkState::kWarm);
    }
    const uint64_t d = e.dispatches();
    if (d != seen_dispatches_[i] || e.inflight() > 0) {
      seen_dispatches_[i] = d;
      last_request_ms_[i] = now;
      last_request_ms_fleet_ = now;
    }
    ParkFacts& f = facts[i];
    // An engine with data-parallel ranks is never parked: one /sleep puts every rank to sleep.
    f.member = e.member() && fleet_.roster().siblings(i).empty();
    f.healthy = f.member && e.state() == EngineState::kHealthy;
    f.pool = pool_of_ ? pool_of_(i) : 0;
    f.state = state(i);
    f.since_ms = since_ms_[i];
    f.last_request_ms = last_request_ms_[i];
    f.inflight = e.inflight();
    f.wanted = wanted_[i].load();
  }
  // A pool with a warm engine again wants nothing any more (its waiters go there).
  for (size_t i = 0; i < facts.size(); ++i) {
    if (!facts[i].wanted) continue;
    bool warm = false;
    for (const ParkFacts& g : facts) warm = warm || (g.pool == facts[i].pool && g.healthy && g.state == ParkState::kWarm);
    if (warm) {
      wanted_[i].store(false);
      facts[i].wanted = false;
    }
  }
  const ParkDecision d = decide_parking(config_, facts, now, last_drain_ms_, last_request_ms_fleet_);
  fleet_idle_.store(d.fleet_idle);
  load_milli_.store(static_cast<int64_t>(d.max_load_per_warm * 1000));
  for (const ParkStep& s : d.steps) apply(s);
}

void EngineParking::apply(const ParkStep& step) {
  const size_t i = step.engine;
  if (busy_[i]) return;  // a sleep or wake call is running: its end decides
  decisions_[static_cast<size_t>(step.action)][static_cast<size_t>(step.reason)].inc();
  spdlog::info("idle drain{}: {} upstream {} ({})", config_.mode == DrainMode::kObserve ? " (observe)" : "",
               park_action_label(step.action), i, park_reason_label(step.reason));
  const int64_t now = clock_.now_ms();
  const bool act = config_.mode == DrainMode::kDrain;
  const uint64_t incarnation = fleet_.roster().incarnation(i);
  switch (step.action) {
    case ParkAction::kDrain:
      parked_incarnation_[i] = incarnation;
      if (act) fleet_.set_parked(i, true);
      last_drain_ms_ = now;
      enter(i, ParkState::kDraining);
      break;
    case ParkAction::kUndrain:
      if (act) fleet_.set_parked(i, false);
      last_request_ms_[i] = now;
      enter(i, ParkState::kWarm);
      break;
    case ParkAction::kSleep:
      if (!act || !config_.sleep_actuator) {  // on paper, or parked awake (RJ_IDLE_DRAIN_ACTUATOR=off)
        enter(i, ParkState::kDrained);
        break;
      }
      busy_[i] = 1;
      asio::co_spawn(ctx_, put_to_sleep(i, incarnation), asio::detached);
      break;
    case ParkAction::kWake:
      if (!act || !config_.sleep_actuator) {
        if (act) fleet_.set_parked(i, false);
        last_request_ms_[i] = now;
        enter(i, ParkState::kWarm);
        break;
      }
      enter(i, ParkState::kWaking);
      busy_[i] = 1;
      asio::co_spawn(ctx_, wake(i, incarnation), asio::detached);
      break;
    case ParkAction::kCount: break;
  }
}

asio::awaitable<bool> EngineParking::until_sleeping(size_t i, bool sleeping, int64_t deadline_ms) {
  asio::steady_timer pause(ctx_);
  for (;;) {
    const std::shared_ptr<const net::Member> m = fleet_.member(i);
    const int64_t left = deadline_ms - clock_.now_ms();
    if (!m || left <= 0 || stopped_) co_return false;
    net::GetFailure failure = net::GetFailure::kNone;
    const auto res = co_await net::simple_get(m->url, "/is_sleeping", bearer_,
                                              std::chrono::milliseconds(std::min<int64_t>(left, 5000)), kMaxBody, failure);
    if (failure == net::GetFailure::kNone && res.status == 200 && read_is_sleeping(res.body) == sleeping) co_return true;
    pause.expires_after(std::chrono::milliseconds(100));
    boost::system::error_code ec;
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<void> EngineParking::put_to_sleep(size_t i, uint64_t incarnation) {
  const int64_t began = clock_.now_ms();
  const int64_t deadline = began + config_.wake_timeout_ms;
  Outcome outcome = Outcome::kError;
  if (const std::shared_ptr<const net::Member> m = fleet_.member(i); m && m->incarnation == incarnation) {
    net::GetFailure failure = net::GetFailure::kNone;
    // mode=abort as the Rust original: ramjet has nothing in flight there; requests other routers
    // sent end at once instead of holding the engine awake.
    const auto res = co_await net::simple_post(m->url, "/sleep?level=" + std::to_string(config_.sleep_level) + "&mode=abort",
                                               "", bearer_, std::chrono::milliseconds(config_.wake_timeout_ms),
                                               kMaxBody, failure);
    if (failure == net::GetFailure::kTimeout) outcome = Outcome::kTimeout;
    else if (failure == net::GetFailure::kNone && res.status == 200) {
      const bool asleep = co_await until_sleeping(i, true, deadline);
      outcome = asleep ? Outcome::kOk : Outcome::kTimeout;
    }
  }
  busy_[i] = 0;
  calls_[i][call_slot(false, outcome)].inc();
  if (stopped_) co_return;
  if (outcome == Outcome::kOk) {
    sleep_seconds_.observe(static_cast<double>(clock_.now_ms() - began) / 1000.0);
    enter(i, ParkState::kDrained);
    if (on_parked_) on_parked_(i);  // its KV cache is gone (vLLM resets the prefix cache to sleep)
    co_return;
  }
  // Not asleep (sleep mode off, an error): back to warm if it says it is awake, else fenced.
  const bool awake = co_await until_sleeping(i, false, clock_.now_ms() + 2000);
  spdlog::warn("idle drain: upstream {} did not go to sleep ({}): {}", i, kOutcomes[static_cast<size_t>(outcome)],
               awake ? "back in placement" : "fenced");
  if (awake) {
    fleet_.set_parked(i, false);
    last_request_ms_[i] = clock_.now_ms();
    enter(i, ParkState::kWarm);
  } else {
    enter(i, ParkState::kFailed);
  }
}

asio::awaitable<void> EngineParking::wake(size_t i, uint64_t incarnation) {
  const int64_t began = clock_.now_ms();
  const int64_t deadline = began + config_.wake_timeout_ms;
  Outcome outcome = Outcome::kError;
  if (const std::shared_ptr<const net::Member> m = fleet_.member(i); m && m->incarnation == incarnation) {
    net::GetFailure failure = net::GetFailure::kNone;
    const auto res = co_await net::simple_post(m->url, "/wake_up", "", bearer_,
                                               std::chrono::milliseconds(config_.wake_timeout_ms), kMaxBody, failure);
    if (failure == net::GetFailure::kTimeout) {
      outcome = Outcome::kTimeout;
    } else if (failure == net::GetFailure::kNone && res.status == 200) {
      outcome = Outcome::kTimeout;
      if (co_await until_sleeping(i, false, deadline)) {
        // Readmitted only once its /health passes too (an engine awake but not serving is no use).
        asio::steady_timer pause(ctx_);
        while (!stopped_ && clock_.now_ms() < deadline) {
          net::GetFailure hf = net::GetFailure::kNone;
          const auto h = co_await net::simple_get(
              m->url, "/health", bearer_,
              std::chrono::milliseconds(std::clamp<int64_t>(deadline - clock_.now_ms(), 1, 5000)), kMaxBody, hf);
          if (hf == net::GetFailure::kNone && h.status == 200) {
            outcome = Outcome::kOk;
            break;
          }
          pause.expires_after(std::chrono::milliseconds(100));
          boost::system::error_code ec;
          co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        }
      }
    }
  }
  busy_[i] = 0;
  calls_[i][call_slot(true, outcome)].inc();
  if (stopped_) co_return;
  if (outcome == Outcome::kOk) {
    wake_seconds_.observe(static_cast<double>(clock_.now_ms() - began) / 1000.0);
    fleet_.set_parked(i, false);
    last_request_ms_[i] = clock_.now_ms();
    enter(i, ParkState::kWarm);
  } else {
    // Accepted /sleep, did not wake: fenced (out of placement), never waited on again until the
    // cooldown; whoever waits for its pool gets another parked engine, decided right now.
    spdlog::warn("idle drain: upstream {} did not wake ({}): fenced", i, kOutcomes[static_cast<size_t>(outcome)]);
    enter(i, ParkState::kFailed);
  }
  tick();
}

void EngineParking::write_metrics(metrics::Exposition& x) const {
  x.family(fam(F::kState));
  for (size_t i = 0; i < fleet_.size(); ++i)
    x.sample(fam(F::kState).name, "upstream=\"" + fleet_.at(i).label() + "\"", static_cast<int64_t>(state(i)));
  x.family(fam(F::kTransitions));
  for (size_t i = 0; i < fleet_.size(); ++i) {
    for (size_t s = 0; s < static_cast<size_t>(ParkState::kCount); ++s) {
      x.sample(fam(F::kTransitions).name,
               "upstream=\"" + fleet_.at(i).label() + "\",state=\"" +
                   std::string(park_state_label(static_cast<ParkState>(s))) + "\"",
               transitions_[i][s].get());
    }
  }
  x.family(fam(F::kDecisions));
  for (size_t a = 0; a < static_cast<size_t>(ParkAction::kCount); ++a) {
    for (size_t r = 0; r < static_cast<size_t>(ParkReason::kCount); ++r) {
      x.sample(fam(F::kDecisions).name,
               "action=\"" + std::string(park_action_label(static_cast<ParkAction>(a))) + "\",reason=\"" +
                   std::string(park_reason_label(static_cast<ParkReason>(r))) + "\"",
               decisions_[a][r].get());
    }
  }
  x.family(fam(F::kFleetIdle));
  x.sample(fam(F::kFleetIdle).name, "", int64_t{fleet_idle_.load() ? 1 : 0});
  x.family(fam(F::kLoad));
  x.sample(fam(F::kLoad).name, "", static_cast<double>(load_milli_.load()) / 1000.0);
  x.family(fam(F::kActions));
  for (size_t i = 0; i < fleet_.size(); ++i) {
    for (bool w : {false, true}) {
      for (size_t o = 0; o < kOutcomes.size(); ++o) {
        x.sample(fam(F::kActions).name,
                 "upstream=\"" + fleet_.at(i).label() + "\",action=\"" + (w ? "wake" : "sleep") + "\",outcome=\"" +
                     std::string(kOutcomes[o]) + "\"",
                 calls_[i][call_slot(w, static_cast<Outcome>(o))].get());
      }
    }
  }
  x.family(fam(F::kActionSeconds));
  sleep_seconds_.write(x, fam(F::kActionSeconds).name, "action=\"sleep\"");
  wake_seconds_.write(x, fam(F::kActionSeconds).name, "action=\"wake\"");
}

}  // namespace ramjet::upstream
