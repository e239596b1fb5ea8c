#include "companion/client.h"

#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/fd.h"
#include "common/log.h"

namespace ramjet::companion {

namespace cev = cache::events;
using cache::events::FenceMode;

std::string_view label(Outcome o) {
  switch (o) {
    case Outcome::kSnapshot: return "snapshot";
    case Outcome::kConnectFailed: return "connect_failed";
    case Outcome::kTimeout: return "timeout";
    case Outcome::kEof: return "eof";
    case Outcome::kIoError: return "io_error";
    case Outcome::kTruncated: return "truncated";
    case Outcome::kBadMagic: return "bad_magic";
    case Outcome::kBadVersion: return "bad_version";
    case Outcome::kOversized: return "oversized";
    case Outcome::kMalformed: return "malformed";
    case Outcome::kUnknownType: return "unknown_type";
    case Outcome::kWrongDirection: return "wrong_direction";
    case Outcome::kBadMac: return "bad_mac";
    case Outcome::kGap: return "gap";
    case Outcome::kGenerationChanged: return "generation_changed";
    case Outcome::kBadChecksum: return "bad_checksum";
    case Outcome::kLimit: return "limit";
    case Outcome::kWrongChallenge: return "wrong_challenge";
    case Outcome::kWrongKey: return "wrong_key";
    case Outcome::kImport: return "import";
    case Outcome::kDecodeError: return "decode_error";
    case Outcome::kIndexError: return "index_error";
    case Outcome::kOutOfOrder: return "out_of_order";
    case Outcome::kIdentityChanged: return "identity_changed";
    case Outcome::kDisconnectShutdown: return "disconnect_shutdown";
    case Outcome::kDisconnectReset: return "disconnect_reset";
    case Outcome::kDisconnectSlowClient: return "disconnect_slow_client";
    case Outcome::kDisconnectIdentityChanged: return "disconnect_identity_changed";
    case Outcome::kDisconnectError: return "disconnect_error";
    case Outcome::kCount_: break;
  }
  return "unknown";
}

Outcome outcome_of(FrameErrc e) {
  switch (e) {
    case FrameErrc::kTruncated: return Outcome::kTruncated;
    case FrameErrc::kBadMagic: return Outcome::kBadMagic;
    case FrameErrc::kBadVersion: return Outcome::kBadVersion;
    case FrameErrc::kUnknownType: return Outcome::kUnknownType;
    case FrameErrc::kWrongDirection: return Outcome::kWrongDirection;
    case FrameErrc::kOversized: return Outcome::kOversized;
    case FrameErrc::kBadMac: return Outcome::kBadMac;
    case FrameErrc::kGap: return Outcome::kGap;
    case FrameErrc::kGenerationChanged: return Outcome::kGenerationChanged;
    case FrameErrc::kMalformed: return Outcome::kMalformed;
  }
  return Outcome::kMalformed;
}

Outcome outcome_of(SnapshotErrc e) {
  switch (e) {
    case SnapshotErrc::kTruncated: return Outcome::kTruncated;
    case SnapshotErrc::kBadMagic: return Outcome::kBadMagic;
    case SnapshotErrc::kBadVersion: return Outcome::kBadVersion;
    case SnapshotErrc::kOversized: return Outcome::kOversized;
    case SnapshotErrc::kBadChecksum: return Outcome::kBadChecksum;
    case SnapshotErrc::kLimit: return Outcome::kLimit;
    case SnapshotErrc::kMalformed: return Outcome::kMalformed;
    case SnapshotErrc::kWrongChallenge: return Outcome::kWrongChallenge;
    case SnapshotErrc::kWrongKey: return Outcome::kWrongKey;
    case SnapshotErrc::kImport: return Outcome::kImport;
  }
  return Outcome::kMalformed;
}

Outcome outcome_of(DisconnectReason r) {
  switch (r) {
    case DisconnectReason::kShutdown: return Outcome::kDisconnectShutdown;
    case DisconnectReason::kReset: return Outcome::kDisconnectReset;
    case DisconnectReason::kSlowClient: return Outcome::kDisconnectSlowClient;
    case DisconnectReason::kIdentityChanged: return Outcome::kDisconnectIdentityChanged;
    case DisconnectReason::kError: return Outcome::kDisconnectError;
  }
  return Outcome::kDisconnectError;
}

namespace {

constexpr auto kStopped = Outcome::kCount_;  // session(): the client is stopping (nothing to count)

Outcome outcome_of(IoStatus s) {
  switch (s) {
    case IoStatus::kTimeout: return Outcome::kTimeout;
    case IoStatus::kEof: return Outcome::kEof;
    case IoStatus::kStopped: return kStopped;
    case IoStatus::kOk:
    case IoStatus::kError: break;
  }
  return Outcome::kIoError;
}

}  // namespace

Client::Client(ClientOptions options, const SessionSecret& secret)
    : options_(std::move(options)), secret_(secret), snapshot_limits_(snapshot_limits_for(options_.inventory.shard.max_blocks)) {
  frame_limits_.max_snapshot_bytes = snapshot_limits_.max_bytes;
  if (!options_.digest) {  // a wiring bug: the client only keeps digest inventories
    spdlog::critical("companion for upstream {}: no block-digest key", options_.upstream);
    std::abort();
  }
  for (auto& inv : inventories_) inv = std::make_unique<cev::Inventory>(options_.inventory, options_.digest);
  backoff_ = options_.backoff_min;
}

Client::~Client() {
  stop();
  OPENSSL_cleanse(secret_.data(), secret_.size());
}

void Client::start() {
  if (thread_.joinable()) return;
  stop_.store(false, std::memory_order_release);
  started_ = std::chrono::steady_clock::now();
  thread_ = std::thread([this] { run(); });
}

void Client::request_stop() {
  {
    std::lock_guard lock(sleep_mu_);
    stop_.store(true, std::memory_order_release);
  }
  sleep_cv_.notify_all();
}

void Client::stop() {
  request_stop();
  if (thread_.joinable()) thread_.join();
}

bool Client::sleep_for(std::chrono::milliseconds d) {
  std::unique_lock lock(sleep_mu_);
  sleep_cv_.wait_for(lock, d, [this] { return stop_.load(std::memory_order_acquire); });
  return !stop_.load(std::memory_order_acquire);
}

void Client::unpublish() {
  published_.store(nullptr, std::memory_order_release);
  current_.store(nullptr, std::memory_order_release);
  set_mode(FenceMode::kFenced);
}

void Client::run() {
  std::optional<Outcome> last_logged;
  while (!stop_.load(std::memory_order_acquire)) {
    bool was_trusted = false;
    const Outcome o = session(was_trusted);  // unpublished before it returns
    if (o == kStopped) break;
    stats_.connections[static_cast<size_t>(o)].fetch_add(1, std::memory_order_relaxed);
    // One line per change: a companion that stays away is not logged every backoff.
    const bool disconnect = o >= Outcome::kDisconnectShutdown;
    std::string_view why = companion::label(o);
    if (disconnect) why.remove_prefix(std::string_view("disconnect_").size());
    const auto level = was_trusted || last_logged != o ? spdlog::level::warn : spdlog::level::debug;
    spdlog::log(level, "companion for upstream {}: {} ({})", options_.upstream,
                disconnect ? "fenced, the companion disconnected" : "fenced", why);
    // The companion starts again from empty: follow at once (once: a companion that keeps
    // resetting waits out the backoff like any other failure).
    const bool again = o == Outcome::kDisconnectReset && last_logged != o;
    last_logged = o;
    if (again) {
      // Within 0-100 ms: every client of a companion that reset asks for its snapshot at once
      // otherwise (the companion captures them one at a time under its subscriber's lock).
      uint8_t r = 0;
      (void)RAND_bytes(&r, 1);
      if (!sleep_for(std::chrono::milliseconds(r * 100 / 255))) break;
      continue;
    }
    if (!sleep_for(backoff_)) break;
    backoff_ = std::min(backoff_ * 2, options_.backoff_max);
  }
  unpublish();
}

Outcome Client::session(bool& was_trusted) {
  using Clock = companion::Clock;
  std::string error;
  UniqueFd fd(connect_endpoint(options_.endpoint, Clock::now() + options_.connect_timeout, error));
  // Whatever ends the session, readers stop trusting the inventory before the socket closes.
  struct Unpublish {
    Client& c;
    bool& was_trusted;
    ~Unpublish() {
      was_trusted = c.published_.load(std::memory_order_relaxed) != nullptr;
      c.unpublish();
    }
  } unpublish_first{*this, was_trusted};
  if (fd.get() < 0) return stop_.load(std::memory_order_acquire) ? kStopped : Outcome::kConnectFailed;

  Challenge challenge{};
  if (RAND_bytes(challenge.data(), static_cast<int>(challenge.size())) != 1) {
    spdlog::error("companion for upstream {}: no random challenge (OpenSSL RAND_bytes)", options_.upstream);
    return Outcome::kIoError;
  }
  const auto hello = seal_hello(secret_, challenge);
  if (auto s = write_all(fd.get(), std::span<const uint8_t>(hello), Clock::now() + options_.frame_timeout, &stop_);
      s != IoStatus::kOk) {
    return outcome_of(s);
  }

  FrameOpener opener(secret_, challenge, Direction::kToRamjet, frame_limits_);
  cev::Inventory* inv = nullptr;  // set by the snapshot: the inventory this connection keeps
  size_t index = 0;
  std::optional<uint64_t> last_seq;  // the last vLLM sequence applied (the snapshot's, then the tail's)
  std::string incarnation;
  std::vector<uint8_t> buf;
  const std::atomic<bool>* stop = &stop_;
  for (;;) {
    const auto deadline = Clock::now() + (inv ? options_.frame_timeout : options_.first_frame_timeout);
    buf.resize(kFrameHeaderBytes);
    if (auto s = read_exact(fd.get(), std::span<uint8_t>(buf), deadline, stop); s != IoStatus::kOk) return outcome_of(s);
    auto size = opener.frame_size(buf);
    if (!size) return outcome_of(size.error().code);
    // The length is not authenticated before the MAC at the frame's end: the buffer grows as
    // bytes arrive (1 MiB at a time), so a peer that only claims a large frame costs nothing.
    constexpr size_t kChunk = 1u << 20;
    while (buf.size() < *size) {
      const size_t at = buf.size();
      buf.resize(std::min(*size, at + kChunk));
      if (auto s = read_exact(fd.get(), std::span<uint8_t>(buf).subspan(at), deadline, stop); s != IoStatus::kOk) {
        return outcome_of(s);
      }
    }
    auto opened = opener.open(buf);
    if (!opened) return outcome_of(opened.error().code);
    const Frame& f = *opened;

    switch (f.type) {
      case FrameType::kSnapshot: {
        if (inv) return Outcome::kMalformed;  // one snapshot per connection
        generation_.fetch_add(1, std::memory_order_acq_rel);
        const auto t0 = Clock::now();
        auto snap = decode_snapshot(f.payload, snapshot_limits_);
        if (!snap) return outcome_of(snap.error().code);
        if (auto e = verify_binding(snap->header, challenge, options_.digest->key_id())) return outcome_of(e->code);
        index = 1 - published_index_;
        if (auto e = import_snapshot(*snap, *inventories_[index])) {
          if (e->import_error) {
            spdlog::warn("companion for upstream {}: snapshot import refused ({})", options_.upstream,
                         cache::reason(*e->import_error));
          }
          return outcome_of(e->code);
        }
        inv = inventories_[index].get();
        const auto took = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0);
        stats_.snapshot_blocks.store(inv->shard().blocks(), std::memory_order_relaxed);
        stats_.snapshot_import_us.store(static_cast<uint64_t>(took.count()), std::memory_order_relaxed);
        stats_.connections[static_cast<size_t>(Outcome::kSnapshot)].fetch_add(1, std::memory_order_relaxed);
        last_seq = snap->header.last_event_sequence;
        incarnation = std::move(snap->header.incarnation);
        backoff_ = options_.backoff_min;
        current_.store(inv, std::memory_order_release);
        set_mode(FenceMode::kReplaying);
        spdlog::debug("companion for upstream {}: snapshot of {} blocks imported in {} ms", options_.upstream,
                      inv->shard().blocks(), took.count() / 1000);
        break;
      }
      case FrameType::kEvent: {
        if (!inv) return Outcome::kMalformed;
        if (last_seq && f.event_sequence <= *last_seq) return Outcome::kOutOfOrder;
        auto batch = cache::kv::decode_batch(f.batch, options_.decode);
        if (!batch) return Outcome::kDecodeError;
        if (cache::kv::clears_all(*batch)) {  // the fence's rule: the cache cleared, then the batch in order
          inv->clear();
          generation_.fetch_add(1, std::memory_order_acq_rel);
        }
        if (inv->apply(*batch)) return Outcome::kIndexError;
        last_seq = f.event_sequence;
        stats_.events.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      case FrameType::kCaughtUp: {
        if (!inv) return Outcome::kMalformed;
        if (last_seq && (!f.has_event_sequence || f.event_sequence < *last_seq)) return Outcome::kOutOfOrder;
        if (published_.load(std::memory_order_relaxed) == nullptr) {
          published_index_ = index;
          set_mode(FenceMode::kTrusted);
          published_.store(inv, std::memory_order_release);
          if (stats_.first_trust_ms.load(std::memory_order_relaxed) < 0) {
            stats_.first_trust_ms.store(
                std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count(),
                std::memory_order_relaxed);
          }
          spdlog::info("companion for upstream {}: trusted ({} blocks, snapshot imported in {} ms)", options_.upstream,
                       inv->shard().blocks(), stats_.snapshot_import_us.load(std::memory_order_relaxed) / 1000);
        }
        break;
      }
      case FrameType::kIdentity:
        if (!inv) return Outcome::kMalformed;
        if (f.identity != incarnation) return Outcome::kIdentityChanged;
        break;
      case FrameType::kDisconnect:
        return outcome_of(f.reason);
    }
    if (f.type == FrameType::kSnapshot) std::vector<uint8_t>().swap(buf);  // tail frames are small
  }
}

// ------------------------------------------------------------------------------ metrics

namespace {

using metrics::Family;
using metrics::MetricKind;

enum class F { kConnections, kTrusted, kEvents, kSnapshotBlocks, kSnapshotImport, kCount };

constexpr std::array<Family, static_cast<size_t>(F::kCount)> kFamilies = {{
    {"ramjet_companion_connections_total", MetricKind::kCounter, "upstream,outcome",
     "Connections to the engine's ramjet-companion (RJ_EXACT_INVENTORY=companion) by outcome: snapshot (a "
     "snapshot imported; the connection goes on), or why one ended: connect_failed, timeout, eof, io_error, a "
     "frame or snapshot error (bad_mac, gap, generation_changed, wrong_challenge, wrong_key, bad_checksum, "
     "import, ...), decode_error, index_error, out_of_order, identity_changed, or the companion's "
     "disconnect_<reason>. Every ending fences the engine's index until the next snapshot."},
    {"ramjet_companion_trusted", MetricKind::kGauge, "upstream",
     "1 while the engine's index from its companion is published to routing (a snapshot imported and caught "
     "up with the live tail), else 0."},
    {"ramjet_companion_events_total", MetricKind::kCounter, "upstream",
     "KV-event batches the companion forwarded and ramjet applied after a snapshot."},
    {"ramjet_companion_snapshot_blocks", MetricKind::kGauge, "upstream",
     "Blocks in the last snapshot imported from the engine's companion."},
    {"ramjet_companion_snapshot_import_seconds", MetricKind::kGauge, "upstream",
     "How long the last snapshot took to decode, verify and import."},
}};

const Family& fam(F f) { return kFamilies[static_cast<size_t>(f)]; }

}  // namespace

std::span<const metrics::Family> companion_families() { return kFamilies; }

void write_metrics(metrics::Exposition& x, std::span<const Client* const> clients) {
  auto up = [](const Client& c) { return "upstream=\"" + std::to_string(c.upstream()) + "\""; };
  auto each = [&](F f, auto value) {
    x.family(fam(f));
    for (const Client* c : clients) {
      if (c) x.sample(fam(f).name, up(*c), value(*c));
    }
  };
  x.family(fam(F::kConnections));
  for (const Client* c : clients) {
    if (!c) continue;
    for (size_t o = 0; o < static_cast<size_t>(Outcome::kCount_); ++o) {
      x.sample(fam(F::kConnections).name,
               up(*c) + ",outcome=\"" + std::string(label(static_cast<Outcome>(o))) + "\"",
               c->stats().connections[o].load(std::memory_order_relaxed));
    }
  }
  each(F::kTrusted, [](const Client& c) { return int64_t{c.trusted() != nullptr ? 1 : 0}; });
  each(F::kEvents, [](const Client& c) { return c.stats().events.load(std::memory_order_relaxed); });
  each(F::kSnapshotBlocks, [](const Client& c) { return c.stats().snapshot_blocks.load(std::memory_order_relaxed); });
  each(F::kSnapshotImport, [](const Client& c) {
    return static_cast<double>(c.stats().snapshot_import_us.load(std::memory_order_relaxed)) / 1e6;
  });
}

}  // namespace ramjet::companion
