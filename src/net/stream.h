// net/stream: one TCP connection, plain or under TLS, with the operations the data plane uses.
// Plain connections pay nothing for TLS existing: every operation is one branch and then the
// socket's own (no type erasure, no extra coroutine frame). Under TLS:
//  - write_some() (the data plane's synchronous first try on a non-blocking socket) writes
//    nothing and answers would_block, so the caller's asynchronous write takes it all: OpenSSL
//    must not be left holding a record half written by a non-blocking call;
//  - a peer that closes without close_notify ends a read as a plain close (eof), as it does on
//    a plain socket: HTTP framing (length, chunks) already says whether a message was complete;
//  - one read and one write may be pending at once (Asio's ssl::stream is full duplex), as the
//    client watch needs.
// A plain read whose last read left the socket drained (it returned less than its buffer held)
// waits for the socket to be readable and then reads, instead of trying a read first: a
// streamed response's next event, the engine's answer to a request just sent and a keep-alive
// client's next request are not there yet when asked for, and the failed try (a recv that
// answers EAGAIN) costs more than the wait's re-arm. A read that filled its buffer tries first,
// as Asio does: more is likely queued.
// On a plain non-blocking socket that read (after its wait) and write_some() are the bare
// recvfrom and sendmsg system calls (stream.cc): glibc's recv and sendmsg are thread
// cancellation points, which in a process with more than one thread wrap each call in two more
// (~50 instructions; ramjet never cancels a thread), and Asio's synchronous operations add
// their own layers, for what is one system call, each event of a stream and each way.
// Not movable: the TLS layer refers to the socket.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>

#include <array>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>

#include <sys/uio.h>

namespace ramjet::net {

// The completion token of the data plane's co_awaits: `auto [ec, n] = co_await
// stream.async_read_some(buffers, net::awaited);`. The coroutine awaits Asio's deferred operation
// itself; use_awaitable would start a coroutine frame of its own for every operation (~215
// instructions more an operation, and an SSE stream of ten events makes eleven reads).
inline constexpr boost::asio::as_tuple_t<boost::asio::deferred_t> awaited{};

class Stream;

namespace stream_detail {

// One recvfrom / sendmsg (MSG_NOSIGNAL) on a non-blocking socket, answered as Asio's read_some
// and write_some answer: errors in Asio's system category (would_block when nothing can be done
// now), eof when the peer closed. Unlike Asio's, a call a signal interrupted (EINTR) is made
// again. A write of no bytes is one sendmsg of nothing (0, or the socket's pending error), where
// Asio makes no call; OutBuffers never writes nothing.
size_t recv_now(int fd, void* data, size_t size, boost::system::error_code& ec);
size_t send_now(int fd, const iovec* iov, size_t count, boost::system::error_code& ec);
// What one write_some() hands to sendmsg at most (Asio's own bound).
inline constexpr size_t kMaxWriteBuffers = 64;

// The completion handlers of a plain read: the caller's handler, wrapped. Each forwards the
// caller's associated executor, allocator and cancellation slot (the associator below), so the
// read completes as the caller's own operation would.
template <class Handler>
struct NoteDrained {  // a read's handler: notes whether it drained the socket
  Stream* stream;
  size_t capacity;
  Handler handler;
  void operator()(boost::system::error_code ec, size_t n);
};

template <class Buffers, class Handler>
struct ReadWhenReady {  // a wait's handler: the socket is readable, read now
  Stream* stream;
  Buffers buffers;
  Handler handler;
  void operator()(boost::system::error_code ec);
};

template <class T>
struct Inner;
template <class H>
struct Inner<NoteDrained<H>> {
  using type = H;
};
template <class B, class H>
struct Inner<ReadWhenReady<B, H>> {
  using type = H;
};

}  // namespace stream_detail

class Stream {
 public:
  using executor_type = boost::asio::any_io_executor;
  using tcp = boost::asio::ip::tcp;
  using tls_stream = boost::asio::ssl::stream<tcp::socket&>;

  explicit Stream(const executor_type& ex) : socket_(ex) {}
  explicit Stream(tcp::socket s) : socket_(std::move(s)) {}
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  // A TLS connection ends without close_notify (the socket just closes). OpenSSL would then mark
  // its session bad, and the engine's next connection could not resume it: say the shutdown was
  // sent, as HTTP clients do (CPython's ssl module does the same).
  ~Stream() {
    if (tls_) {
      SSL* ssl = tls_->native_handle();
      SSL_set_shutdown(ssl, SSL_get_shutdown(ssl) | SSL_SENT_SHUTDOWN);
    }
  }

  tcp::socket& socket() { return socket_; }
  const tcp::socket& socket() const { return socket_; }
  executor_type get_executor() { return socket_.get_executor(); }
  bool is_open() const { return socket_.is_open(); }
  void close(boost::system::error_code& ec) { socket_.close(ec); }

  // Wraps the connected socket in TLS; the context stays alive as long as this stream.
  void start_tls(std::shared_ptr<boost::asio::ssl::context> ctx) {
    ctx_ = std::move(ctx);
    tls_ = std::make_unique<tls_stream>(socket_, *ctx_);
  }
  bool tls() const { return tls_ != nullptr; }
  tls_stream& tls_layer() { return *tls_; }
  // `ec`, from an operation on this stream, is the TLS layer's (an alert, a bad record), not the
  // socket's.
  bool tls_error(const boost::system::error_code& ec) const {
    return tls_ != nullptr && ec.category() == boost::asio::error::get_ssl_category();
  }

  // The connection's reads: the handler runs while this Stream lives (its owner awaits it).
  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return read<true>(buffers, std::forward<Token>(token));
  }

  // A read on behalf of another owner (the client watch), whose handler may run after this
  // Stream is gone: it tries first and never notes whether it drained the socket.
  template <class MutableBuffers, class Token>
  auto async_read_some_unowned(const MutableBuffers& buffers, Token&& token) {
    return read<false>(buffers, std::forward<Token>(token));
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, size_t)>(
        [this](auto handler, const ConstBuffers& b) {
          if (tls_) tls_->async_write_some(b, std::move(handler));
          else socket_.async_write_some(b, std::move(handler));
        },
        token, buffers);
  }

  // What the socket holds now, up to b's size, without waiting (the socket is non-blocking;
  // would_block when nothing, eof when the peer closed). Plain connections only: a TLS layer may
  // hold bytes the socket no longer shows.
  size_t read_now(boost::asio::mutable_buffer b, boost::system::error_code& ec) {
    return stream_detail::recv_now(socket_.native_handle(), b.data(), b.size(), ec);
  }

  // What the socket takes now of `iov` (of its first kMaxWriteBuffers), without waiting (the
  // socket is non-blocking); TLS: nothing.
  size_t write_some(std::span<const iovec> iov, boost::system::error_code& ec) {
    if (tls_) {
      ec = boost::asio::error::would_block;
      return 0;
    }
    if (iov.size() > stream_detail::kMaxWriteBuffers) iov = iov.first(stream_detail::kMaxWriteBuffers);
    if (!socket_.non_blocking()) {  // a write that would wait: Asio's
      std::array<boost::asio::const_buffer, stream_detail::kMaxWriteBuffers> b;
      for (size_t i = 0; i < iov.size(); ++i) b[i] = boost::asio::const_buffer(iov[i].iov_base, iov[i].iov_len);
      return socket_.write_some(std::span<const boost::asio::const_buffer>(b.data(), iov.size()), ec);
    }
    return stream_detail::send_now(socket_.native_handle(), iov.data(), iov.size(), ec);
  }

 private:
  template <class H>
  friend struct stream_detail::NoteDrained;
  template <class B, class H>
  friend struct stream_detail::ReadWhenReady;

  template <bool Owned, class MutableBuffers, class Token>
  auto read(const MutableBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, size_t)>(
        [this](auto handler, const MutableBuffers& b) {
          using Handler = decltype(handler);
          if (!tls_) {
            if constexpr (!Owned) {
              socket_.async_read_some(b, std::move(handler));
            } else if (drained_ && socket_.non_blocking() && boost::asio::buffer_size(b) != 0) {
              socket_.async_wait(tcp::socket::wait_read,
                                 stream_detail::ReadWhenReady<MutableBuffers, Handler>{this, b, std::move(handler)});
            } else {
              socket_.async_read_some(
                  b, stream_detail::NoteDrained<Handler>{this, boost::asio::buffer_size(b), std::move(handler)});
            }
            return;
          }
          tls_->async_read_some(b, [h = std::move(handler)](boost::system::error_code ec, size_t n) mutable {
            if (ec == boost::asio::ssl::error::stream_truncated) ec = boost::asio::error::eof;
            std::move(h)(ec, n);
          });
        },
        token, buffers);
  }

  tcp::socket socket_;  // declared first: the TLS layer refers to it and goes first
  std::shared_ptr<boost::asio::ssl::context> ctx_;
  std::unique_ptr<tls_stream> tls_;
  bool drained_ = true;  // a plain read waits first (a new connection's peer has sent nothing yet)
};

namespace stream_detail {

template <class Handler>
void NoteDrained<Handler>::operator()(boost::system::error_code ec, size_t n) {
  stream->drained_ = n < capacity;
  std::move(handler)(ec, n);
}

template <class Buffers, class Handler>
void ReadWhenReady<Buffers, Handler>::operator()(boost::system::error_code ec) {
  if (ec) {  // cancelled, or the socket is gone
    std::move(handler)(ec, size_t{0});
    return;
  }
  Stream& s = *stream;
  size_t n;  // non-blocking: never waits
  if constexpr (std::is_convertible_v<Buffers, boost::asio::mutable_buffer>) {
    const boost::asio::mutable_buffer b(buffers);
    n = recv_now(s.socket_.native_handle(), b.data(), b.size(), ec);  // b is not empty (see read())
  } else {
    n = s.socket_.read_some(buffers, ec);
  }
  if (ec && (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again)) {
    // Readable, yet nothing to read (a spurious wake-up): the plain read, which waits. (Only a
    // second reader of the socket could take the bytes first, and a connection never has two at
    // once: the client watch reads only while the connection loop does not. A cancel between
    // the wake-up and this read would not reach the read started here.)
    s.socket_.async_read_some(buffers, NoteDrained<Handler>{stream, boost::asio::buffer_size(buffers), std::move(handler)});
    return;
  }
  s.drained_ = n < boost::asio::buffer_size(buffers);
  std::move(handler)(ec, n);
}

}  // namespace stream_detail
}  // namespace ramjet::net

// The wrapped handlers carry the caller's associated executor, allocator and cancellation slot.
namespace ramjet::net::stream_detail {
template <template <class, class> class Associator, class T, class DefaultCandidate>
struct ForwardAssociator {
  using Inner = typename stream_detail::Inner<T>::type;
  using type = typename Associator<Inner, DefaultCandidate>::type;
  static type get(const T& h) noexcept { return Associator<Inner, DefaultCandidate>::get(h.handler); }
  static auto get(const T& h, const DefaultCandidate& c) noexcept
      -> decltype(Associator<Inner, DefaultCandidate>::get(h.handler, c)) {
    return Associator<Inner, DefaultCandidate>::get(h.handler, c);
  }
};
}  // namespace ramjet::net::stream_detail

template <template <class, class> class Associator, class H, class DefaultCandidate>
struct boost::asio::associator<Associator, ramjet::net::stream_detail::NoteDrained<H>, DefaultCandidate>
    : ramjet::net::stream_detail::ForwardAssociator<Associator, ramjet::net::stream_detail::NoteDrained<H>,
                                                    DefaultCandidate> {};

template <template <class, class> class Associator, class B, class H, class DefaultCandidate>
struct boost::asio::associator<Associator, ramjet::net::stream_detail::ReadWhenReady<B, H>, DefaultCandidate>
    : ramjet::net::stream_detail::ForwardAssociator<Associator, ramjet::net::stream_detail::ReadWhenReady<B, H>,
                                                    DefaultCandidate> {};
