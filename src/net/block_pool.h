#pragma once
// Receive buffers from a per-thread pool of equal blocks, handed out last in, first out.
//
// With many connections each holding a request in flight, a buffer of each connection's own is
// touched once a request and so is cold when that connection's next request comes: over 32
// connections or more, what requests touch of their connections' own memory outgrows a core's
// L2 (bench/instructions_per_request.sh CACHE=1 CONNECTIONS=64). A connection that takes a block
// only when its socket is readable, and gives it back once the request is parsed, gets the block
// the last connection gave back, still in this core's cache, and the kernel copies the request
// into lines that are already there (nginx frees an idle connection's header buffer the same way).
#include <cstddef>
#include <new>

#include <boost/beast/core/flat_buffer.hpp>

namespace ramjet::net {

inline constexpr std::size_t kPooledBlock = 16 * 1024;

// A block of kPooledBlock bytes: the one this thread was given back last, else a new one.
void* take_block();
// Back to this thread's pool (at most kPoolBlocksPerThread kept; freed past that).
void give_block(void* p) noexcept;
inline constexpr std::size_t kPoolBlocksPerThread = 16;
// Blocks this thread's pool holds now (for tests).
std::size_t pooled_blocks() noexcept;

// An allocator that serves kPooledBlock-byte requests from the pool, any other size from the heap.
template <class T>
struct PooledAllocator {
  using value_type = T;
  PooledAllocator() noexcept = default;
  template <class U>
  PooledAllocator(const PooledAllocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) {
    if (n * sizeof(T) == kPooledBlock) return static_cast<T*>(take_block());
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) == kPooledBlock) give_block(p);
    else ::operator delete(p);
  }
  template <class U>
  bool operator==(const PooledAllocator<U>&) const noexcept { return true; }
};

// A connection's read buffer whose storage is a pooled block while it is kPooledBlock bytes
// (read_room: what an empty one asks for), given back by release_if_empty().
using PooledBuffer = boost::beast::basic_flat_buffer<PooledAllocator<char>>;

// What a read into `b` asks for, at most `max`: the room it has (at least 512 bytes, as
// beast::read_size), or a pooled block's worth when it has no storage.
std::size_t read_room(const PooledBuffer& b, std::size_t max) noexcept;
// Gives `b`'s storage back when it holds no bytes.
inline void release_if_empty(PooledBuffer& b) noexcept {
  if (b.size() == 0) b.shrink_to_fit();
}

}  // namespace ramjet::net
