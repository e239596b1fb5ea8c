// Test helper shared by the upstream/ unit tests: engine URLs with recognisable host names (the
// tests check that no host name reaches /health or metrics).
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace ramjet::upstream::test_support {

inline std::vector<config::UpstreamUrl> urls(size_t n) {
  std::vector<config::UpstreamUrl> v(n);
  for (size_t i = 0; i < n; ++i) v[i].host = "engine-host-" + std::to_string(i), v[i].port = 8000;
  return v;
}

}  // namespace ramjet::upstream::test_support
