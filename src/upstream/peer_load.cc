#include "upstream/peer_load.h"

#include <openssl/crypto.h>
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

constexpr std::array<Family, 4> kFamilies = {{
    {"ramjet_peer_datagrams_total", MetricKind::kCounter, "outcome",
     "RJ_PEERS load datagrams received: accepted, malformed (size, magic, version, reserved or "
     "trailing bytes, count, a zero sender), bad_mac (not signed with RJ_PEER_SECRET_FILE's "
     "secret), replayed (a sequence not above the sender's last), out_of_time (sent more than 10 s "
     "from this replica's clock), own (this replica's own: expected when it listens on a wildcard "
     "address and its own address is among RJ_PEERS), no_room (64 peers heard from in the last "
     "15 s), receive_error (the socket's; the receive is armed again 10 ms later)."},
    {"ramjet_peer_datagrams_sent_total", MetricKind::kCounter, "outcome",
     "RJ_PEERS load datagrams sent: ok, error (the peer's name did not resolve or the send failed)."},
    {"ramjet_peers_fresh", MetricKind::kGauge, "",
     "Peer replicas whose load arrived within the stale time (4 intervals, at least 250 ms): their "
     "in-flight load counts in routing."},
    {"ramjet_peer_entries_total", MetricKind::kCounter, "outcome",
     "Engine entries in accepted RJ_PEERS datagrams: matched (an engine of this replica's), "
     "unknown_engine (an engine this replica does not list under the same URL: every replica must "
     "name each engine alike, or its load there is not shared)."},
}};

}  // namespace

std::span<const metrics::Family> peer_sync_families() { return kFamilies; }

// ------------------------------------------------------------------------------------ the board

PeerLoadBoard::PeerLoadBoard(size_t engines, int64_t stale_ms, const Clock& clock, int64_t retain_ms)
    : engines_(engines),
      stale_ms_(stale_ms),
      retain_ms_(std::max(retain_ms, stale_ms)),
      clock_(clock),
      sum_inflight_(std::make_unique<std::atomic<int64_t>[]>(engines)),
      sum_units_(std::make_unique<std::atomic<int64_t>[]>(engines)) {
  for (Slot& s : slots_) {
    s.inflight = std::make_unique<uint32_t[]>(engines_);
    s.units = std::make_unique<uint32_t[]>(engines_);
  }
}

PeerOutcome PeerLoadBoard::apply(uint64_t sender, uint64_t seq, std::span<const PeerEntry> by_ordinal) {
  const int64_t now = clock_.now_ms();
  Slot* slot = nullptr;
  Slot* empty = nullptr;
  Slot* retired = nullptr;
  for (Slot& s : slots_) {
    if (s.sender == sender && sender != 0) {
      slot = &s;
      break;
    }
    if (s.sender == 0) {
      if (empty == nullptr) empty = &s;
    } else if (retired == nullptr && now - s.at_ms > retain_ms_) {
      retired = &s;  // quiet for longer than a datagram of its can be replayed: its seq may go
    }
  }
  if (slot != nullptr && seq <= slot->last_seq) return PeerOutcome::kReplayed;
  if (slot == nullptr) {
    slot = empty != nullptr ? empty : retired;
    if (slot == nullptr) return PeerOutcome::kNoRoom;
    slot->sender = sender;
  }
  slot->last_seq = seq;
  slot->at_ms = now;
  for (size_t i = 0; i < engines_; ++i) {
    const PeerEntry e = i < by_ordinal.size() ? by_ordinal[i] : PeerEntry{};
    slot->inflight[i] = e.inflight;
    slot->units[i] = e.units;
  }
  refresh(now);
  return PeerOutcome::kAccepted;
}

void PeerLoadBoard::refresh(int64_t now_ms) {
  size_t fresh = 0;
  for (size_t i = 0; i < engines_; ++i) {
    int64_t inflight = 0, units = 0;
    for (const Slot& s : slots_) {
      if (s.sender == 0 || now_ms - s.at_ms > stale_ms_) continue;
      inflight += s.inflight[i];
      units += s.units[i];
    }
    sum_inflight_[i].store(inflight, std::memory_order_relaxed);
    sum_units_[i].store(units, std::memory_order_relaxed);
  }
  uint32_t lane = 0;
  const uint64_t self = self_.load(std::memory_order_relaxed);
  for (const Slot& s : slots_) {
    const bool is_fresh = s.sender != 0 && now_ms - s.at_ms <= stale_ms_;
    fresh += is_fresh ? 1 : 0;
    lane += is_fresh && s.sender < self ? 1 : 0;
  }
  fresh_.store(fresh, std::memory_order_relaxed);
  lane_.store(lane, std::memory_order_relaxed);
  sums_at_.store(now_ms, std::memory_order_release);
}

bool PeerLoadBoard::current(int64_t now_ms) const {
  // Sums the writer has not refreshed for a stale time (its thread stopped or stalled) are dropped.
  return now_ms - sums_at_.load(std::memory_order_acquire) <= stale_ms_;
}

int64_t PeerLoadBoard::units(size_t i, int64_t now_ms) const {
  return i < engines_ && current(now_ms) ? sum_units_[i].load(std::memory_order_relaxed) : 0;
}

int64_t PeerLoadBoard::inflight(size_t i, int64_t now_ms) const {
  return i < engines_ && current(now_ms) ? sum_inflight_[i].load(std::memory_order_relaxed) : 0;
}

size_t PeerLoadBoard::fresh_peers(int64_t now_ms) const {
  return current(now_ms) ? fresh_.load(std::memory_order_relaxed) : 0;
}

uint32_t PeerLoadBoard::lane(int64_t now_ms) const {
  return current(now_ms) ? lane_.load(std::memory_order_relaxed) : 0;
}

// ------------------------------------------------------------------------------------ the loop

// Handlers in flight hold the Impl (shared_from_this); its two loop bodies refer to it by a raw
// pointer, so nothing holds itself: the Impl goes with the last handler once stopped.
struct PeerSync::Impl : std::enable_shared_from_this<PeerSync::Impl> {
  explicit Impl(asio::io_context& ctx) : socket(ctx), timer(ctx), resolver(ctx), retry(ctx) {}
  std::function<void()> receive, tick;
  udp::socket socket;
  asio::steady_timer timer;
  udp::resolver resolver;
  std::vector<std::vector<udp::endpoint>> peers;  // resolved, by RJ_PEERS item: every address of a name
  std::optional<std::chrono::steady_clock::time_point> resolved_at;  // the last lookups started
  asio::steady_timer retry;  // re-arms the receive after an error
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

PeerSync::~PeerSync() {
  stop();
  OPENSSL_cleanse(config_.secret.data(), config_.secret.size());
}

std::optional<std::string> PeerSync::start() {
  asio::io_context& ctx = ctx_;
  auto impl = std::make_shared<Impl>(ctx);
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&impl->self), sizeof impl->self) != 1 || impl->self == 0) {
    impl->self = static_cast<uint64_t>(unix_ms()) | 1;
  }
  board_.set_self(impl->self);
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
          if (rec) {  // counted; the receive is armed again a moment later (no spin on an error that stays)
            received_[static_cast<size_t>(PeerOutcome::kReceiveError)].fetch_add(1, std::memory_order_relaxed);
            impl->retry.expires_after(std::chrono::milliseconds(10));
            impl->retry.async_wait([impl](boost::system::error_code) {
              if (!impl->stopped) impl->receive();
            });
            return;
          }
          {
            PeerOutcome o = PeerOutcome::kMalformed;
            if (n <= kMaxDatagram) {
              PeerDecoded d = decode_peer_message(std::span(impl->buf.data(), n), config_.secret);
              o = d.outcome;
              if (o == PeerOutcome::kAccepted && d.message.sender == impl->self) o = PeerOutcome::kOwn;
              const uint64_t sent = d.message.sent_unix_ms, now = static_cast<uint64_t>(unix_ms());
              if (o == PeerOutcome::kAccepted && (sent > now ? sent - now : now - sent) > kMaxSkewMs) {
                o = PeerOutcome::kOutOfTime;
              }
              if (o == PeerOutcome::kAccepted) {
                thread_local std::vector<PeerEntry> by_ordinal;
                by_ordinal.assign(fleet_.size(), PeerEntry{});
                uint64_t unknown = 0;
                for (const PeerEntry& e : d.message.entries) {
                  auto it = impl->ordinal_of.find(e.engine_key);
                  if (it != impl->ordinal_of.end()) by_ordinal[it->second] = e;
                  else ++unknown;
                }
                entries_matched_.fetch_add(d.message.entries.size() - unknown, std::memory_order_relaxed);
                entries_unknown_.fetch_add(unknown, std::memory_order_relaxed);
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
    int64_t own_inflight = 0;
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
      const PeerEntry entry{impl->keys[i], clamp(e.inflight()), clamp(e.load_units())};
      own_inflight += entry.inflight;
      // An engine with nothing of ours on it is left out (reads as zero): a big fleet's datagram
      // stays the size of its busy engines.
      if (entry.inflight != 0 || entry.units != 0) m.entries.push_back(entry);
    }
    if (changed) {
      impl->ordinal_of.clear();
      for (size_t i = 0; i < slots; ++i) {
        if (impl->incarnations[i] != 0) impl->ordinal_of[impl->keys[i]] = i;
      }
    }
    board_.load_sent(own_inflight);  // what the peers will know of this replica's requests
    board_.refresh(board_.clock().now_ms());  // peers that went quiet drop out of the sums
    const auto now = std::chrono::steady_clock::now();
    if (!impl->resolved_at || now - *impl->resolved_at > std::chrono::seconds(10)) {
      impl->resolved_at = now;
      for (size_t k = 0; k < config_.peers.size(); ++k) {
        auto php = split_host_port(config_.peers[k]);
        if (!php) continue;
        // Asynchronous: a slow name service never holds the sends and receives; each answer
        // replaces that item's addresses when it comes (a failed lookup keeps the last ones).
        impl->resolver.async_resolve(
            impl->local.protocol(), php->first, php->second, udp::resolver::numeric_service,
            [impl = impl->shared_from_this(), k](boost::system::error_code rec, udp::resolver::results_type r) {
              if (rec || r.empty() || impl->stopped) return;
              std::vector<udp::endpoint> addresses;
              for (const auto& e : r) {
                if (std::find(addresses.begin(), addresses.end(), e.endpoint()) == addresses.end()) {
                  addresses.push_back(e.endpoint());
                }
                if (addresses.size() >= PeerLoadBoard::kMaxPeers) break;
              }
              impl->peers[k] = std::move(addresses);
            });
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
  asio::post(ctx_, [this, impl] {
    // A last datagram with nothing in it: the peers forget this replica's load now, not a stale
    // time later.
    PeerMessage last{.sender = impl->self, .seq = ++impl->seq, .sent_unix_ms = static_cast<uint64_t>(unix_ms()),
                     .entries = {}};
    const std::vector<uint8_t> bytes = encode_peer_message(last, config_.secret);
    boost::system::error_code ec;
    for (const auto& addresses : impl->peers) {
      for (const udp::endpoint& peer : addresses) {
        if (peer != impl->local) impl->socket.send_to(asio::buffer(bytes), peer, 0, ec);
      }
    }
    impl->stopped = true;
    impl->timer.cancel();
    impl->retry.cancel();
    impl->resolver.cancel();
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
  x.family(kFamilies[3]);
  x.sample(kFamilies[3].name, "outcome=\"matched\"", entries_matched_.load(std::memory_order_relaxed));
  x.sample(kFamilies[3].name, "outcome=\"unknown_engine\"", entries_unknown_.load(std::memory_order_relaxed));
}

}  // namespace ramjet::upstream
