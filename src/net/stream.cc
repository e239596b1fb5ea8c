// net/stream: the plain socket's non-blocking read and write as bare system calls.
#include "net/stream.h"

#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

namespace ramjet::net::stream_detail {

namespace {

boost::system::error_code last_error() { return {errno, boost::asio::error::get_system_category()}; }

}  // namespace

size_t recv_now(int fd, void* data, size_t size, boost::system::error_code& ec) {
  for (;;) {
#if defined(SYS_recvfrom)
    const long n = ::syscall(SYS_recvfrom, fd, data, size, 0, nullptr, nullptr);
#else
    const long n = ::recv(fd, data, size, 0);
#endif
    if (n > 0) {
      ec = {};
      return static_cast<size_t>(n);
    }
    if (n == 0) {  // the peer closed (a zero-length read never gets here)
      ec = boost::asio::error::eof;
      return 0;
    }
    if (errno == EINTR) continue;
    ec = last_error();
    return 0;
  }
}

size_t send_now(int fd, const iovec* iov, size_t count, boost::system::error_code& ec) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = count;
  for (;;) {
#if defined(SYS_sendmsg)
    const long n = ::syscall(SYS_sendmsg, fd, &msg, MSG_NOSIGNAL);
#else
    const long n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
#endif
    if (n >= 0) {
      ec = {};
      return static_cast<size_t>(n);
    }
    if (errno == EINTR) continue;
    ec = last_error();
    return 0;
  }
}

}  // namespace ramjet::net::stream_detail
