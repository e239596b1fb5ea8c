#include "companion/status_http.h"

#include <cerrno>
#include <thread>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ramjet::companion {

namespace {

constexpr size_t kMaxHead = 8192;
// Short: the endpoint answers one connection at a time, so a peer that sends nothing delays a
// liveness probe by at most this much per connection.
constexpr auto kDeadline = std::chrono::milliseconds(500);

std::string_view status_text(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

}  // namespace

std::optional<std::string> StatusHttp::start(const Endpoint& e) {
  if (thread_.joinable()) return std::string("already started");
  std::string error;
  fd_ = listen_endpoint(e, 0600, error);
  if (fd_ < 0) return e.text() + ": " + error;
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  bound_ = e;
  if (e.kind == Endpoint::Kind::kTcp) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      if (ss.ss_family == AF_INET) bound_.port = ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
      if (ss.ss_family == AF_INET6) bound_.port = ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
    }
  }
  stop_.store(false);
  thread_ = std::thread([this] { loop(); });
  return std::nullopt;
}

void StatusHttp::stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) {
    ::close(fd_);
    if (bound_.kind == Endpoint::Kind::kUnix) ::unlink(bound_.path.c_str());
    fd_ = -1;
  }
}

void StatusHttp::loop() {
  while (!stop_.load(std::memory_order_acquire)) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    answer(c);
    ::close(c);
  }
}

void StatusHttp::answer(int fd) {
  const auto deadline = Clock::now() + kDeadline;
  std::string head;
  char buf[1024];
  while (head.find("\r\n\r\n") == std::string::npos && head.find("\n\n") == std::string::npos) {
    if (head.size() >= kMaxHead || stop_.load(std::memory_order_acquire)) return;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return;
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 100)));
    if (r < 0 && errno != EINTR) return;
    if (r <= 0) continue;
    const ssize_t n = ::recv(fd, buf, std::min(sizeof(buf), kMaxHead - head.size()), MSG_DONTWAIT);
    if (n == 0) return;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      return;
    }
    head.append(buf, static_cast<size_t>(n));
  }
  // The request line: METHOD SP target SP HTTP/x.y
  const std::string_view line = std::string_view(head).substr(0, head.find_first_of("\r\n"));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  HttpResponse res;
  if (sp2 == std::string_view::npos || !line.substr(sp2 + 1).starts_with("HTTP/1.")) {
    res = HttpResponse{.status = 400, .content_type = "text/plain; charset=utf-8", .body = "bad request\n"};
  } else {
    std::string_view path = line.substr(sp1 + 1, sp2 - sp1 - 1);
    path = path.substr(0, path.find('?'));
    res = handler_(line.substr(0, sp1), path);
  }
  std::string out = "HTTP/1.1 " + std::to_string(res.status) + " " + std::string(status_text(res.status)) +
                    "\r\nContent-Type: " + res.content_type + "\r\nContent-Length: " + std::to_string(res.body.size()) +
                    "\r\nConnection: close\r\n\r\n";
  out += res.body;
  (void)write_all(fd, out, Clock::now() + kDeadline, &stop_);
}

}  // namespace ramjet::companion
