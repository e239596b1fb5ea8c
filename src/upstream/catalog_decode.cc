#include "upstream/catalog_decode.h"

#include <algorithm>

#include <boost/json.hpp>

#include "config/options.h"

namespace ramjet::upstream {

namespace json = boost::json;

namespace {

std::optional<json::value> parse(std::string_view body, const CatalogLimits& limits) {
  if (body.size() > limits.max_body) return std::nullopt;
  json::parse_options opt;
  opt.max_depth = 8;  // both answers are an object of a list of flat objects
  boost::system::error_code ec;
  json::value v = json::parse(body, ec, {}, opt);
  if (ec) return std::nullopt;
  return v;
}

// A string field of `o` within the limit: the string, "" when absent or null, nullopt otherwise.
std::optional<std::string> text(const json::object& o, std::string_view key, const CatalogLimits& limits) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return std::string();
  if (!v->is_string() || v->as_string().size() > limits.max_string) return std::nullopt;
  return std::string(v->as_string());
}

}  // namespace

std::optional<std::vector<ModelCard>> decode_models(std::string_view body, const CatalogLimits& limits) {
  auto v = parse(body, limits);
  if (!v || !v->is_object()) return std::nullopt;
  const json::value* data = v->as_object().if_contains("data");
  if (data == nullptr || !data->is_array() || data->as_array().size() > limits.max_entries) return std::nullopt;
  std::vector<ModelCard> out;
  for (const json::value& c : data->as_array()) {
    if (!c.is_object()) return std::nullopt;
    auto id = text(c.as_object(), "id", limits);
    auto parent = text(c.as_object(), "parent", limits);
    if (!id || id->empty() || !parent) return std::nullopt;
    const bool adapter = !parent->empty();
    uint64_t context = 0;
    if (const json::value* m = c.as_object().if_contains("max_model_len")) {
      if (m->is_uint64()) context = m->as_uint64();
      else if (m->is_int64() && m->as_int64() > 0) context = static_cast<uint64_t>(m->as_int64());
    }
    out.push_back(ModelCard{std::move(*id), adapter, std::move(*parent), json::serialize(c), context});
  }
  return out;
}

namespace {

// A data-parallel rank: a non-negative integer up to 65535 (a JSON number or, as the keys of
// vLLM's map, its decimal digits).
std::optional<uint32_t> rank_of(const json::value& r) {
  if (r.is_int64() && r.as_int64() >= 0 && r.as_int64() <= 65535) return static_cast<uint32_t>(r.as_int64());
  if (r.is_uint64() && r.as_uint64() <= 65535) return static_cast<uint32_t>(r.as_uint64());
  return std::nullopt;
}

std::optional<uint32_t> rank_of_key(std::string_view key) {
  if (key.empty() || key.size() > 5) return std::nullopt;
  uint32_t v = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v > 65535) return std::nullopt;
  return v;
}

// One source object: endpoint (required), replay_endpoint, topic; `enable_kv_cache_events`
// false or a `publisher` other than zmq (vLLM's KVEventsConfig) is no source at all (nullopt
// inside a valid answer is signalled through `skip`).
std::optional<KvEventSource> source_of(const json::object& o, uint32_t rank, const CatalogLimits& limits, bool& skip) {
  skip = false;
  if (const json::value* on = o.if_contains("enable_kv_cache_events"); on && !on->is_null()) {
    if (!on->is_bool()) return std::nullopt;
    if (!on->as_bool()) skip = true;
  }
  auto publisher = text(o, "publisher", limits);
  if (!publisher) return std::nullopt;
  if (!publisher->empty() && *publisher != "zmq") skip = true;
  auto endpoint = text(o, "endpoint", limits);
  auto replay = text(o, "replay_endpoint", limits);
  auto topic = text(o, "topic", limits);
  if (!endpoint || !replay || !topic) return std::nullopt;
  if (skip) return KvEventSource{};
  if (endpoint->empty()) return std::nullopt;
  return KvEventSource{rank, std::move(*endpoint), std::move(*replay), std::move(*topic)};
}

}  // namespace

std::optional<std::vector<KvEventSource>> decode_kv_event_sources(std::string_view body, const CatalogLimits& limits) {
  auto v = parse(body, limits);
  if (!v) return std::nullopt;
  std::vector<KvEventSource> out;
  const json::value* list = &*v;
  if (v->is_object()) {
    const json::object& o = v->as_object();
    list = o.if_contains("sources");
    if (list == nullptr) {
      // vLLM 0.32: {"<dp rank>": KVEventsConfig, ...}; {} when the engine publishes none.
      if (o.size() > limits.max_entries) return std::nullopt;
      for (const auto& [key, cfg] : o) {
        auto rank = rank_of_key(key);
        if (!rank || !cfg.is_object()) return std::nullopt;
        bool skip = false;
        auto src = source_of(cfg.as_object(), *rank, limits, skip);
        if (!src) return std::nullopt;
        if (!skip) out.push_back(std::move(*src));
      }
      std::sort(out.begin(), out.end(), [](const KvEventSource& a, const KvEventSource& b) {
        return a.data_parallel_rank < b.data_parallel_rank;
      });
      return out;
    }
  }
  // Earlier drafts of the endpoint: {"sources":[{data_parallel_rank, ...}]} or the bare list.
  if (list == nullptr || !list->is_array() || list->as_array().size() > limits.max_entries) return std::nullopt;
  for (const json::value& s : list->as_array()) {
    if (!s.is_object()) return std::nullopt;
    const json::object& o = s.as_object();
    uint32_t rank = 0;
    if (const json::value* r = o.if_contains("data_parallel_rank"); r && !r->is_null()) {
      auto parsed = rank_of(*r);
      if (!parsed) return std::nullopt;
      rank = *parsed;
    }
    bool skip = false;
    auto src = source_of(o, rank, limits, skip);
    if (!src) return std::nullopt;
    if (!skip) out.push_back(std::move(*src));
  }
  return out;
}

std::optional<std::string> resolve_endpoint(std::string_view bound, std::string_view engine_host) {
  constexpr std::string_view kTcp = "tcp://";
  if (bound.substr(0, kTcp.size()) != kTcp) return std::nullopt;  // ipc:// and inproc:// are the engine's own
  const std::string_view rest = bound.substr(kTcp.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = rest.substr(0, colon);
  const std::string_view port = rest.substr(colon + 1);
  std::string out(kTcp);
  if (host == "*" || host == "0.0.0.0" || host == "[::]" || host == "::" || host.empty()) {
    if (engine_host.empty()) return std::nullopt;
    const bool v6 = engine_host.find(':') != std::string_view::npos && engine_host.front() != '[';
    out += v6 ? "[" + std::string(engine_host) + "]" : std::string(engine_host);
  } else {
    // A loopback bind is the engine's own machine: from here it would be ours (and another
    // engine's port on it). Only an engine that is itself on loopback may name it.
    auto loopback = [](std::string_view h) {
      return h == "localhost" || h.starts_with("127.") || h == "[::1]" || h == "::1";
    };
    if (loopback(host) && !loopback(engine_host)) return std::nullopt;
    out += host;
  }
  out += ':';
  out += port;
  if (config::zmq_endpoint_problem(out)) return std::nullopt;
  return out;
}

// The source a target reads: its own rank's (a slot that is one data-parallel rank), else the
// engine's only one. nullptr when the answer lists no such rank.
const KvEventSource* source_of(const std::vector<KvEventSource>& sources, std::optional<uint32_t> rank) {
  if (!rank) return sources.size() == 1 ? &sources.front() : nullptr;
  for (const KvEventSource& s : sources) {
    if (s.data_parallel_rank == *rank) return &s;
  }
  return nullptr;
}

}  // namespace ramjet::upstream
