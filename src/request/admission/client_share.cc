#include "request/admission/client_share.h"

namespace ramjet::request {

void ClientShares::remove(const std::string& pool, const std::string& client) {
  std::lock_guard lock(mu_);
  const auto p = inflight_.find(pool);
  if (p == inflight_.end()) return;
  const auto c = p->second.find(client);
  if (c == p->second.end()) return;
  if (--c->second <= 0) p->second.erase(c);
  if (p->second.empty()) inflight_.erase(p);
}

bool ClientShares::enter(const std::string& pool, const std::string& client, uint64_t slots) {
  std::lock_guard lock(mu_);
  auto& held_by = inflight_[pool];
  const auto [it, fresh] = held_by.try_emplace(client, 0);
  const uint64_t clients = held_by.size();  // (it included)
  const uint64_t share = (slots + clients - 1) / clients;
  const bool under = static_cast<uint64_t>(it->second) < share;
  ++it->second;
  return under;
}

size_t ClientShares::clients(const std::string& pool) const {
  std::lock_guard lock(mu_);
  const auto p = inflight_.find(pool);
  return p == inflight_.end() ? 0 : p->second.size();
}

}  // namespace ramjet::request
