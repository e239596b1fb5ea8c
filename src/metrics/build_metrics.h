// metrics/build_metrics: ramjet_build_info, the gauge that says which build answers a scrape
// (version, commit, build type and compiler as labels; value 1), the convention of Prometheus'
// own *_build_info. Every metrics::Registry writes it first; the values are common/build_info.h's.
#pragma once

#include <span>

#include "common/build_info.h"
#include "metrics/metrics.h"

namespace ramjet::metrics {

// The family write_build_info writes (docs/metrics.md, section "Build").
std::span<const Family> build_families();

void write_build_info(Exposition& x, const BuildInfo& b = build_info());

}  // namespace ramjet::metrics
