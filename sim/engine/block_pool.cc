#include "sim/engine/block_pool.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace ramjet::sim {

BlockPool::BlockPool(uint32_t num_blocks, uint32_t block_size, bool enable_caching)
    : block_size_(block_size), caching_(enable_caching), blocks_(std::max<uint32_t>(num_blocks, 2)) {
  const auto n = static_cast<int32_t>(blocks_.size());
  sentinel_.prev = sentinel_.next = n;
  // Block 0 is the null block: it never enters the free queue.
  for (uint32_t b = 1; b < blocks_.size(); ++b) push_back_free(b);
  cached_.reserve(blocks_.size());
}

double BlockPool::usage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(usable_blocks());
}

void BlockPool::push_back_free(uint32_t b) {
  const auto n = static_cast<int32_t>(blocks_.size());
  Block& blk = blocks_[b];
  assert(!blk.in_free);
  Block& tail_prev = sentinel_.prev == n ? sentinel_ : blocks_[sentinel_.prev];
  blk.prev = sentinel_.prev;
  blk.next = n;
  tail_prev.next = static_cast<int32_t>(b);
  sentinel_.prev = static_cast<int32_t>(b);
  blk.in_free = true;
  ++num_free_;
}

void BlockPool::push_front_free(uint32_t b) {
  const auto n = static_cast<int32_t>(blocks_.size());
  Block& blk = blocks_[b];
  assert(!blk.in_free);
  Block& head_next = sentinel_.next == n ? sentinel_ : blocks_[sentinel_.next];
  blk.next = sentinel_.next;
  blk.prev = n;
  head_next.prev = static_cast<int32_t>(b);
  sentinel_.next = static_cast<int32_t>(b);
  blk.in_free = true;
  ++num_free_;
}

void BlockPool::unlink_free(uint32_t b) {
  const auto n = static_cast<int32_t>(blocks_.size());
  Block& blk = blocks_[b];
  assert(blk.in_free);
  Block& p = blk.prev == n ? sentinel_ : blocks_[blk.prev];
  Block& q = blk.next == n ? sentinel_ : blocks_[blk.next];
  p.next = blk.next;
  q.prev = blk.prev;
  blk.prev = blk.next = -1;
  blk.in_free = false;
  --num_free_;
}

int64_t BlockPool::cached_block(const BlockHash& hash, uint32_t group) const {
  auto it = cached_.find(GroupHash{hash, group});
  if (it == cached_.end() || it->second.empty()) return -1;
  return it->second.front();
}

uint32_t BlockPool::copies(const BlockHash& hash, uint32_t group) const {
  auto it = cached_.find(GroupHash{hash, group});
  return it == cached_.end() ? 0 : static_cast<uint32_t>(it->second.size());
}

void BlockPool::maybe_evict(uint32_t b, std::vector<KvEvent>& events) {
  Block& blk = blocks_[b];
  if (!blk.cached) return;
  auto it = cached_.find(GroupHash{blk.hash, blk.group});
  assert(it != cached_.end());
  Copies& copies = it->second;
  copies.erase(std::find(copies.begin(), copies.end(), b));
  if (copies.empty()) cached_.erase(it);
  blk.cached = false;
  --num_cached_;
  BlockRemoved removed;
  removed.block_hashes.push_back(blk.hash);
  removed.medium = "GPU";
  removed.group_idx = blk.group;
  events.emplace_back(std::move(removed));
}

void BlockPool::get_new_blocks(uint32_t n, std::vector<uint32_t>& out,
                               std::vector<KvEvent>& events) {
  assert(n <= num_free_);
  for (uint32_t i = 0; i < n; ++i) {
    const auto b = static_cast<uint32_t>(sentinel_.next);
    unlink_free(b);
    if (caching_) maybe_evict(b, events);
    assert(blocks_[b].ref == 0);
    blocks_[b].ref = 1;
    out.push_back(b);
  }
}

void BlockPool::touch(std::span<const uint32_t> blocks) {
  for (uint32_t b : blocks) {
    if (b == 0) continue;  // the null block
    Block& blk = blocks_[b];
    if (blk.ref == 0) unlink_free(b);
    ++blk.ref;
  }
}

void BlockPool::free_reversed(std::span<const uint32_t> blocks) {
  // vLLM 0.32 free_blocks: a block without a cached hash can never be hit, so it is reused first
  // (prepended, LIFO, the request's last block at the very head); cached blocks join the tail
  // (FIFO: least recently freed evicted first).
  evict_first_.clear();
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    if (*it == 0) continue;  // the null block is never freed
    Block& blk = blocks_[*it];
    assert(blk.ref > 0);
    if (--blk.ref != 0) continue;
    if (blk.cached && caching_) push_back_free(*it);
    else evict_first_.push_back(*it);
  }
  for (auto it = evict_first_.rbegin(); it != evict_first_.rend(); ++it) push_front_free(*it);
}

void BlockPool::cache_full_blocks(std::span<const uint32_t> blocks,
                                  std::span<const BlockHash> hashes, uint32_t num_cached,
                                  uint32_t num_full, std::span<const uint32_t> tokens,
                                  const StoreInfo& info, std::vector<KvEvent>& events) {
  if (!caching_ || num_cached >= num_full) return;
  assert(blocks.size() >= num_full && hashes.size() >= num_full);
  assert(tokens.size() >= static_cast<size_t>(num_full) * block_size_);
  // As vLLM's GPU pool reports a text-only request: one extra_keys entry per reported block
  // (None without a namespace), the group's spec kind filled in as take_events() does.
  BlockStored stored;
  stored.block_size = block_size_;
  stored.medium = "GPU";
  if (info.ns != nullptr && info.ns->lora()) {
    stored.lora_id = info.ns->lora_id;
    stored.lora_name = info.ns->lora_name;
  }
  cache::kv::ExtraKeys extra;
  stored.group_idx = info.group;
  stored.kv_cache_spec_kind = info.kind;
  stored.block_hashes.reserve(num_full - num_cached);
  for (uint32_t i = num_cached; i < num_full; ++i) {
    if (blocks[i] == 0) continue;  // a null block (a state the group does not keep)
    Block& blk = blocks_[blocks[i]];
    assert(!blk.cached);
    blk.hash = hashes[i];
    blk.group = info.group;
    blk.cached = true;
    ++num_cached_;
    cached_[GroupHash{hashes[i], info.group}].push_back(blocks[i]);
    stored.block_hashes.push_back(hashes[i]);
    extra.push_back(info.ns != nullptr ? extra_keys_msgpack(*info.ns, i) : std::nullopt);
  }
  if (!extra.empty()) stored.extra_keys = std::move(extra);
  if (num_cached > 0) stored.parent_block_hash = hashes[num_cached - 1];
  stored.token_ids.assign(tokens.begin() + static_cast<ptrdiff_t>(num_cached) * block_size_,
                          tokens.begin() + static_cast<ptrdiff_t>(num_full) * block_size_);
  events.emplace_back(std::move(stored));
}

bool BlockPool::reset_prefix_cache(std::vector<KvEvent>& events) {
  if (num_free_ != usable_blocks()) return false;
  cached_.clear();
  for (Block& blk : blocks_) blk.cached = false;
  num_cached_ = 0;
  events.emplace_back(AllBlocksCleared{});
  return true;
}

std::string BlockPool::check_invariants() const {
  const auto n = static_cast<int32_t>(blocks_.size());
  if (blocks_[0].in_free || blocks_[0].ref != 0 || blocks_[0].cached) return "null block in use";
  // Walk the free queue.
  uint32_t walked = 0;
  int32_t prev = n;
  for (int32_t b = sentinel_.next; b != n; b = blocks_[b].next) {
    if (b <= 0 || b >= n) return "free queue link out of range";
    const Block& blk = blocks_[b];
    if (!blk.in_free) return "block in free queue not marked free";
    if (blk.ref != 0) return "block both free and referenced";
    if (blk.prev != prev) return "free queue back link broken";
    prev = b;
    if (++walked > blocks_.size()) return "free queue cycle";
  }
  if (walked != num_free_) return "free count mismatch";
  uint32_t free_marked = 0, used = 0, cached = 0;
  for (int32_t b = 1; b < n; ++b) {
    const Block& blk = blocks_[b];
    if (blk.in_free) ++free_marked;
    if (blk.ref > 0) ++used;
    if (blk.in_free == (blk.ref > 0)) return "block neither free nor referenced, or both";
    if (blk.cached) {
      ++cached;
      auto it = cached_.find(GroupHash{blk.hash, blk.group});
      if (it == cached_.end() ||
          std::find(it->second.begin(), it->second.end(), static_cast<uint32_t>(b)) ==
              it->second.end()) {
        return "cached block missing from the hash map";
      }
    }
  }
  if (free_marked != num_free_) return "free flag count mismatch";
  if (free_marked + used != usable_blocks()) return "free + used != usable";
  if (cached != num_cached_) return "cached count mismatch";
  size_t mapped = 0;
  for (const auto& [hash, copies] : cached_) {
    if (copies.empty()) return "empty hash entry";
    for (uint32_t b : copies) {
      if (!blocks_[b].cached || blocks_[b].hash != hash.hash || blocks_[b].group != hash.group) {
        return "hash map points at a stale block";
      }
    }
    mapped += copies.size();
  }
  if (mapped != num_cached_) return "hash map size mismatch";
  return "";
}

}  // namespace ramjet::sim
