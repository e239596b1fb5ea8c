// companion/transport: what both ends of the companion protocol share below the frames: endpoint
// strings (unix:/path, tcp://host:port), the 32-byte secret files with their ownership and mode
// checks, and blocking socket I/O under a deadline (each end runs a thread per connection).
// Nothing here logs a secret, a path's contents or a peer address beyond the endpoint given.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/result.h"

namespace ramjet::companion {

struct Endpoint {
  enum class Kind : uint8_t { kUnix, kTcp };
  Kind kind = Kind::kUnix;
  std::string path;  // kUnix
  std::string host;  // kTcp: a name or an address ("*" or "0.0.0.0": every address, listening only)
  uint16_t port = 0;
  std::string text() const;  // as given (for logs: it is the operator's configuration)
};
// "unix:/abs/path" or "tcp://host:port" ("tcp://[v6]:port").
Result<Endpoint, std::string> parse_endpoint(std::string_view s);

// A secret file: a regular file (no symlink) owned by this process's effective user (or root),
// readable by no one else (mode & 077 == 0), holding exactly 32 bytes, or 64 hex digits with an
// optional newline (`openssl rand -hex 32`). The error says which rule failed, never the bytes.
Result<std::array<uint8_t, 32>, std::string> read_secret_file(const std::string& path);

using Clock = std::chrono::steady_clock;

enum class IoStatus : uint8_t { kOk, kEof, kTimeout, kError, kStopped };
std::string_view label(IoStatus s);

// Blocking I/O on a connected socket (any flags), waiting with poll() in slices of at most 100 ms
// so `stop` (may be null) is seen; kTimeout once `deadline` passes.
IoStatus read_exact(int fd, std::span<uint8_t> out, Clock::time_point deadline, const std::atomic<bool>* stop);
IoStatus write_all(int fd, std::span<const uint8_t> data, Clock::time_point deadline, const std::atomic<bool>* stop);
inline IoStatus write_all(int fd, std::string_view data, Clock::time_point deadline, const std::atomic<bool>* stop) {
  return write_all(fd, {reinterpret_cast<const uint8_t*>(data.data()), data.size()}, deadline, stop);
}

// A connected stream socket (close-on-exec, TCP_NODELAY for TCP), or -1 with `error` set (errno
// text) once `deadline` passes or the connect fails.
int connect_endpoint(const Endpoint& e, Clock::time_point deadline, std::string& error);
// A listening socket: a Unix socket at e.path (an existing socket file there is replaced; mode
// `unix_mode`), or TCP on host:port (SO_REUSEADDR). -1 with `error` set on failure.
int listen_endpoint(const Endpoint& e, unsigned unix_mode, std::string& error);
// The peer's effective UID of a connected Unix socket (SO_PEERCRED); -1 if unknown.
long peer_uid(int fd);

}  // namespace ramjet::companion
