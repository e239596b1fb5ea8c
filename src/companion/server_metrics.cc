// Server's exposition: the ramjet_companion_* families (one table) and /health's JSON.
#include "companion/server.h"

#include <iterator>
#include <string>

namespace ramjet::companion {

using cache::events::FenceMode;

namespace {

constexpr metrics::Family kFamilies[] = {
    {"ramjet_companion_clients", metrics::MetricKind::kGauge, "", "Clients served now (snapshot sent, tail running)."},
    {"ramjet_companion_client_connections_total", metrics::MetricKind::kCounter, "outcome",
     "Client connections by outcome: accepted (given a thread) and served (sent a snapshot) count progress; each "
     "connection then ends once, refused (uid, bad_hello, hello_timeout, replayed_challenge; too_many_clients: "
     "before a thread) or ended (reset, slow_client, shutdown, write_failed, peer_closed, not_trusted, "
     "snapshot_too_large)."},
    {"ramjet_companion_events_forwarded_total", metrics::MetricKind::kCounter, "",
     "Event frames written to clients (one per applied KV-event batch per client)."},
    {"ramjet_companion_snapshots_total", metrics::MetricKind::kCounter, "", "Snapshots sent."},
    {"ramjet_companion_snapshot_bytes", metrics::MetricKind::kGauge, "", "The last snapshot frame's size in bytes."},
    {"ramjet_companion_resets_total", metrics::MetricKind::kCounter, "",
     "Companion generation bumps: the engine's state left the one the clients' snapshots were built at."},
    {"ramjet_companion_generation", metrics::MetricKind::kGauge, "",
     "The companion's generation (frames and snapshots carry it)."},
    {"ramjet_companion_index_blocks", metrics::MetricKind::kGauge, "",
     "Blocks in the digest inventory: resident ones and those kept because a resident block hangs below them "
     "(as ramjet_kv_index_blocks counts them)."},
    {"ramjet_companion_index_resident_blocks", metrics::MetricKind::kGauge, "",
     "Resident blocks in the digest inventory."},
    {"ramjet_companion_kv_state", metrics::MetricKind::kGauge, "state",
     "1 for the engine's KV-event trust state now (trusted, replaying, fenced), 0 for the others."},
    {"ramjet_companion_kv_generation", metrics::MetricKind::kGauge, "",
     "The subscriber's generation: bumped whenever the inventory starts again from empty."},
    {"ramjet_companion_kv_connected", metrics::MetricKind::kGauge, "",
     "1 while the engine's live KV-event socket is connected."},
    {"ramjet_companion_kv_batches_total", metrics::MetricKind::kCounter, "source",
     "KV-event batches received from the engine: live, replay."},
    {"ramjet_companion_kv_errors_total", metrics::MetricKind::kCounter, "kind",
     "KV-event messages refused: bad_frame (envelope), decode (payload), index (the inventory could not follow)."},
};

}  // namespace

// write_metrics() writes them in this order.
static_assert(std::size(kFamilies) == 14);

std::span<const metrics::Family> Server::families() { return kFamilies; }

void Server::write_metrics(metrics::Exposition& x) const {
  const auto& e = engine_stats();
  const auto u = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  size_t at = 0;
  const auto family = [&] {  // the table's next family: header written, name returned
    x.family(kFamilies[at]);
    return kFamilies[at++].name;
  };
  auto name = family();
  x.sample(name, "", stats_.clients.load(std::memory_order_relaxed));
  name = family();
  for (size_t i = 0; i < static_cast<size_t>(ServerOutcome::kCount_); ++i) {
    x.sample(name, "outcome=\"" + std::string(label(static_cast<ServerOutcome>(i))) + "\"", u(stats_.connections[i]));
  }
  x.sample(family(), "", u(stats_.events_forwarded));
  x.sample(family(), "", u(stats_.snapshots));
  x.sample(family(), "", u(stats_.snapshot_bytes));
  x.sample(family(), "", u(stats_.resets));
  x.sample(family(), "", generation());
  x.sample(family(), "", static_cast<uint64_t>(index_blocks()));
  x.sample(family(), "", static_cast<uint64_t>(inventory_.shard().resident_blocks()));
  name = family();
  const FenceMode m = mode();
  for (FenceMode s : {FenceMode::kTrusted, FenceMode::kReplaying, FenceMode::kFenced}) {
    x.sample(name, "state=\"" + std::string(cache::events::label(s)) + "\"", uint64_t{s == m ? 1u : 0u});
  }
  x.sample(family(), "", engine_generation());
  x.sample(family(), "", uint64_t{e.connected.load(std::memory_order_relaxed) ? 1u : 0u});
  name = family();
  x.sample(name, "source=\"live\"", u(e.batches));
  x.sample(name, "source=\"replay\"", u(e.replayed));
  name = family();
  x.sample(name, "kind=\"bad_frame\"", u(e.bad_frames));
  x.sample(name, "kind=\"decode\"", u(e.decode_errors));
  x.sample(name, "kind=\"index\"", u(e.index_errors));
}

std::string Server::health_json() const {
  const FenceMode m = mode();
  std::string out = "{\"status\":\"";
  out += m == FenceMode::kTrusted ? "ok" : "fenced";
  out += "\",\"kv_state\":\"";
  out += cache::events::label(m);
  out += "\",\"clients\":" + std::to_string(stats_.clients.load(std::memory_order_relaxed));
  out += ",\"blocks\":" + std::to_string(index_blocks()) + "}";
  return out;
}

}  // namespace ramjet::companion
