// cache/index/exact_index: a shard is a node slab (one node per block: its key, copy counts per
// tier, reachable levels and trie links) and two open-addressing tables with linear probing and
// backward-shift deletion: chain key -> node (read by match() on any thread) and removal key ->
// node + copy count (writer only). All three are allocated once at the limits' size and never
// move; calloc leaves the pages untouched until the shard fills them.
#include "cache/index/exact_index.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>

#include <xxhash.h>

namespace ramjet::cache {

static_assert(std::endian::native == std::endian::little, "chain keys hash token IDs as little-endian bytes");

uint64_t exact_root_seed(uint32_t block_size, std::string_view lora_name, std::string_view cache_salt) {
  static constexpr char kTag[] = "ramjet.exact.v1";  // hashed with its NUL
  std::string in(kTag, sizeof(kTag));
  const uint64_t lens[2] = {lora_name.size(), cache_salt.size()};
  in.append(reinterpret_cast<const char*>(&block_size), sizeof(block_size));
  in.append(reinterpret_cast<const char*>(lens), sizeof(lens));
  in.append(lora_name);
  in.append(cache_salt);
  return XXH3_64bits(in.data(), in.size());
}

uint64_t exact_next(uint64_t seed, std::span<const uint32_t> block_tokens) {
  return XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size_bytes(), seed);
}

void exact_chain(std::span<const uint32_t> tokens, uint32_t block_size, uint64_t root_seed,
                 std::vector<uint64_t>& out) {
  if (block_size == 0) return;
  const size_t blocks = tokens.size() / block_size;
  out.reserve(out.size() + blocks);
  uint64_t seed = root_seed;
  for (size_t b = 0; b < blocks; ++b) {
    seed = exact_next(seed, tokens.subspan(b * block_size, block_size));
    out.push_back(seed);
  }
}

std::string_view label(Tier t) {
  switch (t) {
    case Tier::kGpu: return "gpu";
    case Tier::kCpu: return "cpu";
    case Tier::kDisk: return "disk";
  }
  return "gpu";
}

std::string_view reason(ExactStoreErrc e) {
  switch (e) {
    case ExactStoreErrc::kParentUnknown: return "parent_unknown";
    case ExactStoreErrc::kConflict: return "conflict";
    case ExactStoreErrc::kCapacity: return "capacity";
    case ExactStoreErrc::kShape: return "shape";
  }
  return "unknown";
}

// key and flags are read by match() while the writer runs: both sides access them atomically.
struct ExactShard::Node {
  uint64_t key;
  // The reachable levels (kLevelGpu, kLevelCpu, kLevelAny), and above them the low 29 bits of the
  // revision at whose end the block last became reachable at any level (held_since)
  uint32_t flags;
  uint32_t copies;  // per tier, packed (tier_copies): GPU 16 bits, CPU 8, disk 8
  uint32_t parent;
  uint32_t first_child;
  uint32_t next_sibling;  // also the free list's link
  uint32_t prev_sibling;
};

struct ExactShard::KeySlot {
  uint64_t key;
  uint32_t node_plus1;  // 0 = empty slot
  uint32_t count;       // copies stored under this key (low 30 bits) and their tier (high 2)
};

namespace {

// Reachable levels: the block and every block before it have a copy on GPU (kLevelGpu); on GPU
// or CPU (kLevelCpu); anywhere (kLevelAny, "reachable"). Each implies the next.
constexpr uint32_t kLevelGpu = 1;
constexpr uint32_t kLevelCpu = 2;
constexpr uint32_t kLevelAny = 4;
constexpr uint32_t kLevels = 7;
constexpr int kRevisionShift = 3;
constexpr uint32_t kRevisionMask = 0x1fffffffu;  // revisions in flags compare modulo 2^29
constexpr uint32_t kCountMask = 0x3fffffffu;     // KeySlot::count: copies
constexpr uint32_t kMaxCount = kCountMask;

// Node::copies: a block's copies per tier in one word, so the node stays 32 bytes. A copy past a
// tier's maximum fails its store as kCapacity (vLLM caches one hash in a few physical blocks).
constexpr uint32_t kTierShift[kTiers] = {0, 16, 24};
constexpr uint32_t kTierMax[kTiers] = {0xffff, 0xff, 0xff};
uint32_t tier_copies(uint32_t packed, size_t t) { return (packed >> kTierShift[t]) & kTierMax[t]; }
bool tier_full(uint32_t packed, Tier t) { return tier_copies(packed, static_cast<size_t>(t)) == kTierMax[static_cast<size_t>(t)]; }

uint32_t slot_count(uint32_t c) { return c & kCountMask; }
Tier slot_tier(uint32_t c) { return static_cast<Tier>(c >> 30); }
uint32_t slot_value(uint32_t count, Tier t) { return count | (static_cast<uint32_t>(t) << 30); }

template <typename T>
T relaxed_load(const T& x) {
  return std::atomic_ref<T>(const_cast<T&>(x)).load(std::memory_order_relaxed);
}
template <typename T>
void relaxed_store(T& x, T v) {
  std::atomic_ref<T>(x).store(v, std::memory_order_relaxed);
}

// Chain keys are XXH3 outputs already; removal keys may be structured (small ints), so they are
// mixed first (murmur3's finaliser).
uint64_t fmix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

// Removal keys: a slot's home from the mixed key (the slot keeps the key itself).
size_t home(uint64_t hash, size_t size) {
  return static_cast<size_t>((static_cast<unsigned __int128>(hash) * size) >> 64);
}

// Chain keys: a slot keeps the key's high 32 bits (its tag) and the node; the home is a function
// of the tag alone, so backward-shift deletion reads no node to place a neighbour.
uint32_t tag_of(uint64_t key) { return static_cast<uint32_t>(key >> 32); }
size_t tag_home(uint32_t tag, size_t size) { return static_cast<size_t>((static_cast<uint64_t>(tag) * size) >> 32); }
uint64_t slot_of(uint32_t tag, uint32_t node) { return (static_cast<uint64_t>(tag) << 32) | (static_cast<uint64_t>(node) + 1); }

// Between `hole` and `j` (cyclically): may the entry at j, whose home is h, move back to hole?
bool may_move(size_t hole, size_t j, size_t h) {
  const bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
  return !stays;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

template <typename T>
T* zeroed(size_t n) {
  void* p = std::calloc(n, sizeof(T));
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<T*>(p);
}

}  // namespace

uint64_t tier_key(uint64_t removal_key, Tier tier) {
  if (tier == Tier::kGpu) return removal_key;
  // A removal key is already a hash (Inventory::removal_key); the tier's copy is that hash mixed
  // with a per-tier constant, as far from it as any other key.
  return fmix(removal_key ^ (static_cast<uint64_t>(tier) * 0x9e3779b97f4a7c15ULL));
}

ExactShard::ExactShard(ExactShardLimits limits) : limits_(limits) {
  if (limits_.max_blocks == 0) limits_.max_blocks = 1;
  limits_.max_blocks = std::min(limits_.max_blocks, 1u << 31);  // tag_home needs a table under 2^32
  table_size_ = std::max<size_t>(16, static_cast<size_t>(limits_.max_blocks) + limits_.max_blocks / 4);
  nodes_ = zeroed<Node>(limits_.max_blocks);
  table_ = zeroed<uint64_t>(table_size_);
  keys_ = zeroed<KeySlot>(table_size_);
}

ExactShard::~ExactShard() {
  std::free(nodes_);
  std::free(table_);
  std::free(keys_);
}

size_t ExactShard::table_bytes() const {
  return static_cast<size_t>(limits_.max_blocks) * sizeof(Node) + table_size_ * (sizeof(uint64_t) + sizeof(KeySlot));
}

// ---------------------------------------------------------------------------------------- reads

// The writer's lookups and match()'s are one probe loop: relaxed loads cost the writer nothing, and
// the bounds (probe count, node index) only ever matter to a reader racing it.
uint32_t ExactShard::find_node(uint64_t key) const {
  const uint32_t tag = tag_of(key);
  size_t i = tag_home(tag, table_size_);
  for (size_t probes = 0; probes < table_size_; ++probes) {
    const uint64_t s = relaxed_load(table_[i]);
    if (s == 0) return kNone;
    if (static_cast<uint32_t>(s >> 32) == tag) {
      const uint32_t n = static_cast<uint32_t>(s) - 1;
      if (n < limits_.max_blocks && relaxed_load(nodes_[n].key) == key) return n;
    }
    if (++i == table_size_) i = 0;
  }
  return kNone;
}

bool ExactShard::read_reachable(uint64_t key, uint32_t level_bit) const {
  const uint32_t n = find_node(key);
  return n != kNone && (relaxed_load(nodes_[n].flags) & level_bit) != 0;
}

// reachable(chain[i]) holds for a prefix of the chain: a block is reachable only when its parent
// (the chain's previous block) is. Gallop to bracket the first miss, then bisect.
uint32_t ExactShard::gallop(std::span<const uint64_t> chain, uint32_t level_bit) const {
  const size_t n = chain.size();
  if (n == 0 || !read_reachable(chain[0], level_bit)) return 0;
  size_t lo = 0, hi = n, step = 1;  // chain[lo] reachable; chain[hi] not (or hi == n)
  while (lo + step < n) {
    if (read_reachable(chain[lo + step], level_bit)) {
      lo += step;
      step *= 2;
    } else {
      hi = lo + step;
      break;
    }
  }
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    if (read_reachable(chain[mid], level_bit)) lo = mid;
    else hi = mid;
  }
  return static_cast<uint32_t>(lo + 1);
}

// The runs at each level are prefixes of one another (GPU within GPU-or-CPU within any): the
// any-tier run first, then the shorter ones within it, and only when some copy is off the GPU.
TierBlocks ExactShard::gallop_tiers(std::span<const uint64_t> chain) const {
  TierBlocks t;
  const uint32_t any = gallop(chain, kLevelAny);
  if (any == 0) return t;
  const bool offloaded = tier_resident_[1].load(std::memory_order_relaxed) != 0 ||
                         tier_resident_[2].load(std::memory_order_relaxed) != 0;
  if (!offloaded) {
    t.by_tier[0] = any;
    return t;
  }
  const uint32_t cpu = tier_resident_[2].load(std::memory_order_relaxed) != 0 ? gallop(chain.first(any), kLevelCpu) : any;
  const uint32_t gpu = gallop(chain.first(cpu), kLevelGpu);
  t.by_tier = {gpu, cpu - gpu, any - cpu};
  return t;
}

std::optional<uint32_t> ExactShard::match(std::span<const uint64_t> chain) const {
  if (auto t = match_tiers(chain)) return t->total();
  return std::nullopt;
}

std::optional<TierBlocks> ExactShard::match_tiers(std::span<const uint64_t> chain) const {
  for (int attempt = 0; attempt < kReadTries; ++attempt) {
    uint64_t s1 = seq_.load(std::memory_order_acquire);
    for (int spin = 0; (s1 & 1) != 0 && spin < 4096; ++spin) {
      cpu_relax();
      s1 = seq_.load(std::memory_order_acquire);
    }
    if ((s1 & 1) != 0) {
      // The writer is still inside its section: most likely descheduled mid-write on a busy
      // machine. Give it the CPU once before the next try instead of spinning against it.
      std::this_thread::yield();
      continue;
    }
    const TierBlocks r = gallop_tiers(chain);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq_.load(std::memory_order_relaxed) == s1) return r;
  }
  return std::nullopt;
}

std::optional<bool> ExactShard::held_since(std::span<const uint64_t> chain, size_t from, uint64_t revision) const {
  const uint32_t rev = static_cast<uint32_t>(revision & kRevisionMask);
  for (int attempt = 0; attempt < kReadTries; ++attempt) {
    const uint64_t s1 = seq_.load(std::memory_order_acquire);
    if ((s1 & 1) != 0) {
      std::this_thread::yield();
      continue;
    }
    bool held = true;
    for (size_t i = from; i < chain.size() && held; ++i) {
      const uint32_t n = find_node(chain[i]);
      const uint32_t flags = n == kNone ? 0 : relaxed_load(nodes_[n].flags);
      // Serial-number order: reachable since a revision after `revision` (within 2^30 of it).
      const uint32_t ahead = ((flags >> kRevisionShift) - rev) & kRevisionMask;
      held = (flags & kLevelAny) != 0 && (ahead == 0 || ahead > (kRevisionMask >> 1));
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq_.load(std::memory_order_relaxed) == s1) return held;
  }
  return std::nullopt;
}

// --------------------------------------------------------------------------------------- writes

std::string_view reason(ExactImportErrc e) {
  switch (e) {
    case ExactImportErrc::kNotEmpty: return "not_empty";
    case ExactImportErrc::kParent: return "bad_parent";
    case ExactImportErrc::kDuplicateKey: return "duplicate_key";
    case ExactImportErrc::kDuplicateRemovalKey: return "duplicate_removal_key";
    case ExactImportErrc::kZeroCopies: return "bad_copies";
    case ExactImportErrc::kDangling: return "dangling_block";
    case ExactImportErrc::kShape: return "shape";
    case ExactImportErrc::kCapacity: return "capacity";
  }
  return "unknown";
}

void ExactShard::begin_write() {
  const uint64_t s = seq_.load(std::memory_order_relaxed);
  seq_.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

void ExactShard::end_write() {
  seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

size_t ExactShard::find_key_slot(uint64_t removal_key) const {
  size_t i = home(fmix(removal_key), table_size_);
  for (;;) {
    const KeySlot& s = keys_[i];
    if (s.node_plus1 == 0) return SIZE_MAX;
    if (s.key == removal_key) return i;
    if (++i == table_size_) i = 0;
  }
}

void ExactShard::table_insert(uint32_t n) {
  const uint32_t tag = tag_of(nodes_[n].key);
  size_t i = tag_home(tag, table_size_);
  while (table_[i] != 0) {
    if (++i == table_size_) i = 0;
  }
  relaxed_store(table_[i], slot_of(tag, n));
}

void ExactShard::table_erase(uint32_t n) {
  size_t hole = tag_home(tag_of(nodes_[n].key), table_size_);
  while (static_cast<uint32_t>(table_[hole]) != n + 1) {
    if (++hole == table_size_) hole = 0;
  }
  for (size_t j = hole;;) {
    if (++j == table_size_) j = 0;
    const uint64_t s = table_[j];
    if (s == 0) break;
    if (may_move(hole, j, tag_home(static_cast<uint32_t>(s >> 32), table_size_))) {
      relaxed_store(table_[hole], s);
      hole = j;
    }
  }
  relaxed_store(table_[hole], uint64_t{0});
}

size_t ExactShard::find_any_tier_slot(uint64_t removal_key) const {
  for (size_t t = 0; t < kTiers; ++t) {
    const size_t s = find_key_slot(tier_key(removal_key, static_cast<Tier>(t)));
    if (s != SIZE_MAX) return s;
  }
  return SIZE_MAX;
}

size_t ExactShard::key_insert(uint64_t removal_key, uint32_t n, Tier tier) {
  size_t i = home(fmix(removal_key), table_size_);
  while (keys_[i].node_plus1 != 0) {
    if (++i == table_size_) i = 0;
  }
  keys_[i] = KeySlot{removal_key, n + 1, slot_value(1, tier)};
  keys_used_.fetch_add(1, std::memory_order_relaxed);
  return i;
}

void ExactShard::key_erase(size_t hole) {
  for (size_t j = hole;;) {
    if (++j == table_size_) j = 0;
    if (keys_[j].node_plus1 == 0) break;
    if (may_move(hole, j, home(fmix(keys_[j].key), table_size_))) {
      keys_[hole] = keys_[j];
      hole = j;
    }
  }
  keys_[hole] = KeySlot{};
  keys_used_.fetch_sub(1, std::memory_order_relaxed);
}

uint32_t ExactShard::new_node(uint64_t key, uint32_t parent) {
  uint32_t n;
  if (free_head_ != kNone) {
    n = free_head_;
    free_head_ = nodes_[n].next_sibling;
  } else {
    n = high_water_++;
  }
  Node& x = nodes_[n];
  relaxed_store(x.key, key);
  relaxed_store(x.flags, uint32_t{0});
  x.copies = 0;
  x.parent = parent;
  x.first_child = kNone;
  x.prev_sibling = kNone;
  x.next_sibling = parent == kNone ? kNone : nodes_[parent].first_child;
  if (parent != kNone) {
    if (x.next_sibling != kNone) nodes_[x.next_sibling].prev_sibling = n;
    nodes_[parent].first_child = n;
  }
  table_insert(n);
  nodes_used_.fetch_add(1, std::memory_order_relaxed);
  return n;
}

void ExactShard::free_node(uint32_t n) {
  Node& x = nodes_[n];
  if (x.prev_sibling != kNone) nodes_[x.prev_sibling].next_sibling = x.next_sibling;
  else if (x.parent != kNone) nodes_[x.parent].first_child = x.next_sibling;
  if (x.next_sibling != kNone) nodes_[x.next_sibling].prev_sibling = x.prev_sibling;
  table_erase(n);
  relaxed_store(x.flags, uint32_t{0});
  x.parent = kNone;
  x.next_sibling = free_head_;
  free_head_ = n;
  nodes_used_.fetch_sub(1, std::memory_order_relaxed);
}

bool ExactShard::is_reachable(uint32_t n) const { return (nodes_[n].flags & kLevelAny) != 0; }

namespace {
bool held(uint32_t copies) { return copies != 0; }
}  // namespace

uint32_t ExactShard::levels_of(uint32_t n) const {
  const Node& x = nodes_[n];
  uint32_t have = 0;
  if (tier_copies(x.copies, 0) != 0) have |= kLevelGpu | kLevelCpu | kLevelAny;
  if (tier_copies(x.copies, 1) != 0) have |= kLevelCpu | kLevelAny;
  if (tier_copies(x.copies, 2) != 0) have |= kLevelAny;
  const uint32_t above = x.parent == kNone ? kLevels : (nodes_[x.parent].flags & kLevels);
  return have & above;
}

// Inside a write section (seq_ odd). A block that becomes reachable at any level keeps the
// revision the section ends at; one that stays reachable keeps the revision it had.
void ExactShard::set_levels(uint32_t n, uint32_t levels) {
  const uint32_t old = nodes_[n].flags;
  uint32_t since = old >> kRevisionShift;
  if ((levels & kLevelAny) != 0 && (old & kLevelAny) == 0) {
    since = static_cast<uint32_t>(((seq_.load(std::memory_order_relaxed) + 1) >> 1) & kRevisionMask);
  }
  relaxed_store(nodes_[n].flags, levels == 0 ? uint32_t{0} : (since << kRevisionShift) | levels);
}

// n's levels follow from its copies and its parent's levels; where they change, so may every
// descendant's (a block is reachable at a level only while its parent is).
void ExactShard::refresh(uint32_t n) {
  const uint32_t want = levels_of(n);
  if (want == (nodes_[n].flags & kLevels)) return;
  set_levels(n, want);
  stack_.clear();
  stack_.push_back(n);
  while (!stack_.empty()) {
    const uint32_t p = stack_.back();
    stack_.pop_back();
    for (uint32_t c = nodes_[p].first_child; c != kNone; c = nodes_[c].next_sibling) {
      const uint32_t w = levels_of(c);
      if (w == (nodes_[c].flags & kLevels)) continue;
      set_levels(c, w);
      stack_.push_back(c);
    }
  }
}

void ExactShard::add_copy(uint32_t n, Tier tier) {
  Node& x = nodes_[n];
  const size_t t = static_cast<size_t>(tier);
  const bool was_held = held(x.copies);
  const bool first = tier_copies(x.copies, t) == 0;
  x.copies += 1u << kTierShift[t];  // the callers checked tier_full
  if (!first) return;
  tier_resident_[t].fetch_add(1, std::memory_order_relaxed);
  if (!was_held) resident_.fetch_add(1, std::memory_order_relaxed);
  refresh(n);
}

void ExactShard::drop_copy(uint32_t n, Tier tier) {
  Node& x = nodes_[n];
  const size_t t = static_cast<size_t>(tier);
  x.copies -= 1u << kTierShift[t];
  if (tier_copies(x.copies, t) != 0) return;
  tier_resident_[t].fetch_sub(1, std::memory_order_relaxed);
  if (!held(x.copies)) resident_.fetch_sub(1, std::memory_order_relaxed);
  refresh(n);
  // Prune: a block nobody holds and nothing hangs below is forgotten, and so may its parent be.
  while (n != kNone && !held(nodes_[n].copies) && nodes_[n].first_child == kNone) {
    const uint32_t p = nodes_[n].parent;
    free_node(n);
    n = p;
  }
}

void ExactShard::drop_key_copy(size_t ks) {
  const uint32_t n = keys_[ks].node_plus1 - 1;
  const Tier tier = slot_tier(keys_[ks].count);
  if (slot_count(--keys_[ks].count) == 0) key_erase(ks);
  drop_copy(n, tier);
}

std::optional<ExactStoreErrc> ExactShard::store(std::optional<uint64_t> parent, uint64_t root_seed,
                                                std::span<const uint64_t> removal_keys_in,
                                                std::span<const uint32_t> tokens, uint32_t block_size, Tier tier) {
  const size_t count = removal_keys_in.size();
  if (block_size == 0 || tokens.size() != static_cast<size_t>(block_size) * count) return ExactStoreErrc::kShape;
  if (count == 0) return std::nullopt;
  const std::span<const uint64_t> removal_keys = tiered(removal_keys_in, tier);
  uint32_t parent_node = kNone;
  uint64_t seed = root_seed;
  if (parent) {
    const size_t ks = find_any_tier_slot(*parent);
    if (ks == SIZE_MAX) return ExactStoreErrc::kParentUnknown;
    parent_node = keys_[ks].node_plus1 - 1;
    seed = nodes_[parent_node].key;
  }

  // Pass 1, read only: every block's key, the blocks and removal keys to create, conflicts. The
  // probes' results are kept for pass 2 (inserting never moves an entry of a linear-probing table,
  // and no removal key repeats within a store), and the probes run kPrefetch blocks behind their
  // prefetches so a long store's cache misses overlap.
  constexpr uint32_t kNew = kNone - 1;  // "a node this store creates"
  if (count > 1) {  // one removal key twice in one store would name two different blocks
    dup_scratch_.assign(removal_keys.begin(), removal_keys.end());
    std::sort(dup_scratch_.begin(), dup_scratch_.end());
    if (std::adjacent_find(dup_scratch_.begin(), dup_scratch_.end()) != dup_scratch_.end()) {
      return ExactStoreErrc::kConflict;
    }
  }
  std::vector<uint64_t>& keys = chain_scratch_;
  keys.resize(count);
  for (size_t b = 0; b < count; ++b) keys[b] = seed = exact_next(seed, tokens.subspan(b * block_size, block_size));
  node_scratch_.resize(count);
  slot_scratch_.resize(count);
  uint64_t new_nodes = 0, new_keys = 0;
  uint32_t prev = parent_node;
  for (size_t b = 0; b < count; ++b) {
    if (b + kPrefetch < count) {
      __builtin_prefetch(&table_[tag_home(tag_of(keys[b + kPrefetch]), table_size_)]);
      __builtin_prefetch(&keys_[home(fmix(removal_keys[b + kPrefetch]), table_size_)]);
    }
    uint32_t n = find_node(keys[b]);
    if (n != kNone && (prev == kNew || nodes_[n].parent != prev)) return ExactStoreErrc::kConflict;
    if (n != kNone && tier_full(nodes_[n].copies, tier)) return ExactStoreErrc::kCapacity;
    if (n == kNone) {
      ++new_nodes;
      n = kNew;
    }
    const size_t ks = find_key_slot(removal_keys[b]);
    if (ks == SIZE_MAX) {
      ++new_keys;
    } else if (n == kNew || keys_[ks].node_plus1 - 1 != n || slot_tier(keys_[ks].count) != tier) {
      return ExactStoreErrc::kConflict;
    } else if (slot_count(keys_[ks].count) == kMaxCount) {
      return ExactStoreErrc::kCapacity;
    }
    node_scratch_[b] = n;
    slot_scratch_[b] = ks;
    prev = n;
  }
  if (nodes_used_.load(std::memory_order_relaxed) + new_nodes > limits_.max_blocks ||
      keys_used_.load(std::memory_order_relaxed) + new_keys > limits_.max_blocks) {
    return ExactStoreErrc::kCapacity;
  }

  // Pass 2: apply, in write sections of kWriteBatch blocks so readers are never held long; each
  // block stored leaves a whole trie behind it.
  prev = parent_node;
  begin_write();
  for (size_t b = 0; b < count; ++b) {
    if (b != 0 && b % kWriteBatch == 0) {
      end_write();
      begin_write();
    }
    uint32_t n = node_scratch_[b];
    if (n == kNew) n = new_node(keys[b], prev);
    if (slot_scratch_[b] == SIZE_MAX) key_insert(removal_keys[b], n, tier);
    else ++keys_[slot_scratch_[b]].count;
    add_copy(n, tier);
    prev = n;
  }
  end_write();
  return std::nullopt;
}

std::span<const uint64_t> ExactShard::tiered(std::span<const uint64_t> removal_keys, Tier tier) {
  if (tier == Tier::kGpu) return removal_keys;
  tier_scratch_.resize(removal_keys.size());
  for (size_t i = 0; i < removal_keys.size(); ++i) tier_scratch_[i] = tier_key(removal_keys[i], tier);
  return tier_scratch_;
}

std::optional<ExactStoreErrc> ExactShard::attach(std::span<const uint64_t> removal_keys, Tier tier, uint32_t& unknown) {
  std::optional<ExactStoreErrc> err;
  begin_write();
  for (size_t b = 0; b < removal_keys.size(); ++b) {
    if (b != 0 && b % kWriteBatch == 0) {
      end_write();
      begin_write();
    }
    const size_t base = find_any_tier_slot(removal_keys[b]);
    if (base == SIZE_MAX) {
      ++unknown;
      continue;
    }
    const uint32_t n = keys_[base].node_plus1 - 1;
    if (tier_full(nodes_[n].copies, tier)) {
      err = ExactStoreErrc::kCapacity;
      break;
    }
    const uint64_t key = tier_key(removal_keys[b], tier);
    const size_t ks = find_key_slot(key);
    if (ks == SIZE_MAX) {
      if (keys_used_.load(std::memory_order_relaxed) >= limits_.max_blocks) {
        err = ExactStoreErrc::kCapacity;
        break;
      }
      key_insert(key, n, tier);
    } else if (keys_[ks].node_plus1 - 1 != n || slot_tier(keys_[ks].count) != tier) {
      err = ExactStoreErrc::kConflict;
      break;
    } else if (slot_count(keys_[ks].count) == kMaxCount) {
      err = ExactStoreErrc::kCapacity;
      break;
    } else {
      ++keys_[ks].count;
    }
    add_copy(n, tier);
  }
  end_write();
  return err;
}

uint32_t ExactShard::remove(std::span<const uint64_t> removal_keys_in, Tier tier) {
  const std::span<const uint64_t> removal_keys = tiered(removal_keys_in, tier);
  uint32_t unknown = 0;
  begin_write();
  for (size_t b = 0; b < removal_keys.size(); ++b) {
    if (b != 0 && b % kWriteBatch == 0) {
      end_write();
      begin_write();
    }
    // Two stages ahead: the key's slot (kPrefetch blocks on), then, once that slot is in cache,
    // its node and the node's table slot (half as far).
    if (b + kPrefetch < removal_keys.size()) {
      __builtin_prefetch(&keys_[home(fmix(removal_keys[b + kPrefetch]), table_size_)]);
    }
    if (b + kPrefetch / 2 < removal_keys.size()) {
      const size_t ahead = find_key_slot(removal_keys[b + kPrefetch / 2]);
      if (ahead != SIZE_MAX) __builtin_prefetch(&nodes_[keys_[ahead].node_plus1 - 1]);
    }
    const size_t ks = find_key_slot(removal_keys[b]);
    if (ks == SIZE_MAX) {
      ++unknown;
      continue;
    }
    drop_key_copy(ks);
  }
  end_write();
  return unknown;
}

void ExactShard::clear_tier(Tier tier) {
  const size_t t = static_cast<size_t>(tier);
  if (tier_resident_[t].load(std::memory_order_relaxed) == 0) return;
  bool others = false;
  for (size_t o = 0; o < kTiers; ++o) others = others || (o != t && tier_resident_[o].load(std::memory_order_relaxed) != 0);
  if (!others) return clear();
  // The tier's keys first (erasing shifts the table), then every copy under each.
  tier_scratch_.clear();
  for (size_t i = 0; i < table_size_; ++i) {
    if (keys_[i].node_plus1 != 0 && slot_tier(keys_[i].count) == tier) tier_scratch_.push_back(keys_[i].key);
  }
  begin_write();
  for (size_t b = 0; b < tier_scratch_.size(); ++b) {
    if (b != 0 && b % kWriteBatch == 0) {
      end_write();
      begin_write();
    }
    for (size_t ks = find_key_slot(tier_scratch_[b]); ks != SIZE_MAX; ks = find_key_slot(tier_scratch_[b])) {
      drop_key_copy(ks);
    }
  }
  end_write();
}

void ExactShard::clear() {
  if (high_water_ == 0 && keys_used_.load(std::memory_order_relaxed) == 0) return;
  begin_write();
  for (size_t i = 0; i < table_size_; ++i) {
    if (table_[i] != 0) relaxed_store(table_[i], uint64_t{0});
  }
  for (uint32_t n = 0; n < high_water_; ++n) {
    if (nodes_[n].flags != 0) relaxed_store(nodes_[n].flags, uint32_t{0});
  }
  std::memset(static_cast<void*>(keys_), 0, table_size_ * sizeof(KeySlot));
  free_head_ = kNone;
  high_water_ = 0;
  nodes_used_.store(0, std::memory_order_relaxed);
  resident_.store(0, std::memory_order_relaxed);
  for (auto& r : tier_resident_) r.store(0, std::memory_order_relaxed);
  keys_used_.store(0, std::memory_order_relaxed);
  end_write();
}

// ------------------------------------------------------------------------------ export / import

void ExactShard::export_blocks(std::vector<ExactBlockRecord>& blocks, std::vector<ExactRemovalRecord>& removals) const {
  // Each live node's removal keys, bucketed by node (counting sort over the key table).
  std::vector<uint32_t> first(static_cast<size_t>(high_water_) + 1, 0);
  for (size_t i = 0; i < table_size_; ++i) {
    if (keys_[i].node_plus1 != 0) ++first[keys_[i].node_plus1];
  }
  for (size_t n = 1; n < first.size(); ++n) first[n] += first[n - 1];
  std::vector<ExactRemovalRecord> by_node(first.back());
  std::vector<uint32_t> fill(first.begin(), first.end() - 1);
  for (size_t i = 0; i < table_size_; ++i) {
    const KeySlot& k = keys_[i];
    if (k.node_plus1 != 0) {
      by_node[fill[k.node_plus1 - 1]++] = ExactRemovalRecord{k.key, slot_count(k.count), slot_tier(k.count)};
    }
  }
  // Parents first: a depth-first walk from every first block (a live node without a parent).
  std::vector<std::pair<uint32_t, uint32_t>> stack;  // (node, its parent's record)
  for (uint32_t n = 0; n < high_water_; ++n) {
    if (nodes_[n].parent == kNone && find_node(nodes_[n].key) == n) stack.emplace_back(n, ExactBlockRecord::kNoParent);
  }
  blocks.reserve(blocks.size() + nodes_used_.load(std::memory_order_relaxed));
  removals.reserve(removals.size() + by_node.size());
  const size_t base = blocks.size();
  while (!stack.empty()) {
    const auto [n, parent_record] = stack.back();
    stack.pop_back();
    const uint32_t record = static_cast<uint32_t>(blocks.size() - base);
    blocks.push_back(ExactBlockRecord{nodes_[n].key, parent_record, first[n + 1] - first[n]});
    removals.insert(removals.end(), by_node.begin() + first[n], by_node.begin() + first[n + 1]);
    for (uint32_t c = nodes_[n].first_child; c != kNone; c = nodes_[c].next_sibling) stack.emplace_back(c, record);
  }
}

std::optional<ExactImportErrc> ExactShard::import_blocks(std::span<const ExactBlockRecord> blocks,
                                                         std::span<const ExactRemovalRecord> removals) {
  if (nodes_used_.load(std::memory_order_relaxed) != 0 || keys_used_.load(std::memory_order_relaxed) != 0) {
    return ExactImportErrc::kNotEmpty;
  }
  if (blocks.size() > limits_.max_blocks || removals.size() > limits_.max_blocks) return ExactImportErrc::kCapacity;
  uint64_t total = 0;
  for (const auto& b : blocks) total += b.removal_keys;
  if (total != removals.size()) return ExactImportErrc::kShape;

  std::optional<ExactImportErrc> err;
  std::vector<uint32_t> node_of(blocks.size());
  begin_write();
  size_t r = 0;
  for (size_t i = 0; i < blocks.size() && !err; ++i) {
    const ExactBlockRecord& b = blocks[i];
    if (i + kPrefetch < blocks.size()) __builtin_prefetch(&table_[tag_home(tag_of(blocks[i + kPrefetch].key), table_size_)]);
    uint32_t parent = kNone;
    if (b.parent != ExactBlockRecord::kNoParent) {
      if (b.parent >= i) {
        err = ExactImportErrc::kParent;
        break;
      }
      parent = node_of[b.parent];
    }
    if (find_node(b.key) != kNone) {
      err = ExactImportErrc::kDuplicateKey;
      break;
    }
    const uint32_t n = new_node(b.key, parent);
    node_of[i] = n;
    uint64_t copies[kTiers] = {0, 0, 0};
    for (uint32_t k = 0; k < b.removal_keys; ++k, ++r) {
      const ExactRemovalRecord& rk = removals[r];
      const size_t t = static_cast<size_t>(rk.tier);
      if (rk.copies == 0 || rk.copies > kMaxCount || t >= kTiers) {
        err = ExactImportErrc::kZeroCopies;
        break;
      }
      if (find_key_slot(rk.key) != SIZE_MAX) {
        err = ExactImportErrc::kDuplicateRemovalKey;
        break;
      }
      keys_[key_insert(rk.key, n, rk.tier)].count = slot_value(rk.copies, rk.tier);
      copies[t] += rk.copies;
    }
    if (err) break;
    if (copies[0] > kTierMax[0] || copies[1] > kTierMax[1] || copies[2] > kTierMax[2]) {
      err = ExactImportErrc::kZeroCopies;
      break;
    }
    Node& x = nodes_[n];
    x.copies = 0;
    for (size_t t = 0; t < kTiers; ++t) {
      x.copies |= static_cast<uint32_t>(copies[t]) << kTierShift[t];
      if (copies[t] > 0) tier_resident_[t].fetch_add(1, std::memory_order_relaxed);
    }
    if (held(x.copies)) {
      resident_.fetch_add(1, std::memory_order_relaxed);
      set_levels(n, levels_of(n));  // parents come first: theirs are set
    }
  }
  if (!err) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      const Node& x = nodes_[node_of[i]];
      if (!held(x.copies) && x.first_child == kNone) {
        err = ExactImportErrc::kDangling;
        break;
      }
    }
  }
  end_write();
  if (err) clear();
  return err;
}

// ----------------------------------------------------------------------------------- invariants

bool ExactShard::check_invariants() const {
  std::vector<std::array<uint32_t, kTiers>> copies_by_keys(high_water_, std::array<uint32_t, kTiers>{});
  size_t keys = 0;
  for (size_t i = 0; i < table_size_; ++i) {
    const KeySlot& s = keys_[i];
    if (s.node_plus1 == 0) continue;
    ++keys;
    if (slot_count(s.count) == 0 || static_cast<size_t>(slot_tier(s.count)) >= kTiers || s.node_plus1 > high_water_ ||
        find_key_slot(s.key) != i) {
      return false;
    }
    copies_by_keys[s.node_plus1 - 1][static_cast<size_t>(slot_tier(s.count))] += slot_count(s.count);
  }
  if (keys != keys_used_.load()) return false;
  size_t nodes = 0, resident = 0;
  std::array<size_t, kTiers> tier_resident{};
  for (size_t i = 0; i < table_size_; ++i) {
    if (table_[i] == 0) continue;
    ++nodes;
    const uint32_t n = static_cast<uint32_t>(table_[i]) - 1;
    if (n >= high_water_) return false;
    const Node& x = nodes_[n];
    if (static_cast<uint32_t>(table_[i] >> 32) != tag_of(x.key) || find_node(x.key) != n) return false;
    for (size_t t = 0; t < kTiers; ++t) {
      if (tier_copies(x.copies, t) != copies_by_keys[n][t]) return false;
      if (tier_copies(x.copies, t) > 0) ++tier_resident[t];
    }
    if (held(x.copies)) ++resident;
    if (!held(x.copies) && x.first_child == kNone) return false;  // would have been pruned
    if ((x.flags & kLevels) != levels_of(n)) return false;
    if (x.parent != kNone) {  // listed among its parent's children
      bool listed = false;
      for (uint32_t c = nodes_[x.parent].first_child; c != kNone && !listed; c = nodes_[c].next_sibling) listed = c == n;
      if (!listed) return false;
    }
    for (uint32_t c = x.first_child; c != kNone; c = nodes_[c].next_sibling) {
      if (nodes_[c].parent != n) return false;
    }
  }
  for (size_t t = 0; t < kTiers; ++t) {
    if (tier_resident[t] != tier_resident_[t].load()) return false;
  }
  return nodes == nodes_used_.load() && resident == resident_.load();
}

}  // namespace ramjet::cache
