// request/admission/fair_queue (see fair_queue.h).
#include "request/admission/fair_queue.h"

#include <algorithm>

namespace ramjet::request {

FairQueue::FairQueue(size_t classes) : classes_(std::max<size_t>(1, classes)) {}

void FairQueue::push(uint64_t id, size_t cls, const std::string& client, uint64_t cost, double weight,
                     int64_t deadline) {
  Class& c = classes_.at(cls);
  Client& k = c.clients[client];
  const double start = std::max(c.now, k.finish);
  k.finish = start + static_cast<double>(std::max<uint64_t>(cost, 1)) / (weight > 0 ? weight : 1.0);
  const uint64_t arrival = arrivals_++;
  k.turns.emplace(start, arrival);
  c.turns.emplace(start, arrival, client);
  const Pending p{deadline, arrival, id};
  k.pending.insert(p);
  where_[id] = Where{cls, client, p};
}

std::optional<uint64_t> FairQueue::peek() const {
  for (const Class& c : classes_) {
    if (c.turns.empty()) continue;
    const Client& k = c.clients.at(std::get<2>(*c.turns.begin()));
    return std::get<2>(*k.pending.begin());
  }
  return std::nullopt;
}

std::optional<uint64_t> FairQueue::pop() {
  for (Class& c : classes_) {
    if (c.turns.empty()) continue;
    const auto turn = c.turns.begin();
    const double start = std::get<0>(*turn);
    Client& k = c.clients.at(std::get<2>(*turn));
    k.turns.erase(Turn{start, std::get<1>(*turn)});
    const uint64_t id = std::get<2>(*k.pending.begin());
    k.pending.erase(k.pending.begin());
    c.turns.erase(turn);
    c.now = std::max(c.now, start);
    where_.erase(id);
    tidy(c);
    return id;
  }
  return std::nullopt;
}

bool FairQueue::remove(uint64_t id) {
  const auto it = where_.find(id);
  if (it == where_.end()) return false;
  Class& c = classes_[it->second.cls];
  Client& k = c.clients.at(it->second.client);
  k.pending.erase(it->second.pending);
  // The client gives back its last turn: its other requests keep their places.
  const Turn last = *k.turns.rbegin();
  k.turns.erase(last);
  c.turns.erase({std::get<0>(last), std::get<1>(last), it->second.client});
  where_.erase(it);
  tidy(c);
  return true;
}

void FairQueue::tidy(Class& c) {
  // Forget clients with nothing queued whose finish the class's time has passed (they would
  // start at the class's time anyway), and every idle client once the class is empty: a room
  // that drained starts afresh.
  if (c.turns.empty()) c.now = 0;
  for (auto it = c.clients.begin(); it != c.clients.end();) {
    const bool idle = it->second.pending.empty();
    if (idle && (c.turns.empty() || it->second.finish <= c.now)) it = c.clients.erase(it);
    else ++it;
  }
}

size_t FairQueue::clients_tracked() const {
  size_t n = 0;
  for (const Class& c : classes_) n += c.clients.size();
  return n;
}

}  // namespace ramjet::request
