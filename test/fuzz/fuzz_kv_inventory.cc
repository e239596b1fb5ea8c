// Fuzz target for what an engine's KV events do to ramjet's exact index: the bytes are decoded
// as a batch (cache/kv), every extra_keys entry is read (cache/kv/extra_keys), and the batch is
// applied to a small inventory (cache/events) twice — the second time its stores are duplicate
// copies or conflicts — then its removals again. Nothing may crash or leak, an error must be one of
// the typed ones, and after every step the shard's trie, tables and counts must be consistent.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <variant>

#include "cache/events/inventory.h"
#include "cache/kv/codec.h"
#include "cache/kv/extra_keys.h"

namespace {

namespace kv = ramjet::cache::kv;
namespace ev = ramjet::cache::events;

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto r = kv::decode_batch(std::span<const uint8_t>(data, size));
  if (!r.ok()) return 0;
  for (const auto& e : r->events) {
    const auto* s = std::get_if<kv::BlockStored>(&e);
    if (s == nullptr || !s->extra_keys) continue;
    for (const auto& entry : *s->extra_keys) {
      if (!entry) continue;
      const auto parts = kv::parse_extra_key(*entry);
      if (!parts.ok()) check(!parts.error().message.empty());
    }
  }
  ev::Inventory inv(ev::InventoryLimits{.shard = {.max_blocks = 64}});
  for (int round = 0; round < 2; ++round) {
    (void)inv.apply(*r);  // an error is the caller's cue to fence; the index stays consistent
    check(inv.shard().check_invariants());
  }
  kv::EventBatch removals = *r;
  std::erase_if(removals.events, [](const kv::Event& e) { return !std::holds_alternative<kv::BlockRemoved>(e); });
  (void)inv.apply(removals);
  check(inv.shard().check_invariants());
  for (const auto& e : r->events) {  // look every stored prompt up
    const auto* s = std::get_if<kv::BlockStored>(&e);
    if (s == nullptr) continue;
    const ev::Inventory* one[] = {&inv};
    std::optional<uint32_t> out[1];
    ev::lookup(one, ev::ExactRequest{s->token_ids, s->lora_name.value_or(""), {}}, out);
    check(!out[0] || *out[0] <= s->token_ids.size());
  }
  return 0;
}
