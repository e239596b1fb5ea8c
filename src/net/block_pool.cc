#include "net/block_pool.h"

#include <algorithm>
#include <array>

#include <boost/beast/core/read_size.hpp>

namespace ramjet::net {
namespace {

struct Pool {
  std::array<void*, kPoolBlocksPerThread> free{};
  std::size_t n = 0;
  ~Pool() {
    while (n > 0) ::operator delete(free[--n]);
  }
};
thread_local Pool pool;

}  // namespace

void* take_block() {
  if (pool.n > 0) return pool.free[--pool.n];
  return ::operator new(kPooledBlock);
}

void give_block(void* p) noexcept {
  if (pool.n < pool.free.size()) {
    pool.free[pool.n++] = p;
  } else {
    ::operator delete(p);
  }
}

std::size_t pooled_blocks() noexcept { return pool.n; }

std::size_t read_room(const PooledBuffer& b, std::size_t max) noexcept {
  if (b.capacity() == 0) return std::min(kPooledBlock, max);
  return boost::beast::read_size(b, max);
}

}  // namespace ramjet::net
