// --kv-events-config parsing (vLLM's KVEventsConfig), the data-parallel port offset rule (rank r
// publishes on the endpoint's port + r) and the PUB bind/connect rule (vLLM binds a `*`/`::`
// endpoint and connects to any other).
#include <boost/json.hpp>

#include <charconv>
#include <limits>

#include "sim/kv/kv_internal.h"
#include "sim/kv/publisher.h"

namespace ramjet::sim {
namespace {

namespace json = boost::json;

std::string type_error(std::string_view key, std::string_view want) {
  return "kv-events-config: \"" + std::string(key) + "\" must be " + std::string(want);
}

// A non-negative JSON integer that fits uint32 (pydantic accepts any int; our fields are uint32).
std::string get_u32(const json::value& v, std::string_view key, uint32_t& out) {
  if (v.is_uint64() && v.get_uint64() <= std::numeric_limits<uint32_t>::max()) {
    out = static_cast<uint32_t>(v.get_uint64());
    return "";
  }
  if (v.is_int64() && v.get_int64() >= 0 &&
      static_cast<uint64_t>(v.get_int64()) <= std::numeric_limits<uint32_t>::max()) {
    out = static_cast<uint32_t>(v.get_int64());
    return "";
  }
  return type_error(key, "a non-negative integer (< 2^32)");
}

}  // namespace

std::string parse_kv_events_config(const std::string& text, PublisherConfig& out) {
  json::error_code ec;
  json::value root = json::parse(text, ec);
  if (ec) return "kv-events-config: invalid JSON: " + ec.message();
  if (!root.is_object()) return "kv-events-config: expected a JSON object";

  PublisherConfig cfg = out;
  bool publisher_set = false;
  for (const auto& kv : root.get_object()) {
    const std::string_view key = kv.key();
    const json::value& v = kv.value();
    if (key == "enable_kv_cache_events") {
      if (!v.is_bool()) return type_error(key, "a boolean");
      cfg.enabled = v.get_bool();
    } else if (key == "publisher") {
      if (v.is_null()) continue;  // None -> derived from enable_kv_cache_events below
      if (!v.is_string()) return type_error(key, "\"null\" or \"zmq\"");
      const std::string_view p = v.get_string();
      if (p != "null" && p != "zmq") return type_error(key, "\"null\" or \"zmq\"");
      cfg.publisher = std::string(p);
      publisher_set = true;
    } else if (key == "endpoint") {
      if (!v.is_string()) return type_error(key, "a string");
      cfg.endpoint = std::string(v.get_string());
    } else if (key == "replay_endpoint") {
      if (v.is_null()) {
        cfg.replay_endpoint.clear();
      } else if (v.is_string()) {
        cfg.replay_endpoint = std::string(v.get_string());
      } else {
        return type_error(key, "a string or null");
      }
    } else if (key == "buffer_steps") {
      if (auto e = get_u32(v, key, cfg.buffer_steps); !e.empty()) return e;
    } else if (key == "hwm") {
      if (auto e = get_u32(v, key, cfg.hwm); !e.empty()) return e;
    } else if (key == "max_queue_size") {
      if (auto e = get_u32(v, key, cfg.max_queue_size); !e.empty()) return e;
    } else if (key == "topic") {
      if (!v.is_string()) return type_error(key, "a string");
      cfg.topic = std::string(v.get_string());
    } else {
      return "kv-events-config: unknown key \"" + std::string(key) + "\"";
    }
  }
  // KVEventsConfig.__post_init__: publisher None -> "zmq" if enabled else "null".
  if (!publisher_set) cfg.publisher = cfg.enabled ? "zmq" : "null";
  out = std::move(cfg);
  return "";
}

std::string offset_endpoint_port(const std::string& endpoint, int rank) {
  // ZmqEventPublisher.offset_endpoint_port: rank 0 (or no endpoint) -> unchanged.
  if (endpoint.empty() || rank == 0) return endpoint;
  if (rank < 0) return "";
  if (endpoint.find("inproc") != std::string::npos) {
    return endpoint + "_dp" + std::to_string(rank);
  }
  if (endpoint.find("tcp") != std::string::npos) {
    const size_t colon = endpoint.rfind(':');
    if (colon == std::string::npos) return endpoint;
    const std::string_view port_text(endpoint.data() + colon + 1, endpoint.size() - colon - 1);
    uint64_t port = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535) {
      return "";  // int() would raise ValueError
    }
    if (port == 0) return endpoint;  // PR #55844: an ephemeral port stays ephemeral per rank
    const uint64_t shifted = port + static_cast<uint64_t>(rank);
    if (shifted > 65535) return "";
    return endpoint.substr(0, colon + 1) + std::to_string(shifted);
  }
  return "";  // ipc:// and others: ValueError for rank > 0
}

namespace kv_internal {

bool pub_binds(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://");
}

}  // namespace kv_internal
}  // namespace ramjet::sim
