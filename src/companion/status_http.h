// companion/status_http: the companion process's tiny HTTP/1.x endpoint for /metrics and
// /health. One thread accepts, reads one request head (at most 8 KiB within 2 s), answers it and
// closes; serial on purpose, since scrapes are small and rare and a stalled peer holds it at most
// its deadlines. What the answers say is the caller's (companion/main.cc and Server).
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "companion/transport.h"

namespace ramjet::companion {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class StatusHttp {
 public:
  // Called on the endpoint's thread with the request's method and path (query removed).
  using Handler = std::function<HttpResponse(std::string_view method, std::string_view path)>;

  explicit StatusHttp(Handler handler) : handler_(std::move(handler)) {}
  ~StatusHttp() { stop(); }
  StatusHttp(const StatusHttp&) = delete;
  StatusHttp& operator=(const StatusHttp&) = delete;

  // Listens (TCP or Unix) and starts the thread; an error says why.
  std::optional<std::string> start(const Endpoint& e);
  void stop();
  const Endpoint& bound() const { return bound_; }  // a port 0 replaced by the kernel's

 private:
  void loop();
  void answer(int fd);

  Handler handler_;
  Endpoint bound_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ramjet::companion
