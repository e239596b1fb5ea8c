#include "sim/engine/engine.h"

#include <utility>

#include "sim/engine/engine_core.h"

namespace ramjet::sim {

struct Engine::Impl {
  Impl(EngineConfig config, KvEventSink* sink) : core(std::move(config), sink) {}
  EngineCore core;
};

Engine::Engine(EngineConfig config, KvEventSink* sink)
    : impl_(std::make_unique<Impl>(std::move(config), sink)) {}

Engine::~Engine() = default;

bool Engine::add_request(uint64_t id, std::vector<uint32_t> prompt, uint32_t max_tokens, CacheNamespace ns,
                         KvTransfer kv) {
  return impl_->core.add_request(id, std::move(prompt), max_tokens, std::move(ns), kv);
}

std::optional<RequestOutput> Engine::finish_kv_load(uint64_t id, bool ok) { return impl_->core.finish_kv_load(id, ok); }

bool Engine::release_held(uint64_t id) { return impl_->core.release_held(id); }

void Engine::abort(uint64_t id) { impl_->core.abort(id); }

bool Engine::idle() const { return impl_->core.idle(); }

StepResult Engine::step(double now_wall_s) { return impl_->core.step(now_wall_s); }

bool Engine::reset_prefix_cache(double now_wall_s) {
  return impl_->core.reset_prefix_cache(now_wall_s);
}

std::vector<RequestOutput> Engine::sleep(double now_wall_s) { return impl_->core.sleep(now_wall_s); }

uint32_t Engine::resident_prefix_tokens(const std::vector<uint32_t>& tokens, const CacheNamespace& ns) const {
  // Hashing reuses the engine's digest context; the engine has one writer (its owner).
  return impl_->core.resident_prefix_tokens(tokens, ns);
}

EngineStats Engine::stats() const { return impl_->core.stats(); }

const EngineConfig& Engine::config() const { return impl_->core.config(); }

}  // namespace ramjet::sim
