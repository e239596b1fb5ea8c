#include "client.h"

#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <cerrno>

namespace ramjet::bench {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {
constexpr auto kTok = asio::as_tuple(asio::use_awaitable);
constexpr size_t kReadBuffer = 16 * 1024;
}  // namespace

struct Conn {
  explicit Conn(asio::io_context& ctx) : socket(ctx), buf(new char[kReadBuffer]) {}
  tcp::socket socket;
  std::unique_ptr<char[]> buf;
  bool reused = false;
};

// Linked into the client's list while an exchange runs; the watchdog cancels its socket once
// `when` has passed. Lives in the coroutine frame, so it never moves.
struct Client::Deadline {
  Clock::time_point when;
  tcp::socket* socket = nullptr;
  bool fired = false;
  Deadline* prev = nullptr;
  Deadline* next = nullptr;
};

struct Client::Guard {
  Guard(Client& c, Deadline& d) : c_(c), d_(d) { c_.link(&d_); }
  ~Guard() { c_.unlink(&d_); }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  Client& c_;
  Deadline& d_;
};

namespace {
// True when the idle peer has neither closed nor sent anything unexpected.
bool looks_open(tcp::socket& s) {
  if (!s.is_open()) return false;
  char byte;
  ssize_t n = ::recv(s.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n >= 0) return false;  // 0: orderly close; >0: unsolicited bytes
  return errno == EAGAIN || errno == EWOULDBLOCK;
}
}  // namespace

Client::Client(asio::io_context& ctx, std::vector<Target> targets,
               std::chrono::milliseconds connect_timeout, size_t max_idle)
    : ctx_(ctx),
      targets_(std::move(targets)),
      connect_timeout_(connect_timeout),
      max_idle_(max_idle),
      idle_(targets_.size()) {}

Client::~Client() = default;

void Client::close_idle() {
  for (auto& v : idle_) v.clear();
}

void Client::link(Deadline* d) {
  d->prev = nullptr;
  d->next = deadlines_;
  if (deadlines_) deadlines_->prev = d;
  deadlines_ = d;
}

void Client::unlink(Deadline* d) {
  if (d->prev) d->prev->next = d->next;
  else if (deadlines_ == d) deadlines_ = d->next;
  if (d->next) d->next->prev = d->prev;
  d->prev = d->next = nullptr;
}

asio::awaitable<void> Client::watchdog() {
  asio::steady_timer timer(ctx_);
  while (!stopped_) {
    timer.expires_after(std::chrono::milliseconds(20));
    co_await timer.async_wait(kTok);
    const auto now = Clock::now();
    for (Deadline* d = deadlines_; d; d = d->next) {
      if (!d->fired && d->when <= now && d->socket) {
        d->fired = true;
        boost::system::error_code ec;
        d->socket->cancel(ec);
      }
    }
  }
}

std::unique_ptr<Conn> Client::take_idle(size_t target) {
  auto& pool = idle_[target];
  while (!pool.empty()) {
    std::unique_ptr<Conn> c = std::move(pool.back());
    pool.pop_back();
    if (looks_open(c->socket)) {
      c->reused = true;
      return c;
    }
  }
  return nullptr;
}

asio::awaitable<std::unique_ptr<Conn>> Client::connect(size_t target, std::string& error,
                                                       Clock::time_point deadline) {
  auto c = std::make_unique<Conn>(ctx_);
  Deadline d;
  d.when = std::min(deadline, Clock::now() + connect_timeout_);
  d.socket = &c->socket;
  Guard guard(*this, d);
  auto [ec, ep] = co_await asio::async_connect(c->socket, targets_[target].addrs, kTok);
  if (ec) {
    error = d.fired ? "connect_timeout" : "connect";
    co_return nullptr;
  }
  boost::system::error_code ignored;
  c->socket.set_option(tcp::no_delay(true), ignored);
  co_return c;
}

asio::awaitable<ExchangeResult> Client::exchange(size_t target, std::string_view head,
                                                 std::string_view body, BodySink& sink,
                                                 Clock::time_point deadline) {
  ExchangeResult r;
  for (int attempt = 0; attempt < 2; ++attempt) {
    r = ExchangeResult{};
    std::unique_ptr<Conn> c = take_idle(target);
    if (!c) {
      c = co_await connect(target, r.error, deadline);
      if (!c) co_return r;
    }
    Deadline d;
    d.when = deadline;
    d.socket = &c->socket;
    Guard guard(*this, d);

    r.sent = Clock::now();
    std::array<asio::const_buffer, 2> bufs{asio::buffer(head), asio::buffer(body)};
    auto [wec, wn] = co_await asio::async_write(c->socket, bufs, kTok);
    (void)wn;
    if (wec) {
      if (c->reused && !d.fired && attempt == 0) continue;  // stale keep-alive connection
      r.error = d.fired ? "timeout" : "io";
      co_return r;
    }
    ResponseParser parser;
    bool head_reported = false;
    bool extra_bytes = false;  // bytes after the response: the connection is not reusable
    size_t received = 0;
    while (!parser.done()) {
      auto [ec, n] = co_await c->socket.async_read_some(asio::buffer(c->buf.get(), kReadBuffer), kTok);
      const auto now = Clock::now();
      if (ec) {
        if (d.fired) {
          r.error = "timeout";
        } else if (ec == asio::error::eof) {
          if (received == 0 && c->reused && attempt == 0) break;  // stale: retry below
          if (parser.on_eof()) break;
          r.error = "truncated";
        } else {
          if (received == 0 && c->reused && attempt == 0) break;
          r.error = "io";
        }
        co_return r;
      }
      received += n;
      std::string_view data(c->buf.get(), n);
      size_t used = parser.feed(data, [&](std::string_view part) {
        if (!head_reported) {
          head_reported = true;
          sink.on_head(parser);
        }
        sink.on_body(part, now);
      });
      if (parser.error() != ResponseParser::Error::kNone) {
        r.error = "protocol";
        co_return r;
      }
      if (parser.head_done() && !head_reported) {
        head_reported = true;
        sink.on_head(parser);
      }
      if (parser.done() && used < data.size()) extra_bytes = true;
    }
    if (!parser.done()) continue;  // stale reused connection: one more attempt on a fresh one
    r.status = parser.status();
    r.upstream = parser.upstream();
    if (parser.keep_alive() && !extra_bytes && idle_[target].size() < max_idle_ && !stopped_) {
      c->reused = false;
      idle_[target].push_back(std::move(c));
    }
    co_return r;
  }
  r.error = "io";
  co_return r;
}

Result<Target> resolve_target(const Url& url) {
  asio::io_context ctx;
  tcp::resolver resolver(ctx);
  boost::system::error_code ec;
  auto results = resolver.resolve(url.host, std::to_string(url.port), ec);
  if (ec || results.empty())
    return Error{"resolve", "cannot resolve the host of " + url.display() + ": " + ec.message()};
  Target t;
  t.url = url;
  for (const auto& e : results) t.addrs.push_back(e.endpoint());
  return t;
}

}  // namespace ramjet::bench
