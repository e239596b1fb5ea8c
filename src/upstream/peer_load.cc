#include "upstream/peer_load.h"

#include <openssl/rand.h>

#include <boost/asio/ip/udp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "common/log.h"
#include "upstream/fleet.h"

namespace ramjet::upstream {

namespace asio = boost::asio;
using asio::ip::udp;

namespace {

constexpr int64_t kMaxSkewMs = 10'000;

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

using metrics::Family;
using metrics::MetricKind;

constexpr std::array<Family, 3> kFamilies = {{
    {"ramjet_peer_datagrams_total", MetricKind::kCounter, "outcome",
     "RJ_PEERS load datagrams received: accepted, malformed (size, magic, version, count), bad_mac "
     "(not signed with RJ_PEER_SECRET_FILE's secret), replayed (a sequence not above the sender's "
     "last), out_of_time (sent more than 10 s from this replica's clock), own (this replica's own), "
     "no_room (64 fresh peers already)."},
    {"ramjet_peer_datagrams_sent_total", MetricKind::kCounter, "outcome",
     "RJ_PEERS load datagrams sent: ok, error (the peer's name did not resolve or the send failed)."},
    {"ramjet_peers_fresh", MetricKind::kGauge, "",
     "Peer replicas whose load arrived within the stale time (4 intervals, at least 250 ms): their "
     "in-flight load counts in routing."},
}};

}  // namespace

std::span<const metrics::Family> peer_sync_families() { return kFamilies; }

// ------------------------------------------------------------------------------------ the board

PeerLoadBoard::PeerLoadBoard(size_t engines, int64_t stale_ms, const Clock& clock)
    : engines_(engines), stale_ms_(stale_ms), clock_(clock) {
  for (Slot& s : slots_) {
    s.inflight = std::make_unique<std::atomic<uint32_t>[]>(engines_);
    s.units = std::make_unique<std::atomic<uint32_t>[]>(engines_);
  }
}

bool PeerLoadBoard::fresh(const Slot& s, int64_t now_ms) const {
  return s.sender.load(std::memory_order_acquire) != 0 &&
         now_ms - s.at_ms.load(std::memory_order_acquire) <= stale_ms_;
}

PeerOutcome PeerLoadBoard::apply(uint64_t sender, uint64_t seq, std::span<const PeerEntry> by_ordinal) {
  const int64_t now = clock_.now_ms();
  Slot* slot = nullptr;
  Slot* free = nullptr;
  for (Slot& s : slots_) {
    const uint64_t who = s.sender.load(std::memory_order_relaxed);
    if (who == sender) {
      slot = &s;
      break;
    }
    if (free == nullptr && (who == 0 || !fresh(s, now))) free = &s;
  }
  if (slot != nullptr && seq <= slot->last_seq) return PeerOutcome::kReplayed;
  if (slot == nullptr) {
    if (free == nullptr) return PeerOutcome::kNoRoom;
    slot = free;
    // A new sender in a slot: readers skip it (stale) until the values below are in.
    slot->at_ms.store(INT64_MIN / 2, std::memory_order_release);
    slot->sender.store(sender, std::memory_order_release);
  }
  slot->last_seq = seq;
  for (size_t i = 0; i < engines_; ++i) {
    const PeerEntry e = i < by_ordinal.size() ? by_ordinal[i] : PeerEntry{};
    slot->inflight[i].store(e.inflight, std::memory_order_relaxed);
    slot->units[i].store(e.units, std::memory_order_relaxed);
  }
  slot->at_ms.store(now, std::memory_order_release);
  return PeerOutcome::kAccepted;
}

int64_t PeerLoadBoard::units(size_t i, int64_t now_ms) const {
  if (i >= engines_) return 0;
  int64_t sum = 0;
  for (const Slot& s : slots_) {
    if (fresh(s, now_ms)) sum += s.units[i].load(std::memory_order_relaxed);
  }
  return sum;
}

int64_t PeerLoadBoard::inflight(size_t i, int64_t now_ms) const {
  if (i >= engines_) return 0;
  int64_t sum = 0;
  for (const Slot& s : slots_) {
    if (fresh(s, now_ms)) sum += s.inflight[i].load(std::memory_order_relaxed);
  }
  return sum;
}

size_t PeerLoadBoard::fresh_peers(int64_t now_ms) const {
  size_t n = 0;
  for (const Slot& s : slots_) n += fresh(s, now_ms) ? 1 : 0;
  return n;
}

// ------------------------------------------------------------------------------------ the loop

// Handlers in flight hold the Impl (shared_from_this); its two loop bodies refer to it by a raw
// pointer, so nothing holds itself: the Impl goes with the last handler once stopped.
struct PeerSync::Impl : std::enable_shared_from_this<PeerSync::Impl> {
  explicit Impl(asio::io_context& ctx) : socket(ctx), timer(ctx), resolver(ctx) {}
  std::function<void()> receive, tick;
  udp::socket socket;
  asio::steady_timer timer;
  udp::resolver resolver;
  std::vector<std::vector<udp::endpoint>> peers;  // resolved, by RJ_PEERS item: every address of a name
  std::chrono::steady_clock::time_point resolved_at{};
  std::vector<uint64_t> incarnations, keys;  // per slot: the member whose key `keys` holds
  std::unordered_map<uint64_t, size_t> ordinal_of;
  std::array<uint8_t, kMaxDatagram + 1> buf{};
  udp::endpoint from, local;
  uint64_t self = 0, seq = 0;
  bool stopped = false;
};

namespace {

std::optional<std::pair<std::string, std::string>> split_host_port(const std::string& s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) return std::nullopt;
  std::string host = s.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return std::pair{host, s.substr(colon + 1)};
}

}  // namespace

PeerSync::PeerSync(PeerSyncConfig config, const Fleet& fleet, PeerLoadBoard& board)
    : config_(std::move(config)), fleet_(fleet), board_(board) {}

PeerSync::~PeerSync() { stop(); }

std::optional<std::string> PeerSync::start() {
  asio::io_context& ctx = ctx_;
  auto impl = std::make_shared<Impl>(ctx);
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&impl->self), sizeof impl->self) != 1 || impl->self == 0) {
    impl->self = static_cast<uint64_t>(unix_ms()) | 1;
  }
  auto hp = split_host_port(config_.listen);
  if (!hp) return "RJ_PEER_LISTEN: not host:port";
  boost::system::error_code ec;
  auto found = impl->resolver.resolve(hp->first, hp->second, udp::resolver::numeric_service, ec);
  if (ec || found.empty()) return "RJ_PEER_LISTEN: cannot resolve its host";
  const udp::endpoint local = found.begin()->endpoint();
  impl->socket.open(local.protocol(), ec);
  if (!ec) impl->socket.bind(local, ec);
  if (ec) return "RJ_PEER_LISTEN: cannot bind the UDP socket: " + ec.message();
  impl->local = impl->socket.local_endpoint(ec);
  port_.store(impl->local.port(), std::memory_order_relaxed);
  impl->peers.resize(config_.peers.size());
  impl_ = impl;

  // Receive: verify, map the sender's engine keys to this replica's ordinals, record.
  impl->receive = [this, raw = impl.get()] {
    raw->socket.async_receive_from(
        asio::buffer(raw->buf), raw->from, [this, impl = raw->shared_from_this()](boost::system::error_code rec, size_t n) {
          if (impl->stopped || rec == asio::error::operation_aborted) return;
          if (!rec) {
            PeerOutcome o = PeerOutcome::kMalformed;
            if (n <= kMaxDatagram) {
              PeerDecoded d = decode_peer_message(std::span(impl->buf.data(), n), config_.secret);
              o = d.outcome;
              if (o == PeerOutcome::kAccepted && d.message.sender == impl->self) o = PeerOutcome::kOwn;
              if (o == PeerOutcome::kAccepted &&
                  std::abs(static_cast<int64_t>(d.message.sent_unix_ms) - unix_ms()) > kMaxSkewMs) {
                o = PeerOutcome::kOutOfTime;
              }
              if (o == PeerOutcome::kAccepted) {
                thread_local std::vector<PeerEntry> by_ordinal;
                by_ordinal.assign(fleet_.size(), PeerEntry{});
                for (const PeerEntry& e : d.message.entries) {
                  auto it = impl->ordinal_of.find(e.engine_key);
                  if (it != impl->ordinal_of.end()) by_ordinal[it->second] = e;
                }
                o = board_.apply(d.message.sender, d.message.seq, by_ordinal);
              }
            }
            received_[static_cast<size_t>(o)].fetch_add(1, std::memory_order_relaxed);
          }
          impl->receive();
        });
  };

  // Send: every interval, this replica's load per engine to every peer; keys and names refreshed.
  impl->tick = [this, impl = impl.get()] {
    if (impl->stopped) return;
    const size_t slots = fleet_.size();
    impl->incarnations.resize(slots, 0);
    impl->keys.resize(slots, 0);
    bool changed = false;
    PeerMessage m;
    m.sender = impl->self;
    m.seq = ++impl->seq;
    m.sent_unix_ms = static_cast<uint64_t>(unix_ms());
    for (size_t i = 0; i < slots; ++i) {
      auto member = fleet_.member(i);
      const uint64_t inc = member ? member->incarnation : 0;
      if (inc != impl->incarnations[i]) {
        impl->incarnations[i] = inc;
        impl->keys[i] = member ? peer_engine_key(member->url, config_.secret) : 0;
        changed = true;
      }
      if (!member) continue;
      const Engine& e = fleet_.at(i);
      const auto clamp = [](int64_t v) { return static_cast<uint32_t>(std::clamp<int64_t>(v, 0, UINT32_MAX)); };
      m.entries.push_back(PeerEntry{impl->keys[i], clamp(e.inflight()), clamp(e.load_units())});
    }
    if (changed) {
      impl->ordinal_of.clear();
      for (size_t i = 0; i < slots; ++i) {
        if (impl->incarnations[i] != 0) impl->ordinal_of[impl->keys[i]] = i;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - impl->resolved_at > std::chrono::seconds(10)) {
      impl->resolved_at = now;
      for (size_t k = 0; k < config_.peers.size(); ++k) {
        auto php = split_host_port(config_.peers[k]);
        boost::system::error_code rec;
        auto r = php ? impl->resolver.resolve(php->first, php->second, udp::resolver::numeric_service, rec)
                     : udp::resolver::results_type{};
        if (!php || rec || r.empty()) continue;  // the last good answer stays
        impl->peers[k].clear();
        for (const auto& e : r) {
          if (std::find(impl->peers[k].begin(), impl->peers[k].end(), e.endpoint()) == impl->peers[k].end()) {
            impl->peers[k].push_back(e.endpoint());
          }
          if (impl->peers[k].size() >= PeerLoadBoard::kMaxPeers) break;
        }
      }
    }
    auto bytes = std::make_shared<std::vector<uint8_t>>(encode_peer_message(m, config_.secret));
    for (const auto& addresses : impl->peers) {
      if (addresses.empty()) send_errors_.fetch_add(1, std::memory_order_relaxed);  // never resolved
      for (const udp::endpoint& peer : addresses) {
        if (peer == impl->local) continue;  // this replica, listed with the others
        impl->socket.async_send_to(asio::buffer(*bytes), peer, [this, bytes](boost::system::error_code sec, size_t) {
          (sec ? send_errors_ : sent_).fetch_add(1, std::memory_order_relaxed);
        });
      }
    }
    impl->timer.expires_after(std::chrono::milliseconds(config_.interval_ms));
    impl->timer.async_wait([self = impl->shared_from_this()](boost::system::error_code tec) {
      if (!tec && !self->stopped) self->tick();
    });
  };
  asio::post(ctx, [impl] {
    impl->receive();
    impl->tick();
  });
  thread_ = std::thread([this] { ctx_.run(); });
  return std::nullopt;
}

void PeerSync::stop() {
  auto impl = std::exchange(impl_, nullptr);
  if (!impl) return;
  asio::post(ctx_, [impl] {
    impl->stopped = true;
    boost::system::error_code ec;
    impl->timer.cancel();
    impl->socket.close(ec);
    impl->receive = nullptr;  // they hold `this`: not past stop()
    impl->tick = nullptr;
  });
  if (thread_.joinable()) thread_.join();
  // Handlers still queued hold `impl` (and the lambdas that hold `this`): run them down here.
  ctx_.restart();
  ctx_.poll();
}

void PeerSync::write_metrics(metrics::Exposition& x) const {
  x.family(kFamilies[0]);
  for (size_t o = 0; o < static_cast<size_t>(PeerOutcome::kCount); ++o) {
    x.sample(kFamilies[0].name, "outcome=\"" + std::string(label(static_cast<PeerOutcome>(o))) + "\"",
             received_[o].load(std::memory_order_relaxed));
  }
  x.family(kFamilies[1]);
  x.sample(kFamilies[1].name, "outcome=\"ok\"", sent_.load(std::memory_order_relaxed));
  x.sample(kFamilies[1].name, "outcome=\"error\"", send_errors_.load(std::memory_order_relaxed));
  x.family(kFamilies[2]);
  x.sample(kFamilies[2].name, "", uint64_t{board_.fresh_peers(board_.clock().now_ms())});
}

}  // namespace ramjet::upstream
