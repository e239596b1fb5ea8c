#include "companion/server.h"

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <thread>
#include <cstdio>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include "companion/snapshot.h"

namespace ramjet::companion {

using cache::events::FenceMode;

std::string_view label(ServerOutcome o) {
  switch (o) {
    case ServerOutcome::kAccepted: return "accepted";
    case ServerOutcome::kServed: return "served";
    case ServerOutcome::kRefusedUid: return "uid";
    case ServerOutcome::kRefusedBadHello: return "bad_hello";
    case ServerOutcome::kRefusedHelloTimeout: return "hello_timeout";
    case ServerOutcome::kRefusedReplayedChallenge: return "replayed_challenge";
    case ServerOutcome::kRefusedTooManyClients: return "too_many_clients";
    case ServerOutcome::kEndedReset: return "reset";
    case ServerOutcome::kEndedSlowClient: return "slow_client";
    case ServerOutcome::kEndedShutdown: return "shutdown";
    case ServerOutcome::kEndedWriteFailed: return "write_failed";
    case ServerOutcome::kEndedPeerClosed: return "peer_closed";
    case ServerOutcome::kEndedNotTrusted: return "not_trusted";
    case ServerOutcome::kEndedSnapshotTooLarge: return "snapshot_too_large";
    case ServerOutcome::kCount_: break;
  }
  return "write_failed";
}

namespace {

constexpr auto kSlice = std::chrono::milliseconds(100);
constexpr auto kDisconnectDeadline = std::chrono::milliseconds(250);  // best effort: a slow client may not read it
constexpr size_t kSnapshotDeadlineUnit = 8u << 20;                    // write_timeout per 8 MiB begun

DisconnectReason disconnect_reason(ServerOutcome o) {
  switch (o) {
    case ServerOutcome::kEndedSlowClient: return DisconnectReason::kSlowClient;
    case ServerOutcome::kEndedShutdown: return DisconnectReason::kShutdown;
    case ServerOutcome::kEndedSnapshotTooLarge: return DisconnectReason::kError;
    default: return DisconnectReason::kReset;
  }
}

std::string random_boot_id() {
  std::array<uint8_t, 8> b{};
  if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1) {
    // No entropy from OpenSSL: the clock still tells two boots apart.
    const auto t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(t >> (8 * i));
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) {
    s.push_back(kHex[x >> 4]);
    s.push_back(kHex[x & 15]);
  }
  return s;
}

// Whether the client closed its end. The protocol has it send nothing after the hello, so bytes
// from it count as gone too (the connection is closed rather than read without bound).
bool peer_gone(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLNVAL)) return true;
  char b[64];
  const ssize_t n = ::recv(fd, b, sizeof(b), MSG_DONTWAIT);
  if (n < 0) return !(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
  return true;
}

ServerOutcome ended_by(IoStatus io, std::optional<ServerOutcome> end) {
  if (io == IoStatus::kStopped) return end.value_or(ServerOutcome::kEndedShutdown);
  if (io == IoStatus::kEof) return ServerOutcome::kEndedPeerClosed;
  return ServerOutcome::kEndedWriteFailed;
}

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

// One client's tail: what applied() queued for it (the subscriber thread, under the server's
// mu_ and then this mu), drained by the client's own thread.
struct Server::Client {
  struct Item {
    uint64_t seq = 0;
    std::shared_ptr<const std::string> payload;
    Clock::time_point queued{};
  };
  std::atomic<bool> pending{true};  // before its hello
  Clock::time_point accepted = Clock::now();
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> queue;
  size_t queued_bytes = 0;       // queued and not yet written (taken items count until written)
  std::optional<ServerOutcome> end;    // set once: reset, slow client, shutdown
  std::atomic<bool> abort{false};  // blocking reads and writes stop waiting (see finish_locked)

  // False once the client no longer takes events (slow now, or already ended).
  bool push(uint64_t seq, const std::shared_ptr<const std::string>& payload, size_t limit,
            std::chrono::milliseconds max_lag) {
    std::lock_guard lock(mu);
    if (end) return false;
    queued_bytes += payload->size();
    const auto now = Clock::now();
    if (queued_bytes > limit || (!queue.empty() && now - queue.front().queued > max_lag)) {
      finish_locked(ServerOutcome::kEndedSlowClient);
      return false;
    }
    queue.push_back(Item{.seq = seq, .payload = payload, .queued = now});
    cv.notify_one();
    return true;
  }
  void finish(ServerOutcome o) {
    std::lock_guard lock(mu);
    finish_locked(o);
  }
  void finish_locked(ServerOutcome o) {
    if (end) return;
    end = o;
    // A slow client or a shutdown stops a write in progress (the Disconnect then cannot follow in
    // the middle of a frame); a reset lets the current frame finish so that Disconnect(kReset)
    // reaches a client that reads.
    if (o != ServerOutcome::kEndedReset) abort.store(true, std::memory_order_release);
    queue.clear();
    cv.notify_one();
  }
  std::optional<ServerOutcome> ended() {
    std::lock_guard lock(mu);
    return end;
  }
};

struct Server::Connection {
  std::shared_ptr<Client> client;
  std::thread thread;
  std::atomic<bool> done{false};
};

Server::Server(ServerOptions options)
    : options_(std::move(options)),
      boot_id_(random_boot_id()),
      inventory_(options_.inventory, options_.digest),
      subscriber_(options_.engine, inventory_, this) {
  if (options_.allowed_uids.empty()) options_.allowed_uids.push_back(static_cast<long>(::geteuid()));
}

Server::~Server() {
  stop();
  OPENSSL_cleanse(options_.secret.data(), options_.secret.size());
}

std::optional<std::string> Server::start() {
  if (started_) return std::string("already started");
  if (options_.listen.empty()) return std::string("no endpoint to listen on");
  if (!options_.digest) return std::string("no digest key");
  auto undo = [this] {
    for (auto& l : listeners_) {
      ::close(l.fd);
      if (l.unix_socket) ::unlink(l.path.c_str());
    }
    listeners_.clear();
    bound_.clear();
  };
  for (const auto& e : options_.listen) {
    std::string error;
    const int fd = listen_endpoint(e, options_.unix_mode, error);
    if (fd < 0) {
      undo();
      return e.text() + ": " + error;
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);  // a connection gone before accept() must not block
    Listener l{.fd = fd, .unix_socket = e.kind == Endpoint::Kind::kUnix, .path = {}, .dev = 0, .ino = 0};
    Endpoint b = e;
    if (l.unix_socket) {
      l.path = e.path;
      struct stat st{};
      if (::lstat(e.path.c_str(), &st) == 0) {
        l.dev = static_cast<uint64_t>(st.st_dev);
        l.ino = static_cast<uint64_t>(st.st_ino);
      }
    } else {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
        if (ss.ss_family == AF_INET) b.port = ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
        if (ss.ss_family == AF_INET6) b.port = ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
      }
    }
    listeners_.push_back(std::move(l));
    bound_.push_back(std::move(b));
  }
  started_ = true;
  subscriber_.start();
  accept_thread_ = std::thread([this] { accept_loop(); });
  return std::nullopt;
}

void Server::stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  stop_.store(true, std::memory_order_release);
  if (accept_thread_.joinable()) accept_thread_.join();
  {
    std::lock_guard lock(mu_);  // a client waiting for a trusted state sees stop_
    trusted_cv_.notify_all();
  }
  {
    std::lock_guard lock(conns_mu_);
    for (auto& c : conns_) {
      c.client->finish(ServerOutcome::kEndedShutdown);
      c.client->abort.store(true, std::memory_order_release);  // also a client already being reset
    }
  }
  reap(true);
  subscriber_.stop();
  for (auto& l : listeners_) {
    ::close(l.fd);
    struct stat st{};
    // Only the file it created: a companion started since may have replaced it.
    if (l.unix_socket && ::lstat(l.path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_dev) == l.dev &&
        static_cast<uint64_t>(st.st_ino) == l.ino) {
      ::unlink(l.path.c_str());
    }
  }
  listeners_.clear();
  spdlog::info("companion: stopped");
}

void Server::log_refusal(ServerOutcome o) {
  static std::atomic<int64_t> last_ms{0};
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
  int64_t prev = last_ms.load(std::memory_order_relaxed);
  if (now - prev < 1000 || !last_ms.compare_exchange_strong(prev, now, std::memory_order_relaxed)) return;
  spdlog::info("companion: client refused ({}; ramjet_companion_client_connections_total counts every one)", label(o));
}

void Server::end(ServerOutcome o) { stats_.connections[static_cast<size_t>(o)].fetch_add(1, std::memory_order_relaxed); }

void Server::reap(bool all) {
  std::list<Connection> finished;
  {
    std::lock_guard lock(conns_mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      auto next = std::next(it);
      if (all || it->done.load(std::memory_order_acquire)) finished.splice(finished.end(), conns_, it);
      it = next;
    }
  }
  for (auto& c : finished) c.thread.join();
}

void Server::accept_loop() {
  std::vector<pollfd> fds;
  for (const auto& l : listeners_) fds.push_back(pollfd{l.fd, POLLIN, 0});
  while (!stop_.load(std::memory_order_acquire)) {
    const int r = ::poll(fds.data(), fds.size(), static_cast<int>(kSlice.count()));
    reap(false);
    if (r <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      const int fd = ::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        // Out of descriptors (EMFILE, ENFILE) leaves the listener readable: pause, do not spin.
        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) std::this_thread::sleep_for(kSlice);
        continue;
      }
      const bool unix_peer = listeners_[i].unix_socket;
      if (!unix_peer) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      }
      std::lock_guard lock(conns_mu_);
      // Connections before their hello have a cap of their own, and the oldest gives way: a peer
      // without the secret holding connections open cannot keep a real client out, it only
      // makes its own connections end sooner.
      size_t pending = 0;
      Connection* oldest = nullptr;
      for (auto& c : conns_) {
        if (c.done.load(std::memory_order_acquire) || !c.client->pending.load(std::memory_order_acquire) ||
            c.client->abort.load(std::memory_order_acquire)) {
          continue;  // past its hello, or already told to give way
        }
        ++pending;
        if (!oldest || c.client->accepted < oldest->client->accepted) oldest = &c;
      }
      if (oldest && pending >= std::max<size_t>(options_.max_pending, 1)) {
        oldest->client->abort.store(true, std::memory_order_release);
      }
      end(ServerOutcome::kAccepted);
      Connection& c = conns_.emplace_back();
      c.client = std::make_shared<Client>();
      try {
        c.thread = std::thread([this, fd, unix_peer, &c] {
          serve(fd, unix_peer, c.client);
          c.done.store(true, std::memory_order_release);
        });
      } catch (const std::system_error&) {  // no thread: refused, nothing left to join
        conns_.pop_back();
        ::close(fd);
        end(ServerOutcome::kRefusedTooManyClients);
        log_refusal(ServerOutcome::kRefusedTooManyClients);
      }
    }
  }
}

bool Server::remember(const Challenge& c) {
  // A challenge is 32 random bytes from the client: a repeat is a replayed hello. The ledger is
  // bounded (FIFO): evicting forgets only challenges older than its last `challenge_ledger`
  // hellos, and a replay of one of those still needs the session secret's frames to be of use.
  std::string key(reinterpret_cast<const char*>(c.data()), c.size());
  std::lock_guard lock(ledger_mu_);
  if (!seen_.insert(key).second) return false;
  seen_order_.push_back(std::move(key));
  while (seen_order_.size() > std::max<size_t>(options_.challenge_ledger, 1)) {
    seen_.erase(seen_order_.front());
    seen_order_.pop_front();
  }
  return true;
}

void Server::serve(int fd, bool unix_peer, const std::shared_ptr<Client>& cp) {
  Client& client = *cp;
  auto refuse = [&](ServerOutcome o) {
    client.pending.store(false, std::memory_order_release);
    ::close(fd);
    end(o);
    log_refusal(o);
  };
  if (unix_peer) {
    const long uid = peer_uid(fd);
    const auto& ok = options_.allowed_uids;
    if (uid < 0 || std::find(ok.begin(), ok.end(), uid) == ok.end()) return refuse(ServerOutcome::kRefusedUid);
  }
  std::array<uint8_t, kHelloBytes> hello{};
  const IoStatus io = read_exact(fd, hello, Clock::now() + options_.hello_timeout, &client.abort);
  if (io == IoStatus::kStopped && stop_.load(std::memory_order_acquire)) {
    client.pending.store(false, std::memory_order_release);
    ::close(fd);
    return end(ServerOutcome::kEndedShutdown);
  }
  // Stopped otherwise: dropped as the oldest of too many connections waiting for a hello.
  if (io == IoStatus::kTimeout || io == IoStatus::kStopped) return refuse(ServerOutcome::kRefusedHelloTimeout);
  if (io != IoStatus::kOk) return refuse(ServerOutcome::kRefusedBadHello);
  const auto challenge = open_hello(hello, options_.secret);
  if (!challenge) return refuse(ServerOutcome::kRefusedBadHello);
  if (!remember(*challenge)) return refuse(ServerOutcome::kRefusedReplayedChallenge);
  {
    std::lock_guard lock(conns_mu_);
    size_t past_hello = 0;
    for (const auto& c : conns_) {
      if (!c.done.load(std::memory_order_acquire) && !c.client->pending.load(std::memory_order_acquire)) ++past_hello;
    }
    if (past_hello >= options_.max_clients) return refuse(ServerOutcome::kRefusedTooManyClients);
    // Given way to a newer connection just as its hello arrived (see accept_loop).
    if (client.abort.load(std::memory_order_acquire)) return refuse(ServerOutcome::kRefusedHelloTimeout);
    client.pending.store(false, std::memory_order_release);
  }

  // The snapshot and the tail's registration in one critical section: the subscriber thread
  // applies nothing in between, so the tail starts exactly after the snapshot's last batch.
  std::optional<Snapshot> snapshot;
  uint64_t generation = 0;
  {
    std::unique_lock lock(mu_);
    trusted_cv_.wait_until(lock, Clock::now() + options_.wait_trusted, [&] {
      return stop_.load(std::memory_order_acquire) || sub_mode_ == FenceMode::kTrusted;
    });
    generation = generation_.load(std::memory_order_relaxed);
    if (!stop_.load(std::memory_order_acquire) && sub_mode_ == FenceMode::kTrusted) {
      SnapshotHeader header{.challenge = *challenge,
                            .key_id = options_.digest->key_id(),
                            .generation = generation,
                            .last_event_sequence = last_seq_,
                            .incarnation = boot_id_ + "-" + std::to_string(sub_generation_)};
      snapshot = capture_snapshot(inventory_, std::move(header));
      tails_.push_back(cp);
    }
  }
  FrameSealer sealer(options_.secret, *challenge, generation, Direction::kToRamjet);
  auto finish = [&](ServerOutcome o, bool say) {
    unregister(client);
    if (say) {
      (void)write_all(fd, sealer.disconnect(disconnect_reason(o)), Clock::now() + kDisconnectDeadline, nullptr);
    }
    ::close(fd);
    end(o);
    if (o == ServerOutcome::kEndedShutdown || o == ServerOutcome::kEndedPeerClosed) {
      spdlog::debug("companion: client disconnected ({})", label(o));
    } else {
      spdlog::info("companion: client disconnected ({})", label(o));
    }
  };
  if (!snapshot) {
    const bool stopping = stop_.load(std::memory_order_acquire);
    return finish(stopping ? ServerOutcome::kEndedShutdown : ServerOutcome::kEndedNotTrusted, true);
  }
  const std::optional<uint64_t> last_seq = snapshot->header.last_event_sequence;
  const size_t blocks = snapshot->state.blocks.size();
  std::string frame;
  {
    const std::string bytes = encode_snapshot(*snapshot);
    snapshot.reset();
    if (bytes.size() > options_.frames.max_snapshot_bytes) {
      spdlog::warn("companion: snapshot of {} bytes is beyond the frame limit of {}", bytes.size(),
                   options_.frames.max_snapshot_bytes);
      return finish(ServerOutcome::kEndedSnapshotTooLarge, true);
    }
    frame = sealer.snapshot(bytes);
  }
  const auto units = static_cast<int64_t>(1 + frame.size() / kSnapshotDeadlineUnit);
  const IoStatus w = write_all(fd, frame, Clock::now() + options_.write_timeout * units, &client.abort);
  if (w != IoStatus::kOk) return finish(ended_by(w, client.ended()), false);  // mid-frame: no Disconnect fits
  stats_.snapshots.fetch_add(1, std::memory_order_relaxed);
  stats_.snapshot_bytes.store(frame.size(), std::memory_order_relaxed);
  stats_.snapshot_blocks.store(blocks, std::memory_order_relaxed);
  end(ServerOutcome::kServed);
  spdlog::info("companion: client served (generation {}, {} blocks, {} bytes)", generation, blocks, frame.size());
  frame = {};
  stats_.clients.fetch_add(1, std::memory_order_relaxed);
  bool say = false;
  const ServerOutcome o = tail(fd, client, sealer, last_seq, say);
  stats_.clients.fetch_sub(1, std::memory_order_relaxed);
  finish(o, say);
}

ServerOutcome Server::tail(int fd, Client& client, FrameSealer& sealer, std::optional<uint64_t> last_sent, bool& say) {
  auto last_write = Clock::now();
  bool announced = false;  // the first CaughtUp went out
  std::deque<Client::Item> batch;
  for (;;) {
    std::optional<ServerOutcome> ended;
    {
      std::unique_lock lock(client.mu);
      const auto wake = announced ? std::min(last_write + options_.heartbeat, Clock::now() + kSlice) : Clock::now();
      client.cv.wait_until(lock, wake, [&] { return client.end.has_value() || !client.queue.empty(); });
      ended = client.end;
      if (!ended) batch.swap(client.queue);
    }
    if (ended) {
      say = true;  // between two frames: a Disconnect can follow
      return *ended;
    }
    for (const auto& item : batch) {
      const std::string frame = sealer.event(item.seq, bytes_of(*item.payload));
      const IoStatus w = write_all(fd, frame, Clock::now() + options_.write_timeout, &client.abort);
      if (w != IoStatus::kOk) return ended_by(w, client.ended());
      last_sent = item.seq;
      last_write = Clock::now();
      stats_.events_forwarded.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard lock(client.mu);
      client.queued_bytes -= std::min(client.queued_bytes, item.payload->size());
    }
    batch.clear();
    bool drained = false;  // nothing queued and not ended: this client has everything applied
    {
      std::lock_guard lock(client.mu);
      drained = client.queue.empty() && !client.end;
    }
    if (drained && (!announced || Clock::now() - last_write >= options_.heartbeat)) {
      const IoStatus w =
          write_all(fd, sealer.caught_up(last_sent), Clock::now() + options_.write_timeout, &client.abort);
      if (w != IoStatus::kOk) return ended_by(w, client.ended());
      last_write = Clock::now();
      announced = true;
    }
    if (peer_gone(fd)) return ServerOutcome::kEndedPeerClosed;
  }
}

void Server::unregister(const Client& client) {
  std::lock_guard lock(mu_);
  std::erase_if(tails_, [&](const std::shared_ptr<Client>& c) { return c.get() == &client; });
}

void Server::reset_clients() {
  generation_.fetch_add(1, std::memory_order_release);
  stats_.resets.fetch_add(1, std::memory_order_relaxed);
  if (!tails_.empty()) {
    spdlog::info("companion: {} clients reset (generation {})", tails_.size(),
                 generation_.load(std::memory_order_relaxed));
  }
  for (auto& c : tails_) c->finish(ServerOutcome::kEndedReset);
  tails_.clear();
}

void Server::applied(uint64_t seq, std::string payload) {
  applied_since_state_ = seq;
  // Within one generation the fence applies batches densely; a batch that does not follow the
  // last one started the inventory again (a restarted publisher, a clear after a gap) before
  // state() says so: the clients' snapshots no longer lead up to it.
  const bool follows = !last_seq_ || seq == *last_seq_ + 1;
  last_seq_ = seq;
  if (!follows) return reset_clients();
  if (tails_.empty()) return;
  if (payload.size() > options_.frames.max_batch_payload) {
    spdlog::warn("companion: a batch of {} bytes is beyond the frame limit of {}: clients reset", payload.size(),
                 options_.frames.max_batch_payload);
    return reset_clients();
  }
  const auto shared = std::make_shared<const std::string>(std::move(payload));  // one copy for every client
  std::erase_if(tails_,
                [&](const std::shared_ptr<Client>& c) {
                  return !c->push(seq, shared, options_.send_buffer_bytes, options_.max_lag);
                });
}

void Server::state(FenceMode mode, uint64_t generation) {
  // A new generation started from an empty inventory: the batches applied since the last state()
  // (the same step of the subscriber) are its first ones.
  const bool changed = generation != sub_generation_;
  if (changed) last_seq_ = applied_since_state_;
  applied_since_state_.reset();
  // Clients hold a snapshot of a trusted state at one generation; leaving it resets them (they
  // reconnect for a fresh snapshot). An AllBlocksCleared starts a new generation too, so it also
  // resets them: simpler than a clear in the tail, and rare.
  if (sub_mode_ == FenceMode::kTrusted && (mode != FenceMode::kTrusted || changed)) reset_clients();
  if (mode != sub_mode_ || changed) {
    spdlog::info("companion: engine kv state {} (generation {})", cache::events::label(mode), generation);
  }
  sub_mode_ = mode;
  sub_generation_ = generation;
  if (mode == FenceMode::kTrusted) trusted_cv_.notify_all();
}

void Server::export_state(cache::events::InventoryState& out) {
  std::lock_guard lock(mu_);
  inventory_.export_state(out);
}

}  // namespace ramjet::companion
