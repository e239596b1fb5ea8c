// upstream/outlier: outlier detection, after Envoy's. An engine that fails `consecutive_failures`
// requests in a row — 5xx answers, connections dropped or garbled before an answer, first-byte
// or idle timeouts, streams cut short — is ejected from routing for a backoff that doubles on
// every repeat (base, 2 x base, ... up to max) and returns through the readiness gate on
// probation (its next failure ejects it again). At most max_ejection_percent of the fleet is
// ejected at once, so outliers cannot empty it. This file holds the configuration and the
// arithmetic; Fleet (fleet.h) keeps each engine's count and applies them; request/stream decides
// which failures are an engine's and which are the request's own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ramjet::upstream {

// A failed exchange that counts against the engine (the request was not to blame).
enum class Failure {
  kStatus5xx,    // the engine answered 5xx
  kDropped,      // the connection closed or reset before a response head
  kBadResponse,  // bytes that are not an HTTP response head
  kTimeout,      // RJ_UPSTREAM_FIRST_BYTE_TIMEOUT_MS or RJ_UPSTREAM_IDLE_TIMEOUT_MS passed
  kCut,          // the response ended early (connection lost mid-body)
  kCount
};
// status_5xx, dropped, bad_response, timeout, cut (metric labels).
std::string_view failure_label(Failure f);

struct OutlierConfig {
  uint32_t consecutive_failures = 5;  // RJ_OUTLIER_CONSECUTIVE_FAILURES (0 = never eject)
  int64_t base_ejection_ms = 30000;   // RJ_OUTLIER_BASE_EJECTION_MS
  int64_t max_ejection_ms = 300000;   // RJ_OUTLIER_MAX_EJECTION_MS
  uint32_t max_ejection_percent = 50; // RJ_OUTLIER_MAX_EJECTION_PERCENT
  // RJ_OUTLIER_PENALTY_MS: how long after the second failure in a row (with no success since)
  // routing ranks the engine after the others (route::CandidateState::failing): long enough
  // that an engine failing fast is not preferred for looking idle, short enough that a few
  // errors do not keep an engine's warm conversations away for long (0 = never).
  int64_t penalty_ms = 10000;

  bool enabled() const { return consecutive_failures > 0; }
  // The `level`-th ejection in a row (0 = first) lasts base << level, capped at max.
  int64_t ejection_ms(uint32_t level) const {
    const int64_t base = std::max<int64_t>(base_ejection_ms, 1);
    const int64_t cap = std::max(max_ejection_ms, base);
    if (level >= 62) return cap;
    return base > (cap >> level) ? cap : base << level;
  }
  // How many of `fleet` engines may be ejected at once: the percentage rounded down, but at
  // least one when the percentage is not 0 (a fleet of two may eject one).
  size_t max_ejected(size_t fleet) const {
    if (max_ejection_percent == 0 || fleet == 0) return 0;
    return std::max<size_t>(1, fleet * std::min<uint32_t>(max_ejection_percent, 100) / 100);
  }
};

}  // namespace ramjet::upstream
