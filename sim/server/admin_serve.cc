// sim/server/admin_serve: the simulator's own /sim/* admin of SimServer (not vLLM's): the
// resident-prefix oracle (/sim/resident), run-time faults (/sim/fault, per rank where the fault
// is an engine's; wake_hang: POST /wake_up never answers) and counters (/sim/stats, per rank and
// summed; sleeping, sleep_level, sleeps, wakes).
#include <boost/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "sim/server/server.h"
#include "sim/server/server_io.h"

namespace ramjet::sim {

namespace json = boost::json;
using detail::find;
using detail::vllm_error;
using detail::wall_now;

namespace {

std::optional<uint64_t> as_u64(const json::value* v) {
  if (!v) return std::nullopt;
  if (v->is_uint64()) return v->as_uint64();
  if (v->is_int64() && v->as_int64() >= 0) return static_cast<uint64_t>(v->as_int64());
  return std::nullopt;
}

// vLLM's validate_cache_salt (generate/base/protocol.py) for /sim/resident: a non-empty string
// of at most 128 characters without '@', '/', '\\' or NUL when given (null = absent).
std::string read_cache_salt(const json::object& o, std::string& out) {
  const json::value* v = find(o, "cache_salt");
  if (!v) return "";
  if (!v->is_string() || v->as_string().empty()) return "Parameter 'cache_salt' must be a non-empty string if provided.";
  size_t chars = 0;
  for (unsigned char c : v->as_string()) chars += (c & 0xc0) != 0x80;
  if (chars > 128 || v->as_string().find_first_of(std::string_view("@/\\\0", 4)) != std::string::npos)
    return "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or NUL.";
  out = std::string(v->as_string());
  return "";
}

}  // namespace

SimServer::Rank* SimServer::rank_named(const json::object& o, std::string& error) {
  const json::value* v = find(o, "rank");
  if (!v) return nullptr;
  if (v->is_int64() || v->is_uint64()) {
    const int64_t want = v->is_int64() ? v->as_int64() : static_cast<int64_t>(std::min<uint64_t>(v->as_uint64(), INT64_MAX));
    for (auto& r : ranks_) {
      if (r->dp_rank == want) return r.get();
    }
  }
  error = "\"rank\" must be one of this process's data-parallel ranks";
  return nullptr;
}


std::string SimServer::handle_admin(const std::string& path, const std::string& body, unsigned& status) {
  boost::system::error_code ec;
  json::value v = body.empty() ? json::value(json::object{}) : json::parse(body, ec);
  if (ec || !v.is_object()) {
    status = 400;
    return vllm_error("admin body must be a JSON object", "BadRequestError", 400);
  }
  const auto& o = v.as_object();
  // "rank": one data-parallel rank (its number, as /metrics and the KV events name it); without
  // it, /sim/resident and /sim/stats answer for the first rank and the sums, /sim/fault's
  // engine-side faults apply to every rank.
  std::string rank_error;
  Rank* selected = rank_named(o, rank_error);
  if (!rank_error.empty()) {
    status = 400;
    return vllm_error(rank_error, "BadRequestError", 400);
  }
  std::vector<Rank*> targets;
  for (auto& r : ranks_) {
    if (!selected || r.get() == selected) targets.push_back(r.get());
  }
  if (path == "/sim/resident") {
    std::vector<uint32_t> tokens;
    if (auto* t = find(o, "tokens"); t && t->is_array()) {
      for (const auto& x : t->as_array())
        if (auto id = as_u64(&x)) tokens.push_back(static_cast<uint32_t>(*id));
    } else if (find(o, "messages") || (find(o, "prompt") && find(o, "prompt")->is_string())) {
      auto ids = find(o, "messages") ? prompter_.chat(o) : prompter_.text(find(o, "prompt")->as_string(), true);
      if (!ids) {
        status = 400;
        return vllm_error(ids.error().message, "BadRequestError", 400);
      }
      tokens = std::move(ids.value());
    }
    std::string salt, model;
    if (auto e = read_cache_salt(o, salt); !e.empty()) {
      status = 400;
      return vllm_error(e, "BadRequestError", 400);
    }
    if (auto* m = find(o, "model"); m && m->is_string()) model = m->as_string();
    const CacheNamespace ns = namespace_of(model, salt);
    Rank& one = selected ? *selected : *ranks_.front();
    json::object r{{"prompt_tokens", tokens.size()}, {"resident_tokens", one.engine.resident_prefix_tokens(tokens, ns)}};
    auto st = one.engine.stats();
    r["running"] = st.running;
    r["waiting"] = st.waiting;
    json::object by_rank;
    for (auto& x : ranks_) by_rank[std::to_string(x->dp_rank)] = x->engine.resident_prefix_tokens(tokens, ns);
    r["resident_by_rank"] = std::move(by_rank);
    return json::serialize(r);
  }
  if (path == "/sim/fault") {
    if (auto* x = find(o, "crash"); x && x->is_bool() && x->as_bool()) {
      std::fflush(nullptr);
      std::_Exit(1);
    }
    if (auto* x = find(o, "hang"); x && x->is_bool()) hang_ = x->as_bool();
    if (auto* x = find(o, "health_fail"); x && x->is_bool()) health_fail_ = x->as_bool();
    if (auto* x = find(o, "garbage"); x && x->is_bool()) garbage_ = x->as_bool();
    if (auto* x = find(o, "wake_hang"); x && x->is_bool()) wake_hang_ = x->as_bool();
    if (auto x = as_u64(find(o, "drop_header_bytes"))) drop_header_bytes_ = *x;
    if (auto x = as_u64(find(o, "stall_after_tokens"))) stall_after_tokens_ = static_cast<uint32_t>(*x);
    if (auto x = as_u64(find(o, "tokenize_delay_ms"))) tokenize_delay_ms_ = static_cast<uint32_t>(*x);
    if (auto* x = find(o, "error_rate"); x && x->is_number()) error_rate_ = x->to_number<double>();
    if (auto x = as_u64(find(o, "error_status"))) error_status_ = static_cast<unsigned>(*x);
    // Engine-side faults: per rank. A paused rank ("wedged") keeps taking requests, never steps
    // and publishes no load; /health is not told (vLLM's checks only whether the core died).
    for (Rank* r : targets) {
      if (auto* x = find(o, "pause"); x && x->is_bool()) {
        r->paused = x->as_bool();
        if (!r->paused) {
          r->wake();
          publish_counts(*r);
        }
      }
      if (auto x = as_u64(find(o, "slow_ms"))) r->slow_ms = static_cast<uint32_t>(*x);
      if (r->publisher) {
        if (auto x = as_u64(find(o, "kv_drop"))) r->publisher->fault_drop(static_cast<uint32_t>(*x));
        if (auto x = as_u64(find(o, "kv_skip"))) r->publisher->fault_skip(static_cast<uint32_t>(*x));
        if (auto x = as_u64(find(o, "kv_garbage"))) r->publisher->fault_garbage(static_cast<uint32_t>(*x));
        if (auto* x = find(o, "kv_restart"); x && x->is_bool() && x->as_bool()) r->publisher->fault_restart();
      }
    }
    if (auto* x = find(o, "reset_prefix_cache"); x && x->is_bool() && x->as_bool()) {
      bool ok = true;
      for (Rank* r : targets) ok = r->engine.reset_prefix_cache(wall_now()) && ok;
      if (!ok) {
        status = 409;
        return vllm_error("requests are running", "ConflictError", 409);
      }
    }
    bool all_paused = true;
    json::array ranks;
    for (auto& r : ranks_) {
      all_paused = all_paused && r->paused;
      ranks.push_back(json::object{{"rank", r->dp_rank}, {"pause", r->paused}, {"slow_ms", r->slow_ms}});
    }
    const Rank& first = *targets.front();
    return json::serialize(json::object{{"hang", hang_}, {"health_fail", health_fail_}, {"slow_ms", first.slow_ms},
                                        {"error_rate", error_rate_}, {"error_status", error_status_},
                                        {"garbage", garbage_}, {"drop_header_bytes", drop_header_bytes_},
                                        {"stall_after_tokens", stall_after_tokens_},
                                        {"pause", selected ? selected->paused : all_paused},
                                        {"tokenize_delay_ms", tokenize_delay_ms_}, {"wake_hang", wake_hang_},
                                        {"ranks", std::move(ranks)}});
  }
  if (path == "/sim/stats") {
    auto rank_stats = [&](const Rank& r) {
      auto st = r.engine.stats();
      return json::object{
          {"rank", r.dp_rank}, {"running", st.running}, {"waiting", st.waiting},
          {"kv_cache_usage", st.kv_cache_usage}, {"free_blocks", st.free_blocks}, {"cached_blocks", st.cached_blocks},
          {"steps", r.steps}, {"virtual_seconds", r.virtual_s}, {"late_steps", r.late_steps},
          {"max_lag_seconds", r.max_lag_s}, {"generation_tokens", st.generation_tokens},
          {"prompt_tokens", st.prompt_tokens}, {"prefix_cache_hits", st.prefix_cache_hits},
          {"prefix_cache_queries", st.prefix_cache_queries},
          {"kv_next_sequence", r.publisher ? r.publisher->next_sequence() : 0},
          {"finished_stop", r.success_by_reason[0]}, {"finished_length", r.success_by_reason[1]},
          {"finished_abort", r.success_by_reason[2]}};
    };
    json::object out = rank_stats(*targets.front());
    if (!selected && ranks_.size() > 1) {  // the sums over the ranks (the largest lag, the mean usage)
      json::array per;
      for (auto& r : ranks_) per.push_back(rank_stats(*r));
      for (auto& [k, v] : out) {
        if (k == "rank" || k == "kv_next_sequence") continue;
        double sum = 0, max = 0;
        for (auto& x : per) {
          const double d = x.as_object().at(k).to_number<double>();
          sum += d;
          max = std::max(max, d);
        }
        if (k == "max_lag_seconds") v = max;
        else if (k == "kv_cache_usage") v = sum / static_cast<double>(per.size());
        else if (v.is_double()) v = sum;
        else v = static_cast<uint64_t>(sum);
      }
      out["ranks"] = std::move(per);
    }
    out.erase("rank");
    out["requests_cancelled"] = cancelled_;
    out["rank_pins"] = json::object{{"header", pins_by_header_}, {"body", pins_by_body_}};
    out["sleeping"] = sleep_level_ > 0;
    out["sleep_level"] = sleep_level_;
    out["sleeps"] = sleeps_;
    out["wakes"] = wakes_;
    if (opt_.kv_transfer.enabled()) out["kv_transfer"] = kv_stats();
    return json::serialize(out);
  }
  status = 404;
  return vllm_error("unknown admin path", "NotFoundError", 404);
}

}  // namespace ramjet::sim
