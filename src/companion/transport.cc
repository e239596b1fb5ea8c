#include "companion/transport.h"

#include <cerrno>
#include <charconv>
#include <cstring>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "common/hex.h"

namespace ramjet::companion {

std::string Endpoint::text() const {
  if (kind == Kind::kUnix) return "unix:" + path;
  const bool v6 = host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<Endpoint, std::string> parse_endpoint(std::string_view s) {
  Endpoint e;
  if (s.starts_with("unix:")) {
    e.kind = Endpoint::Kind::kUnix;
    e.path = std::string(s.substr(5));
    if (e.path.empty() || e.path[0] != '/') return std::string("a unix: endpoint needs an absolute path");
    if (e.path.size() >= sizeof(sockaddr_un::sun_path)) return std::string("the unix socket path is too long");
    return e;
  }
  if (!s.starts_with("tcp://")) return std::string("an endpoint is unix:/path or tcp://host:port");
  std::string_view rest = s.substr(6);
  std::string_view host;
  std::string_view port;
  if (rest.starts_with("[")) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return std::string("tcp://[address]:port");
    }
    host = rest.substr(1, close - 1);
    port = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return std::string("tcp://host:port needs a port");
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  unsigned p = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (host.empty() || ec != std::errc() || ptr != port.data() + port.size() || p > 65535) {
    return std::string("tcp://host:port needs a host and a port 0-65535");
  }
  e.kind = Endpoint::Kind::kTcp;
  e.host = std::string(host);
  e.port = static_cast<uint16_t>(p);
  return e;
}

Result<std::array<uint8_t, 32>, std::string> read_secret_file(const std::string& path) {
  // O_NONBLOCK: a FIFO at the path must not hang startup (it is then refused as not regular).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return std::string("cannot open the secret file: ") + std::strerror(errno);
  struct stat st{};
  std::array<uint8_t, 32> key{};
  std::string error;
  char buf[72];
  ssize_t n = 0;
  if (::fstat(fd, &st) != 0) {
    error = std::string("cannot stat the secret file: ") + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    error = "the secret file is not a regular file";
  } else if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    error = "the secret file is owned by another user";
  } else if ((st.st_mode & 077) != 0) {
    error = "the secret file is readable or writable by group or others (chmod 600)";
  } else {
    size_t got = 0;
    while (got < sizeof(buf)) {
      n = ::read(fd, buf + got, sizeof(buf) - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (n < 0) {
      error = std::string("cannot read the secret file: ") + std::strerror(errno);
    } else if (got == 32) {
      std::memcpy(key.data(), buf, 32);
    } else if (got == 64 || (got == 65 && buf[64] == '\n')) {
      for (size_t i = 0; i < 32 && error.empty(); ++i) {
        const int hi = hex_value(buf[2 * i]);
        const int lo = hex_value(buf[2 * i + 1]);
        if (hi < 0 || lo < 0) error = "the secret file is neither 32 bytes nor 64 hex digits";
        key[i] = static_cast<uint8_t>(hi << 4 | lo);
      }
    } else {
      error = "the secret file is neither 32 bytes nor 64 hex digits";
    }
  }
  OPENSSL_cleanse(buf, sizeof(buf));
  ::close(fd);
  if (!error.empty()) {
    OPENSSL_cleanse(key.data(), key.size());
    return error;
  }
  return key;
}

std::string_view label(IoStatus s) {
  switch (s) {
    case IoStatus::kOk: return "ok";
    case IoStatus::kEof: return "eof";
    case IoStatus::kTimeout: return "timeout";
    case IoStatus::kError: return "error";
    case IoStatus::kStopped: return "stopped";
  }
  return "error";
}

namespace {

// Waits until fd is ready for `events`, in slices of 100 ms.
IoStatus wait_ready(int fd, short events, Clock::time_point deadline, const std::atomic<bool>* stop) {
  for (;;) {
    if (stop && stop->load(std::memory_order_acquire)) return IoStatus::kStopped;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return IoStatus::kTimeout;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 100)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return IoStatus::kError;
    if (r > 0) return IoStatus::kOk;  // readable, writable, or an error/hang-up the call reports
  }
}

}  // namespace

IoStatus read_exact(int fd, std::span<uint8_t> out, Clock::time_point deadline, const std::atomic<bool>* stop) {
  size_t got = 0;
  while (got < out.size()) {
    if (auto s = wait_ready(fd, POLLIN, deadline, stop); s != IoStatus::kOk) return s;
    const ssize_t n = ::recv(fd, out.data() + got, out.size() - got, MSG_DONTWAIT);
    if (n == 0) return IoStatus::kEof;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return errno == ECONNRESET ? IoStatus::kEof : IoStatus::kError;
    }
    got += static_cast<size_t>(n);
  }
  return IoStatus::kOk;
}

IoStatus write_all(int fd, std::span<const uint8_t> data, Clock::time_point deadline, const std::atomic<bool>* stop) {
  size_t sent = 0;
  while (sent < data.size()) {
    if (auto s = wait_ready(fd, POLLOUT, deadline, stop); s != IoStatus::kOk) return s;
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return errno == EPIPE || errno == ECONNRESET ? IoStatus::kEof : IoStatus::kError;
    }
    sent += static_cast<size_t>(n);
  }
  return IoStatus::kOk;
}

namespace {

bool fill_unix(const Endpoint& e, sockaddr_un& sa) {
  std::memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  if (e.path.size() >= sizeof(sa.sun_path)) return false;
  std::memcpy(sa.sun_path, e.path.data(), e.path.size());
  return true;
}

// Connects fd without blocking past the deadline.
bool connect_within(int fd, const sockaddr* sa, socklen_t len, Clock::time_point deadline, std::string& error) {
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int r = ::connect(fd, sa, len);
  if (r != 0 && errno != EINPROGRESS && errno != EINTR) {
    error = std::strerror(errno);
    return false;
  }
  if (r != 0) {
    if (wait_ready(fd, POLLOUT, deadline, nullptr) != IoStatus::kOk) {
      error = "connect timed out";
      return false;
    }
    int so = 0;
    socklen_t sl = sizeof(so);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl);
    if (so != 0) {
      error = std::strerror(so);
      return false;
    }
  }
  return true;
}

// A Unix stream socket and the address of e.path; -1 with `error` set.
int unix_socket(const Endpoint& e, sockaddr_un& sa, std::string& error) {
  if (!fill_unix(e, sa)) {
    error = "path too long";
    return -1;
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) error = std::strerror(errno);
  return fd;
}

// The first of host:port's addresses (`passive`: to listen on; host "*" or empty: every address)
// for which a new stream socket passes `use(fd, address)`, else -1 with `error` set (use sets it
// for its own failures).
template <typename Use>
int first_address(const Endpoint& e, bool passive, std::string& error, Use use) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(e.port);
  const bool any = passive && (e.host == "*" || e.host.empty());
  if (int rc = ::getaddrinfo(any ? nullptr : e.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    error = ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (use(fd, *a)) break;
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  return fd;
}

}  // namespace

int connect_endpoint(const Endpoint& e, Clock::time_point deadline, std::string& error) {
  if (e.kind == Endpoint::Kind::kUnix) {
    sockaddr_un sa{};
    const int fd = unix_socket(e, sa, error);
    if (fd >= 0 && !connect_within(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa), deadline, error)) {
      ::close(fd);
      return -1;
    }
    return fd;
  }
  const int fd = first_address(e, false, error, [&](int s, const addrinfo& a) {
    return connect_within(s, a.ai_addr, a.ai_addrlen, deadline, error);
  });
  if (fd >= 0) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

int listen_endpoint(const Endpoint& e, unsigned unix_mode, std::string& error) {
  if (e.kind == Endpoint::Kind::kUnix) {
    sockaddr_un sa{};
    const int fd = unix_socket(e, sa, error);
    if (fd < 0) return -1;
    struct stat st{};
    if (::lstat(e.path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        error = "the path exists and is not a socket";
        ::close(fd);
        return -1;
      }
      ::unlink(e.path.c_str());  // a socket file left by an earlier run
    }
    // Created with no access for anyone, then given its mode: never briefly open to all.
    const mode_t old = ::umask(0777);
    const int b = ::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa));
    ::umask(old);
    if (b != 0 || ::chmod(e.path.c_str(), unix_mode) != 0 || ::listen(fd, 64) != 0) {
      error = std::strerror(errno);
      ::close(fd);
      return -1;
    }
    return fd;
  }
  return first_address(e, true, error, [&](int s, const addrinfo& a) {
    int one = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(s, a.ai_addr, a.ai_addrlen) == 0 && ::listen(s, 64) == 0) return true;
    error = std::strerror(errno);
    return false;
  });
}

long peer_uid(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred)) return -1;
  return static_cast<long>(cred.uid);
}

}  // namespace ramjet::companion
