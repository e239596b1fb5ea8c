#include "net/block_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

namespace ramjet::net {
namespace {

void drain_pool(std::vector<void*>& out) {
  while (pooled_blocks() > 0) out.push_back(take_block());
}

TEST(BlockPool, TheBlockGivenBackLastIsTakenFirst) {
  std::vector<void*> held;
  drain_pool(held);
  void* a = take_block();
  void* b = take_block();
  give_block(a);
  give_block(b);
  EXPECT_EQ(pooled_blocks(), 2u);
  EXPECT_EQ(take_block(), b);
  EXPECT_EQ(take_block(), a);
  EXPECT_EQ(pooled_blocks(), 0u);
  give_block(a);
  give_block(b);
  for (void* p : held) give_block(p);
}

TEST(BlockPool, KeepsAtMostItsShareAThreadAndFreesTheRest) {
  std::vector<void*> blocks;
  for (size_t i = 0; i < kPoolBlocksPerThread + 5; ++i) blocks.push_back(take_block());
  for (void* p : blocks) give_block(p);  // ASan: the five past the cap are freed, not leaked
  EXPECT_EQ(pooled_blocks(), kPoolBlocksPerThread);
}

TEST(BlockPool, EachThreadHasItsOwn) {
  give_block(take_block());
  ASSERT_GT(pooled_blocks(), 0u);
  size_t other = 99;
  std::thread([&] { other = pooled_blocks(); }).join();
  EXPECT_EQ(other, 0u);
}

TEST(PooledBuffer, AnEmptyBufferReadsIntoThePooledBlockAndGivesItBackOnceEmpty) {
  std::vector<void*> held;
  drain_pool(held);
  void* hot = take_block();
  give_block(hot);

  PooledBuffer b;
  EXPECT_EQ(b.capacity(), 0u);
  EXPECT_EQ(read_room(b, 64 * 1024), kPooledBlock);  // not beast::read_size's 512
  EXPECT_EQ(read_room(b, 1000), 1000u);
  auto room = b.prepare(read_room(b, 64 * 1024));
  EXPECT_EQ(room.data(), hot);  // the block given back last
  EXPECT_EQ(pooled_blocks(), 0u);
  std::memcpy(room.data(), "GET / HTTP/1.1\r\n\r\n", 18);
  b.commit(18);
  EXPECT_EQ(read_room(b, 64 * 1024), kPooledBlock - 18);  // the room it has, as beast::read_size

  release_if_empty(b);  // bytes left (a pipelined request): kept
  EXPECT_EQ(b.size(), 18u);
  EXPECT_EQ(b.capacity(), kPooledBlock);
  b.consume(18);
  release_if_empty(b);
  EXPECT_EQ(b.capacity(), 0u);
  EXPECT_EQ(pooled_blocks(), 1u);
  EXPECT_EQ(take_block(), hot);
  give_block(hot);
  for (void* p : held) give_block(p);
}

TEST(PooledBuffer, OtherSizesComeFromTheHeap) {
  std::vector<void*> held;
  drain_pool(held);  // an empty pool: a wrongly pooled block would show
  {
    PooledBuffer b;
    b.prepare(100);  // a 100-byte buffer: the heap's
    b.commit(100);
    b.prepare(64 * 1024);  // grown past a block: the heap's too
    EXPECT_GE(b.capacity(), 64u * 1024);
    b.consume(100);
    release_if_empty(b);
    EXPECT_EQ(b.capacity(), 0u);
  }
  EXPECT_EQ(pooled_blocks(), 0u);
  for (void* p : held) give_block(p);
}

}  // namespace
}  // namespace ramjet::net
