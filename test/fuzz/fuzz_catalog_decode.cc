// Fuzz target for upstream/catalog_decode: an engine's GET /v1/models and GET /kv_event_sources
// answers (untrusted bytes). Any input must give nothing or values within the limits, and every
// endpoint resolved from it must be one ramjet's own configuration would accept. Decoded model
// cards also build the model pools (upstream/model_pools.h): every card's id is served by the
// engines that list it, and the merged GET /v1/models is JSON with every id once.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <boost/json.hpp>

#include <set>
#include <string>

#include "config/options.h"
#include "upstream/catalog_decode.h"
#include "upstream/model_pools.h"

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
    using ramjet::upstream::EngineModels;
    std::vector<EngineModels> engines = {EngineModels{.active = true, .cards = *cards},
                                         EngineModels{.active = true},
                                         EngineModels{.active = true, .declared = {"declared"}, .cards = *cards}};
    std::vector<std::string> labels;
    auto pools = ramjet::upstream::ModelPools::build(engines, labels);
    check(labels.size() <= ramjet::upstream::kMaxModelLabels);
    std::set<std::string> ids;
    for (const auto& c : *cards) {
      ids.insert(c.id);
      auto pick = pools->pick(c.id);
      check(pick.verdict == ramjet::upstream::ModelPools::Verdict::kServed && pick.engines->has(0));
    }
    auto merged = pools->models_json();
    check(merged.has_value());
    boost::system::error_code ec;
    auto v = boost::json::parse(*merged, ec);
    check(!ec && v.is_object() && v.as_object().contains("data"));
    std::set<std::string> listed;
    for (const auto& c : v.at("data").as_array()) {
      check(c.is_object() && c.as_object().contains("id") && c.at("id").is_string());
      check(listed.insert(std::string(c.at("id").as_string())).second);  // each id once
    }
    ids.insert("declared");
    for (const auto& c : *cards) {  // an adapter on "declared" follows it
      if (c.adapter && c.parent == "declared") ids.insert(c.id);
    }
    check(listed == ids);
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
