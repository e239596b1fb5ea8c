// Fuzz target for upstream/catalog_decode: an engine's GET /v1/models and GET /kv_event_sources
// answers (untrusted bytes). Any input must give nothing or values within the limits, and every
// endpoint resolved from it must be one ramjet's own configuration would accept.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "config/options.h"
#include "upstream/catalog_decode.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const ramjet::upstream::CatalogLimits limits{.max_body = 1u << 16, .max_entries = 16, .max_string = 64};
  if (auto cards = ramjet::upstream::decode_models(body, limits)) {
    check(cards->size() <= limits.max_entries);
    for (const auto& c : *cards) check(!c.id.empty() && c.id.size() <= limits.max_string);
  }
  if (auto sources = ramjet::upstream::decode_kv_event_sources(body, limits)) {
    check(sources->size() <= limits.max_entries);
    for (const auto& s : *sources) {
      check(!s.endpoint.empty() && s.endpoint.size() <= limits.max_string);
      check(s.replay_endpoint.size() <= limits.max_string && s.topic.size() <= limits.max_string);
      check(s.data_parallel_rank <= 65535);
      for (std::string_view host : {"engine-a", "10.0.0.5", "::1"}) {
        if (auto e = ramjet::upstream::resolve_endpoint(s.endpoint, host)) {
          check(!ramjet::config::zmq_endpoint_problem(*e));
        }
      }
    }
  }
  // The raw bytes as a bound endpoint too.
  if (size <= 256) {
    if (auto e = ramjet::upstream::resolve_endpoint(body, "engine-a")) check(!ramjet::config::zmq_endpoint_problem(*e));
  }
  return 0;
}
