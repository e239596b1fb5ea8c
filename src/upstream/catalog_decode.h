// upstream/catalog_decode: an engine's own description of itself, read from untrusted bytes —
// GET /v1/models (which names are base models and which are LoRA adapters) and
// GET /kv_event_sources (where a vLLM engine publishes its KV events; newest vLLM builds). Pure
// functions with limits (fuzz target catalog_decode); the poller is upstream/engine_catalog.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ramjet::upstream {

struct CatalogLimits {
  size_t max_body = 1u << 20;   // bytes of one answer
  size_t max_entries = 1024;    // model cards / sources
  size_t max_string = 1024;     // bytes of one id / endpoint / topic
};

// One /v1/models card: vLLM lists the served model (parent null) and each LoRA adapter (parent:
// the base model's id).
struct ModelCard {
  std::string id;
  bool adapter = false;
  std::string parent{};  // an adapter's base model ("" for a base model)
  std::string card{};    // the card itself, compact JSON (ramjet's merged GET /v1/models)
  uint64_t max_model_len = 0;  // its max_model_len (0: none given)
};
// {"object":"list","data":[{"id":..,"parent":null|"base",...},...]} -> the cards; nullopt when the
// answer is not that shape or exceeds the limits.
std::optional<std::vector<ModelCard>> decode_models(std::string_view body, const CatalogLimits& limits = {});

// One KV-event source (one data-parallel rank's publisher).
struct KvEventSource {
  uint32_t data_parallel_rank = 0;
  std::string endpoint;         // as the engine bound it, e.g. tcp://*:5557
  std::string replay_endpoint;  // "" when the engine offers no replay
  std::string topic;
};
// vLLM 0.32's answer, its KVEventsConfig per data-parallel rank:
//   {"0": {"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",
//          "replay_endpoint": "tcp://*:5558", "buffer_steps": ..., "topic": "kv"}}
// ({} when the engine publishes none), or an earlier draft's {"sources":[{"data_parallel_rank",
// "endpoint", "replay_endpoint", "topic"}]} / bare list -> the sources by rank (a disabled or
// non-zmq publisher is no source); nullopt when the answer is not such a shape or exceeds the
// limits.
std::optional<std::vector<KvEventSource>> decode_kv_event_sources(std::string_view body,
                                                                  const CatalogLimits& limits = {});

// The source a target reads: its own data-parallel rank's when it is one (RJ_UPSTREAM_DP_SIZE),
// else the engine's only one; nullptr when the answer lists no such rank (or, for a whole engine,
// several sources).
const KvEventSource* source_of(const std::vector<KvEventSource>& sources, std::optional<uint32_t> rank);

// A bound endpoint as ramjet connects to it: a wildcard host (*, 0.0.0.0, [::]) becomes the
// engine's host; anything that is not a tcp://host:port endpoint ramjet can connect to is nullopt.
std::optional<std::string> resolve_endpoint(std::string_view bound, std::string_view engine_host);

}  // namespace ramjet::upstream
