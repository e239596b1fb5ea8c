// parse(): environment, then flags, then required checks, every problem collected. Also the
// three renderings of the options table: --help, docs/configuration.md and describe().
#include "config/config.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "config/options.h"

extern char** environ;  // POSIX; read only by parse_process()

namespace ramjet::config {
namespace {

constexpr std::string_view kRegenerate =
    "build/dev/src/app/ramjet --help-markdown > docs/configuration.md";

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  });
}

// A row whose Field does not match its Type is a bug in the table: crash at once.
template <typename M>
M member(const Option& o) {
  const M* m = std::get_if<M>(&o.field);
  bool ok = m != nullptr;
  if constexpr (std::is_same_v<M, HostPortField>) {
    ok = ok && m->host != nullptr && m->port != nullptr;
  } else {
    ok = ok && *m != nullptr;
  }
  if (!ok) {
    std::fprintf(stderr, "ramjet: options table row %.*s: field does not match its type\n",
                 static_cast<int>(o.env.size()), o.env.data());
    std::abort();
  }
  return *m;
}

// A user-supplied value as it may appear in an error: quoted, at most 64 bytes, control
// characters replaced. Only for non-secret scalar options (lists are named by item ordinal).
std::string shown(std::string_view v) {
  std::string s = "\"";
  for (size_t i = 0; i < v.size() && i < 64; ++i) {
    auto u = static_cast<unsigned char>(v[i]);
    s += (u < 0x20 || u == 0x7f || v[i] == '"') ? '?' : v[i];
  }
  if (v.size() > 64) s += "...";
  return s + "\"";
}

bool echoes_value(const Option& o) {
  return !o.secret && o.type != Type::kString && o.type != Type::kList && o.type != Type::kUrlList;
}

// Parses `text` into the row's field, or appends "label: problem" errors.
void apply(const Option& o, std::string_view text, const std::string& label, Config& c,
           std::vector<std::string>& errors) {
  Problems problems;
  switch (o.type) {
    case Type::kString:
      c.*member<std::string Config::*>(o) = std::string(text);
      break;
    case Type::kUint:
      if (auto v = parse_uint(text, o.min, o.max, o.bytes, problems)) {
        if (std::holds_alternative<uint32_t Config::*>(o.field)) {
          c.*member<uint32_t Config::*>(o) = static_cast<uint32_t>(*v);  // max <= 2^32-1 (test)
        } else {
          c.*member<uint64_t Config::*>(o) = *v;
        }
      }
      break;
    case Type::kDecimal:
      if (auto v = parse_decimal(text, o.dmin, o.dmax, problems)) {
        c.*member<double Config::*>(o) = *v;
      }
      break;
    case Type::kBool:
      if (auto v = parse_bool(text, problems)) c.*member<bool Config::*>(o) = *v;
      break;
    case Type::kEnum:
      if (auto v = parse_enum(text, o.choices, problems)) {
        c.*member<std::string Config::*>(o) = std::move(*v);
      }
      break;
    case Type::kList:
      if (auto v = parse_list(text, o.min, o.max, problems, o.choices)) {
        c.*member<std::vector<std::string> Config::*>(o) = std::move(*v);
      }
      break;
    case Type::kHostPort:
      if (auto v = parse_host_port(text, problems)) {
        auto f = member<HostPortField>(o);
        c.*f.host = std::move(v->host);
        c.*f.port = v->port;
      }
      break;
    case Type::kUrlList:
      if (o.env == "RJ_UPSTREAM_DNS") {  // the scheme is optional: name:port means http://
        std::string with;
        size_t start = 0;
        while (start <= text.size()) {
          size_t comma = text.find(',', start);
          if (comma == std::string_view::npos) comma = text.size();
          std::string_view item = text.substr(start, comma - start);
          while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
          if (!with.empty() || start > 0) with += ',';
          if (!item.empty() && item.find("://") == std::string_view::npos) with += "http://";
          with += item;
          start = comma + 1;
        }
        if (auto v = parse_upstreams(with, o.min, o.max, problems)) {
          c.*member<std::vector<UpstreamUrl> Config::*>(o) = std::move(*v);
        }
        break;
      }
      if (auto v = parse_upstreams(text, o.min, o.max, problems)) {
        c.*member<std::vector<UpstreamUrl> Config::*>(o) = std::move(*v);
      }
      break;
  }
  for (const std::string& p : problems) errors.push_back(label + ": " + p);
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// "; did you mean RJ_UPSTREAM?" when one known name is close, else "".
std::string suggestion(std::string_view name, bool flag) {
  std::string_view best;
  size_t best_distance = std::max<size_t>(2, name.size() / 5) + 1;
  for (const Option& o : options()) {
    std::string_view candidate = flag ? o.flag : o.env;
    size_t d = edit_distance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best.empty() ? "" : "; did you mean " + std::string(best) + "?";
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

// Word-wraps `text` into lines of at most `width` columns (longer words stay whole).
std::string wrap(std::string_view text, std::string_view indent, size_t width) {
  std::string out, line(indent);
  while (!text.empty()) {
    size_t space = text.find(' ');
    std::string_view word = text.substr(0, space);
    text = space == std::string_view::npos ? "" : text.substr(space + 1);
    if (line.size() > indent.size() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = indent;
    }
    if (line.size() > indent.size()) line += ' ';
    line += word;
  }
  return out + line + "\n";
}

std::string md_cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string value_text(const Option& o, const Config& c) {
  std::string v;
  switch (o.type) {
    case Type::kString:
    case Type::kEnum:
      v = c.*member<std::string Config::*>(o);
      break;
    case Type::kUint:
      v = std::holds_alternative<uint32_t Config::*>(o.field)
              ? std::to_string(c.*member<uint32_t Config::*>(o))
              : std::to_string(c.*member<uint64_t Config::*>(o));
      break;
    case Type::kDecimal:
      v = format_decimal(c.*member<double Config::*>(o));
      break;
    case Type::kBool:
      v = c.*member<bool Config::*>(o) ? "true" : "false";
      break;
    case Type::kList: {
      const auto& items = c.*member<std::vector<std::string> Config::*>(o);
      if (o.hosts) {  // hosts never reach logs (privacy)
        if (!items.empty()) v = std::to_string(items.size()) + (items.size() == 1 ? " item" : " items") + " (hosts not logged)";
        break;
      }
      for (const std::string& item : items) v += (v.empty() ? "" : ",") + item;
      break;
    }
    case Type::kHostPort: {
      auto f = member<HostPortField>(o);
      v = c.*f.host + ":" + std::to_string(c.*f.port);
      break;
    }
    case Type::kUrlList: {
      // Hosts never reach logs (privacy): upstreams are known by ordinal.
      size_t n = (c.*member<std::vector<UpstreamUrl> Config::*>(o)).size();
      const bool upstreams = o.env == "RJ_UPSTREAM";
      if (n > 0)
        v = std::to_string(n) + (upstreams ? (n == 1 ? " upstream" : " upstreams") : (n == 1 ? " URL" : " URLs")) +
            " (hosts not logged)";
      break;
    }
  }
  if (o.secret && !v.empty()) v = "<redacted>";
  return v;
}

}  // namespace

std::vector<std::string_view> model_names(std::string_view item) {
  std::vector<std::string_view> out;
  if (blank(item)) return out;
  size_t start = 0;
  while (start <= item.size()) {
    size_t bar = item.find('|', start);
    if (bar == std::string_view::npos) bar = item.size();
    std::string_view name = item.substr(start, bar - start);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    out.push_back(name);
    start = bar + 1;
  }
  return out;
}

std::string UpstreamUrl::host_header() const {
  std::string h;
  append_host_header(h);
  return h;
}

namespace {

// An RJ_UPSTREAM_DP_SIZE item's ranks: 1..1024, nullopt for anything else.
std::optional<uint32_t> dp_ranks(std::string_view item) {
  uint32_t n = 0;
  if (std::from_chars(item.data(), item.data() + item.size(), n).ptr != item.data() + item.size() || n < 1 || n > 1024) {
    return std::nullopt;
  }
  return n;
}

}  // namespace

uint32_t dp_size_item(const Config& c, size_t i) {
  return i < c.upstream_dp_size.size() ? dp_ranks(c.upstream_dp_size[i]).value_or(1) : 1;
}

bool dp_auto_item(const Config& c, size_t i) { return i < c.upstream_dp_size.size() && c.upstream_dp_size[i] == "auto"; }

EngineKind engine_kind_item(const Config& c, size_t i) {
  return i < c.upstream_engines.size() && c.upstream_engines[i] == "sglang" ? EngineKind::kSglang : EngineKind::kVllm;
}

EngineRole engine_role_item(const Config& c, size_t i) {
  if (i >= c.upstream_roles.size()) return EngineRole::kBoth;
  const std::string& r = c.upstream_roles[i];
  return r == "prefill" ? EngineRole::kPrefill : r == "decode" ? EngineRole::kDecode : EngineRole::kBoth;
}

std::string offset_endpoint(const std::string& item, uint32_t rank) {
  if (rank == 0 || !item.starts_with("tcp://")) return item;
  const size_t colon = item.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos || colon < 6 ||
      std::from_chars(item.data() + colon + 1, item.data() + item.size(), port).ptr != item.data() + item.size() ||
      port == 0) {
    return item;
  }
  return item.substr(0, colon + 1) + std::to_string(port + rank);
}

namespace {

// RJ_UPSTREAM_DP_SIZE: each static entry with N > 1 ranks becomes N entries (ranks 0..N-1) of the
// static list and of every list that follows it, so that everything indexed by a static entry
// (roster slots, KV sources, the catalog, the profiles) sees one target per rank.
void expand_ranks(Config& c) {
  const size_t statics = c.upstreams.size();
  std::vector<UpstreamUrl> upstreams;
  std::vector<std::optional<uint32_t>> ranks;
  std::vector<std::string> profiles, models, sizes, engines, roles, live, replay;
  std::vector<UpstreamUrl> gpus;
  for (size_t i = 0; i < statics; ++i) {
    const uint32_t n = dp_size_item(c, i);
    for (uint32_t k = 0; k < n; ++k) {
      upstreams.push_back(c.upstreams[i]);
      ranks.push_back(n > 1 ? std::optional<uint32_t>(k) : std::nullopt);
      if (i < c.upstream_profiles.size()) profiles.push_back(c.upstream_profiles[i]);
      if (i < c.upstream_models.size()) models.push_back(c.upstream_models[i]);
      if (i < c.upstream_engines.size()) engines.push_back(c.upstream_engines[i]);
      if (i < c.upstream_roles.size()) roles.push_back(c.upstream_roles[i]);
      sizes.push_back(dp_auto_item(c, i) ? "auto" : std::to_string(n));
      if (i < c.kv_event_live_endpoints.size()) live.push_back(offset_endpoint(c.kv_event_live_endpoints[i], k));
      if (i < c.kv_event_replay_endpoints.size()) replay.push_back(offset_endpoint(c.kv_event_replay_endpoints[i], k));
      if (i < c.gpu_metrics_urls.size()) gpus.push_back(c.gpu_metrics_urls[i]);
    }
  }
  for (size_t n = 0; n < c.upstream_dns.size(); ++n) {
    const size_t k = statics + n;
    if (k < c.upstream_profiles.size()) profiles.push_back(c.upstream_profiles[k]);
    if (k < c.upstream_models.size()) models.push_back(c.upstream_models[k]);
    if (k < c.upstream_engines.size()) engines.push_back(c.upstream_engines[k]);
    if (k < c.upstream_roles.size()) roles.push_back(c.upstream_roles[k]);
    sizes.push_back(dp_auto_item(c, k) ? "auto" : std::to_string(dp_size_item(c, k)));
    if (k < c.kv_event_live_endpoints.size()) live.push_back(c.kv_event_live_endpoints[k]);
    if (k < c.kv_event_replay_endpoints.size()) replay.push_back(c.kv_event_replay_endpoints[k]);
  }
  const bool any = upstreams.size() != statics;
  c.upstreams = std::move(upstreams);
  c.upstream_ranks = std::move(ranks);
  if (!any) return;  // the lists as given
  if (!c.upstream_profiles.empty()) c.upstream_profiles = std::move(profiles);
  if (!c.upstream_models.empty()) c.upstream_models = std::move(models);
  if (!c.upstream_engines.empty()) c.upstream_engines = std::move(engines);
  if (!c.upstream_roles.empty()) c.upstream_roles = std::move(roles);
  c.upstream_dp_size = std::move(sizes);
  if (!c.kv_event_live_endpoints.empty()) c.kv_event_live_endpoints = std::move(live);
  if (!c.kv_event_replay_endpoints.empty()) c.kv_event_replay_endpoints = std::move(replay);
  if (!c.gpu_metrics_urls.empty()) c.gpu_metrics_urls = std::move(gpus);
}

}  // namespace

ParseResult parse(const std::vector<std::string>& env_names, const EnvLookup& env,
                  const std::vector<std::string>& args) {
  ParseResult r;
  const auto table = options();
  std::vector<bool> provided(table.size(), false);  // last source gave a non-blank value

  // 1. Names: retired prefixes (one error listing them all) and unknown RJ_* names.
  std::vector<std::string> retired;
  std::vector<std::string> unknown;
  for (const std::string& name : env_names) {
    if (name.starts_with("MD_") || name.starts_with("DS4_")) {
      retired.push_back(name);
    } else if (name.starts_with("RJ_") && find_by_env(name) == nullptr) {
      unknown.push_back(name + suggestion(name, false));
    }
  }
  if (!retired.empty()) {
    std::sort(retired.begin(), retired.end());
    retired.erase(std::unique(retired.begin(), retired.end()), retired.end());
    std::string list;
    for (const std::string& name : retired) list += (list.empty() ? "" : ", ") + name;
    r.errors.push_back(
        "retired variables are set (the MD_ and DS4_ prefixes are no longer "
        "read; move them to RJ_* names or remove them): " +
        list);
  }
  for (const std::string& u : unknown) {
    r.errors.push_back("unknown variable " + u + " (ramjet --help lists every RJ_* name)");
  }

  // 2. Environment values.
  for (size_t i = 0; i < table.size(); ++i) {
    const Option& o = table[i];
    std::optional<std::string> v = env(o.env);
    if (!v) continue;
    std::string label(o.env);
    if (echoes_value(o)) label += "=" + shown(*v);
    apply(o, *v, label, r.config, r.errors);
    provided[i] = !blank(*v);
  }

  // 3. Flags override the environment.
  for (size_t k = 0; k < args.size(); ++k) {
    std::string_view arg = args[k];
    if (arg == "--help" || arg == "-h") {
      r.action = Action::kHelp;
      continue;
    }
    if (arg == "--help-markdown") {
      r.action = Action::kHelpMarkdown;
      continue;
    }
    if (arg == "--help-metrics") {
      r.action = Action::kHelpMetrics;
      continue;
    }
    if (!arg.starts_with("--") || arg == "--") {
      r.errors.push_back("argument " + std::to_string(k + 1) +
                         " is not a --flag (ramjet takes no positional arguments)");
      continue;
    }
    size_t eq = arg.find('=');
    std::string_view name = arg.substr(0, eq);
    const Option* o = find_by_flag(name);
    if (o == nullptr) {
      if (name == "--help" || name == "--help-markdown" || name == "--help-metrics") {
        r.errors.push_back(std::string(name) + " takes no value");
      } else {
        r.errors.push_back("unknown flag " + std::string(name) + suggestion(name, true));
      }
      continue;
    }
    std::string value;
    if (eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
    } else if (o->type == Type::kBool) {
      value = "true";
    } else if (k + 1 < args.size() && !args[k + 1].starts_with("--")) {
      value = args[++k];
    } else {
      r.errors.push_back(std::string(name) + " (" + std::string(o->env) + "): missing value; use " +
                         std::string(name) + "=VALUE or " + std::string(name) + " VALUE");
      continue;
    }
    std::string label(name);
    if (echoes_value(*o)) label += "=" + shown(value);
    label += " (" + std::string(o->env) + ")";
    apply(*o, value, label, r.config, r.errors);
    provided[static_cast<size_t>(o - table.data())] = !blank(value);
  }

  // 4. Checks across options. Skipped while either side is unset or invalid (already reported).
  const Config& c = r.config;
  // Static entries, then DNS names: the positions RJ_UPSTREAM_PROFILES and the KV endpoints follow.
  const size_t sources = c.upstreams.size() + c.upstream_dns.size();
  // A list with one item per source (RJ_UPSTREAM entries, then RJ_UPSTREAM_DNS names), or none.
  auto per_source = [&](std::string_view env, size_t items, std::string_view plural, std::string_view one) {
    if (items == 0 || sources == 0 || items == sources) return;
    r.errors.push_back(std::string(env) + ": " + std::to_string(items) + " " + std::string(plural) + " for " +
                       std::to_string(c.upstreams.size()) + " RJ_UPSTREAM entries and " +
                       std::to_string(c.upstream_dns.size()) + " RJ_UPSTREAM_DNS names; give one " + std::string(one) +
                       " per entry, then one per name, in order");
  };
  per_source("RJ_UPSTREAM_PROFILES", c.upstream_profiles.size(), "profiles", "profile");
  per_source("RJ_UPSTREAM_MODELS", c.upstream_models.size(), "items", "item");
  per_source("RJ_UPSTREAM_DP_SIZE", c.upstream_dp_size.size(), "items", "item");
  per_source("RJ_UPSTREAM_ENGINE", c.upstream_engines.size(), "items", "item");
  per_source("RJ_UPSTREAM_ROLE", c.upstream_roles.size(), "items", "item");
  if (!c.upstream_roles.empty() &&
      std::none_of(c.upstream_roles.begin(), c.upstream_roles.end(), [](const std::string& r) { return r != "prefill"; })) {
    r.errors.push_back("RJ_UPSTREAM_ROLE: every engine is a prefill engine; a request needs an engine that decodes "
                       "(decode or both)");
  }
  for (const std::string& item : c.upstream_models) {
    for (std::string_view name : model_names(item)) {
      if (name.empty() || name.size() > 1024) {
        r.errors.push_back("RJ_UPSTREAM_MODELS: a model name is empty or longer than 1024 bytes");
        break;
      }
    }
  }
  bool ranked = false;
  for (size_t i = 0; i < c.upstream_dp_size.size(); ++i) {
    const std::string& item = c.upstream_dp_size[i];
    if (item.empty()) continue;
    if (const std::optional<uint32_t> n = dp_ranks(item)) {
      ranked = ranked || *n > 1;
    } else if (item == "auto") {
      ranked = true;
    } else {
      r.errors.push_back("RJ_UPSTREAM_DP_SIZE: item " + std::to_string(i + 1) +
                         " is neither a number of ranks in 1..1024 nor auto");
    }
  }
  if (c.dp_discovered() && c.upstream_max != 0 && c.upstream_max <= c.upstreams.size()) {
    r.errors.push_back("RJ_UPSTREAM_DP_SIZE: auto needs free ordinals for the ranks an engine reports; raise "
                       "RJ_UPSTREAM_MAX above the RJ_UPSTREAM entries (or leave it 0: 64)");
  }
  if (c.dp_discovered() && c.engine_scrape_interval_ms == 0) {
    r.errors.push_back("RJ_UPSTREAM_DP_SIZE: auto reads the ranks from the engine scrape; set RJ_ENGINE_SCRAPE_INTERVAL_MS above 0");
  }
  if (ranked && c.exact_inventory == "companion") {
    r.errors.push_back("RJ_UPSTREAM_DP_SIZE: data-parallel ranks with RJ_EXACT_INVENTORY=companion are not supported");
  }
  if (!c.upstream_dns_server.empty()) {
    const size_t colon = c.upstream_dns_server.rfind(':');
    uint32_t port = 0;
    const char* end = c.upstream_dns_server.data() + c.upstream_dns_server.size();
    const bool port_ok = colon != std::string::npos &&
                         std::from_chars(c.upstream_dns_server.data() + colon + 1, end, port).ptr == end && port > 0 &&
                         port <= 65535;
    unsigned a = 0, b = 0, cc = 0, d = 0;
    char tail = 0;
    const bool ip_ok = colon != std::string::npos &&
                       std::sscanf(c.upstream_dns_server.substr(0, colon).c_str(), "%u.%u.%u.%u%c", &a, &b, &cc, &d, &tail) == 4 &&
                       a < 256 && b < 256 && cc < 256 && d < 256;
    if (!port_ok || !ip_ok) r.errors.push_back("RJ_UPSTREAM_DNS_SERVER: expected an IPv4 address and port, e.g. 10.96.0.10:53");
    if (c.upstream_dns.empty()) r.errors.push_back("RJ_UPSTREAM_DNS_SERVER: set without RJ_UPSTREAM_DNS");
  }

  if (!c.gpu_metrics_urls.empty() && !c.upstreams.empty() &&
      c.gpu_metrics_urls.size() != c.upstreams.size()) {
    r.errors.push_back("RJ_GPU_METRICS_URLS: " + std::to_string(c.gpu_metrics_urls.size()) +
                       " URLs for " + std::to_string(c.upstreams.size()) +
                       " RJ_UPSTREAM entries; give one DCGM-exporter URL per upstream, in the "
                       "same order");
  }

  // One "discover" stands for every engine.
  // One item (discover, or an endpoint whose host is *: each engine's own address) stands for
  // every entry and name.
  if (c.kv_event_live_endpoints.size() == 1 && sources > 1) {
    r.config.kv_event_live_endpoints.assign(sources, c.kv_event_live_endpoints[0]);
    if (c.kv_event_replay_endpoints.size() == 1) r.config.kv_event_replay_endpoints.assign(sources, c.kv_event_replay_endpoints[0]);
  }
  for (const auto* list : {&c.kv_event_live_endpoints, &c.kv_event_replay_endpoints}) {
    const bool live = list == &c.kv_event_live_endpoints;
    const std::string name = live ? "RJ_KV_EVENT_LIVE_ENDPOINTS" : "RJ_KV_EVENT_REPLAY_ENDPOINTS";
    if (!list->empty() && sources > 0 && list->size() != sources) {
      r.errors.push_back(name + ": " + std::to_string(list->size()) + " endpoints for " +
                         std::to_string(c.upstreams.size()) + " RJ_UPSTREAM entries and " +
                         std::to_string(c.upstream_dns.size()) +
                         " RJ_UPSTREAM_DNS names; give one per entry, then one per name, in order (\"-\" for "
                         "none), or a single one for all");
    }
    if (live && list->size() == sources && c.upstream_dns.size() > 1) {  // one catalog setting for all DNS engines
      const bool first = (*list)[c.upstreams.size()] == "discover";
      for (size_t i = c.upstreams.size(); i < list->size(); ++i) {
        if (((*list)[i] == "discover") != first) {
          r.errors.push_back(name + ": the RJ_UPSTREAM_DNS names' items must all be discover, or none of them");
          break;
        }
      }
    }
    for (size_t i = c.upstreams.size(); i < list->size(); ++i) {  // a DNS name's engines have no fixed host
      const std::string& e = (*list)[i];
      if (e != "-" && e != "discover" && !e.starts_with("tcp://*:")) {
        r.errors.push_back(name + ": item " + std::to_string(i + 1) +
                           " (an RJ_UPSTREAM_DNS name): give tcp://*:port (each engine's own address), discover or -");
      }
    }
    for (size_t i = 0; i < list->size(); ++i) {
      if (live && (*list)[i] == "discover") continue;
      if (auto problem = zmq_endpoint_problem((*list)[i])) {
        r.errors.push_back(name + ": item " + std::to_string(i + 1) + ": " + *problem);
      }
    }
  }
  for (size_t i = 0; i < c.kv_event_live_endpoints.size() && i < c.kv_event_replay_endpoints.size(); ++i) {
    if (c.kv_event_live_endpoints[i] == "discover" && c.kv_event_replay_endpoints[i] != "-") {
      r.errors.push_back("RJ_KV_EVENT_REPLAY_ENDPOINTS: item " + std::to_string(i + 1) +
                         ": the engine's endpoints are discovered (RJ_KV_EVENT_LIVE_ENDPOINTS says discover); "
                         "give - here");
    }
  }
  if (c.idle_drain_mode == "drain" && c.upstreams.size() < 2 && c.upstream_dns.empty() && c.config_file.empty()) {
    r.errors.push_back("RJ_IDLE_DRAIN_MODE=drain needs at least two engines (RJ_UPSTREAM)");
  }
  const bool companion = c.exact_inventory == "companion";
  if ((c.exact_route_mode == "on" || c.exact_route_mode == "shadow") && c.kv_event_live_endpoints.empty() &&
      !companion) {
    r.errors.push_back("RJ_EXACT_ROUTE_MODE=" + c.exact_route_mode +
                       " needs RJ_KV_EVENT_LIVE_ENDPOINTS or RJ_EXACT_INVENTORY=companion (exact routing reads the "
                       "engines' KV events, or their companions)");
  }
  // RJ_EXACT_INVENTORY=companion: one companion item per static engine and both secret files (read
  // and checked by the app at startup: config never opens them).
  if (companion) {
    if (c.companion_endpoints.size() != c.upstreams.size() || c.upstreams.empty()) {
      r.errors.push_back("RJ_COMPANION_ENDPOINTS: " + std::to_string(c.companion_endpoints.size()) + " endpoints for " +
                         std::to_string(c.upstreams.size()) +
                         " RJ_UPSTREAM entries; RJ_EXACT_INVENTORY=companion needs one per entry, in order (\"-\" "
                         "for an engine that keeps its KV events)");
    }
    for (size_t i = 0; i < c.companion_endpoints.size(); ++i) {
      if (auto problem = companion_endpoint_problem(c.companion_endpoints[i])) {
        r.errors.push_back("RJ_COMPANION_ENDPOINTS: item " + std::to_string(i + 1) + ": " + *problem);
      }
      // One source per engine: a companion item and a KV-event item for the same engine would
      // leave one of them silently unused.
      if (c.companion_endpoints[i] != "-" && i < c.kv_event_live_endpoints.size() &&
          c.kv_event_live_endpoints[i] != "-") {
        r.errors.push_back("RJ_COMPANION_ENDPOINTS: item " + std::to_string(i + 1) +
                           " names a companion for an engine that also has an RJ_KV_EVENT_LIVE_ENDPOINTS item (use "
                           "\"-\" in one of them)");
      }
    }
    if (c.companion_secret_file.empty()) {
      r.errors.push_back("RJ_COMPANION_SECRET_FILE: RJ_EXACT_INVENTORY=companion needs the companions' session secret");
    }
    if (c.companion_digest_secret_file.empty()) {
      r.errors.push_back("RJ_COMPANION_DIGEST_SECRET_FILE: RJ_EXACT_INVENTORY=companion needs the block-digest key");
    }
  } else {
    for (const auto& [name, set] : {std::pair{"RJ_COMPANION_ENDPOINTS", !c.companion_endpoints.empty()},
                                    std::pair{"RJ_COMPANION_SECRET_FILE", !c.companion_secret_file.empty()},
                                    std::pair{"RJ_COMPANION_DIGEST_SECRET_FILE", !c.companion_digest_secret_file.empty()}}) {
      if (set) r.errors.push_back(std::string(name) + ": set without RJ_EXACT_INVENTORY=companion");
    }
  }
  if (!c.peers.empty()) {
    // host:port with a numeric port, each (a name is looked up at run time; its addresses are the peers)
    for (size_t i = 0; i < c.peers.size(); ++i) {
      const std::string& p = c.peers[i];
      const size_t colon = p.rfind(':');
      if (colon == std::string::npos || colon == 0 || !port_number(std::string_view(p).substr(colon + 1), 1)) {
        r.errors.push_back("RJ_PEERS: item " + std::to_string(i + 1) + " is not host:port (a port of 1..65535)");
      }
    }
    if (c.peer_listen.empty()) r.errors.push_back("RJ_PEER_LISTEN: RJ_PEERS needs the UDP host:port to receive on");
    if (c.peer_secret_file.empty()) r.errors.push_back("RJ_PEER_SECRET_FILE: RJ_PEERS needs the replicas' shared secret");
  } else {
    for (const auto& [name, set] : {std::pair{"RJ_PEER_LISTEN", !c.peer_listen.empty()},
                                    std::pair{"RJ_PEER_SECRET_FILE", !c.peer_secret_file.empty()}}) {
      if (set) r.errors.push_back(std::string(name) + ": set without RJ_PEERS");
    }
  }
  if (c.session_affinity_mode != "off" &&
      (c.session_affinity_key.size() < 32 || c.session_affinity_key.size() > 256)) {
    r.errors.push_back("RJ_SESSION_AFFINITY_KEY: " + std::to_string(c.session_affinity_key.size()) +
                       " bytes; RJ_SESSION_AFFINITY_MODE=" + c.session_affinity_mode + " needs a key of 32..256 bytes");
  }
  if (c.session_affinity_mode != "off" && c.session_affinity_bonus_blocks > c.route_max_overlap_blocks) {
    r.errors.push_back("RJ_SESSION_AFFINITY_BONUS_BLOCKS: " + std::to_string(c.session_affinity_bonus_blocks) +
                       " is more than RJ_ROUTE_MAX_OVERLAP_BLOCKS (" + std::to_string(c.route_max_overlap_blocks) + ")");
  }
  if (c.session_affinity_mode != "off" && c.session_affinity_max_load_delta > c.route_max_load_units) {
    r.errors.push_back("RJ_SESSION_AFFINITY_MAX_LOAD_DELTA: " + std::to_string(c.session_affinity_max_load_delta) +
                       " is more than RJ_ROUTE_MAX_LOAD_UNITS (" + std::to_string(c.route_max_load_units) + ")");
  }
  if (exact_tokens_local(c) && (c.tokenizer_mode == "remote-shadow" || c.tokenizer_mode == "local-shadow")) {
    // (not local-shadow: its jobs hold the render pool's workers through a remote /tokenize each,
    // and a request's own render would queue behind them; off becomes local)
    r.errors.push_back("RJ_EXACT_TOKENS=local needs RJ_TOKENIZER_MODE=local or off (the attested local renderer), not " +
                       c.tokenizer_mode);
  }
  if (c.exact_tokens == "local" && c.model_dirs.empty() && c.tokenizer_path.empty()) {
    r.errors.push_back("RJ_EXACT_TOKENS=local needs the model's files: RJ_MODEL_DIR (the engines' model folder)");
  }
  if (!c.model_dirs.empty()) {
    for (const auto& [name, set] : {std::pair{"RJ_TOKENIZER_PATH", !c.tokenizer_path.empty()},
                                    std::pair{"RJ_TOKENIZER_SHA256", !c.tokenizer_sha256.empty()},
                                    std::pair{"RJ_CHAT_TEMPLATE_PATH", !c.chat_template_path.empty()},
                                    std::pair{"RJ_CHAT_TEMPLATE_SHA256", !c.chat_template_sha256.empty()}}) {
      if (set) r.errors.push_back(std::string(name) + ": set with RJ_MODEL_DIR (the folder names the files; give one or the other)");
    }
  }
  if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
    r.errors.push_back("RJ_TLS_CERT_FILE and RJ_TLS_KEY_FILE: give both (HTTPS listeners) or neither");
  }
  if (c.upstream_tls_cert_file.empty() != c.upstream_tls_key_file.empty()) {
    r.errors.push_back("RJ_UPSTREAM_TLS_CERT_FILE and RJ_UPSTREAM_TLS_KEY_FILE: give both (mutual TLS) or neither");
  }
  if (!c.kv_event_replay_endpoints.empty() && c.kv_event_live_endpoints.empty()) {
    r.errors.push_back("RJ_KV_EVENT_REPLAY_ENDPOINTS: set without RJ_KV_EVENT_LIVE_ENDPOINTS");
  }

  for (size_t i = 0; i < c.passthrough_paths.size(); ++i) {
    if (auto problem = path_pattern_problem(c.passthrough_paths[i])) {
      r.errors.push_back("RJ_PASSTHROUGH_PATHS: item " + std::to_string(i + 1) + ": " + *problem);
    }
  }

  if (r.errors.empty()) expand_ranks(r.config);

  // 5. Required options (not when only help is wanted). The engines: RJ_UPSTREAM, or DNS names.
  if (r.action == Action::kRun) {
    bool engines = false;
    for (size_t i = 0; i < table.size(); ++i) {
      if (table[i].env == "RJ_UPSTREAM" || table[i].env == "RJ_UPSTREAM_DNS") engines = engines || provided[i];
    }
    if (!engines) {
      r.errors.push_back("RJ_UPSTREAM is required (or --upstream), unless RJ_UPSTREAM_DNS names the engines: "
                         "engine base URLs, comma-separated");
    }
    for (size_t i = 0; i < table.size(); ++i) {
      if (table[i].required && !provided[i]) {
        r.errors.push_back(std::string(table[i].env) + " is required (or " +
                           std::string(table[i].flag) + "): " + std::string(table[i].doc));
      }
    }
  }
  return r;
}

std::optional<std::map<std::string, std::string>> read_config_file(const std::string& path,
                                                                   std::vector<std::string>& errors) {
  constexpr size_t kMaxBytes = 1 << 20;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    errors.push_back("RJ_CONFIG_FILE: cannot open the file: " + std::string(std::strerror(errno)));
    return std::nullopt;
  }
  std::string text;
  char buf[8192];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() <= kMaxBytes) text.append(buf, n);
  std::fclose(f);
  if (text.size() > kMaxBytes) {
    errors.push_back("RJ_CONFIG_FILE: larger than 1 MiB");
    return std::nullopt;
  }
  std::map<std::string, std::string> out;
  size_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    if (line.starts_with("export ")) line.remove_prefix(7);
    const size_t eq = line.find('=');
    std::string_view name = eq == std::string_view::npos ? line : line.substr(0, eq);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.remove_suffix(1);
    // Line numbers only: a value may be a secret (so a name must look like one, or nothing of the
    // line is repeated).
    const bool name_ok = name.size() > 3 && name.starts_with("RJ_") &&
                         std::all_of(name.begin(), name.end(), [](char ch) {
                           return (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
                         });
    if (eq == std::string_view::npos || !name_ok) {
      errors.push_back("RJ_CONFIG_FILE: line " + std::to_string(line_no) + ": expected RJ_NAME=value");
      continue;
    }
    std::string_view value = line.substr(eq + 1);
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    if (name == "RJ_CONFIG_FILE") {
      errors.push_back("RJ_CONFIG_FILE: line " + std::to_string(line_no) + ": a configuration file cannot name another");
      continue;
    }
    out[std::string(name)] = std::string(value);
  }
  return out;
}

ParseResult parse_process(int argc, char** argv) {
  std::vector<std::string> names;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    names.emplace_back(kv.substr(0, kv.find('=')));
  }
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  // RJ_CONFIG_FILE (or --config-file): its values stand in for what the environment and the
  // command line leave unset.
  std::string file;
  if (const char* v = std::getenv("RJ_CONFIG_FILE")) file = v;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config-file" && i + 1 < args.size()) file = args[i + 1];
    else if (args[i].starts_with("--config-file=")) file = args[i].substr(14);
  }
  std::vector<std::string> file_errors;
  std::map<std::string, std::string> from_file;
  if (!file.empty()) {
    if (auto read = read_config_file(file, file_errors)) from_file = std::move(*read);
  }
  for (const auto& [name, value] : from_file) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  EnvLookup lookup = [&from_file](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v != nullptr) return std::string(v);
    auto it = from_file.find(std::string(name));
    if (it != from_file.end()) return it->second;
    return std::nullopt;
  };
  ParseResult r = parse(names, lookup, args);
  r.errors.insert(r.errors.begin(), file_errors.begin(), file_errors.end());
  for (const auto& [name, value] : from_file) {  // the environment wins: say so (a reload cannot change them)
    if (std::getenv(name.c_str()) != nullptr) r.shadowed.push_back(name);
  }
  return r;
}

std::string help_text() {
  struct Row {
    std::string flag, env, type, def, doc;
  };
  std::vector<Row> rows;
  rows.push_back({"FLAG", "VARIABLE", "TYPE", "DEFAULT", ""});
  for (const Option& o : options()) {
    std::string doc(o.doc);
    if (std::string b = bounds_text(o); !b.empty()) doc += " [" + b + "]";
    if (o.secret) doc += " [secret]";
    rows.push_back({std::string(o.flag), std::string(o.env), std::string(type_name(o.type)),
                    default_display(o, false), doc});
  }
  size_t w_flag = 0, w_env = 0, w_type = 0;
  for (const Row& row : rows) {
    w_flag = std::max(w_flag, row.flag.size());
    w_env = std::max(w_env, row.env.size());
    w_type = std::max(w_type, row.type.size());
  }
  std::string out =
      "Usage: ramjet [--flag=VALUE | --flag VALUE]...\n"
      "       ramjet --help | --help-markdown | --help-metrics | --version\n"
      "       ramjet render ...     offline prompt rendering and tokenization (ramjet render --help)\n"
      "       ramjet manifest ...   a tokenizer manifest from a live engine (ramjet manifest --help)\n"
      "\n"
      "ramjet is a KV-cache-aware load balancer for vLLM. Every option is an RJ_* environment\n"
      "variable with a matching --flag; flags override the environment. Unknown RJ_* names,\n"
      "retired MD_*/DS4_* names and invalid values stop startup, all reported at once.\n"
      "--help-markdown prints this table as docs/configuration.md; --help-metrics prints\n"
      "the metric families as docs/metrics.md; --version prints the version, commit, build\n"
      "type and compiler.\n"
      "\n";
  // One row per option, its description on the next line so the table fits a terminal.
  for (const Row& row : rows) {
    out += "  " + pad(row.flag, w_flag + 2) + pad(row.env, w_env + 2) + pad(row.type, w_type + 2) +
           row.def + "\n";
    if (!row.doc.empty()) out += wrap(row.doc, "      ", 100);
  }
  return out;
}

std::string markdown_reference() {
  std::string out =
      "# Configuration\n"
      "\n"
      "This file is generated by `ramjet --help-markdown` from the options table in "
      "`src/config/`, the same table behind `ramjet --help`; do not edit it by hand. `config_test` "
      "fails when the two disagree; regenerate with `" +
      std::string(kRegenerate) +
      "`.\n"
      "\n"
      "Every option is an `RJ_*` environment variable with a matching command-line flag "
      "(`--flag=VALUE` or `--flag VALUE`); flags override the environment. Startup stops on "
      "invalid or out-of-bounds values, unknown `RJ_*` names, unknown flags, and any variable "
      "with a retired prefix (`MD_*`, `DS4_*`), and every problem is reported at once. Secrets "
      "print as `<redacted>`.\n"
      "\n"
      "| Variable | Flag | Type | Default | Bounds | Description |\n"
      "| --- | --- | --- | --- | --- | --- |\n";
  std::vector<Type> used;
  for (const Option& o : options()) {
    std::string doc(o.doc);
    if (o.secret) doc += " Secret: printed as `<redacted>`.";
    out += "| `" + std::string(o.env) + "` | `" + std::string(o.flag) + "` | " +
           md_cell(type_name(o.type)) + " | " + md_cell(default_display(o, true)) + " | " +
           md_cell(bounds_text(o)) + " | " + md_cell(doc) + " |\n";
    if (std::find(used.begin(), used.end(), o.type) == used.end()) used.push_back(o.type);
  }
  std::sort(used.begin(), used.end());
  out += "\n## Value syntax\n\n";
  for (Type t : used) {
    out += "- **" + std::string(type_name(t)) + "**: " + std::string(type_syntax(t)) + "\n";
  }
  return out;
}

std::vector<std::string> describe(const Config& c) {
  std::vector<std::string> lines;
  for (const Option& o : options()) lines.push_back(std::string(o.env) + "=" + value_text(o, c));
  return lines;
}

}  // namespace ramjet::config
