// request/admission/fair_queue: the order in which waiting requests leave ramjet's waiting room
// (RJ_ADMISSION_*, request/admission/admission.h). Pure: no clock, no I/O, no lock.
//
// Priority classes are strict bands: a request of a more urgent class (a smaller index) always
// leaves before any of a less urgent one. Within a class, clients share by tokens, not by
// requests — start-time fair queuing (Goyal et al., SFQ): each request a client queues books the
// client a turn whose cost is the request's estimated tokens (prompt and output); a turn starts at
// max(the class's virtual time, the client's previous finish) and finishes cost / weight later;
// the turn with the smallest start goes first (ties in arrival order) and moves the class's
// virtual time to its start. A client that sent 32 long requests at once waits behind a client
// that sends two short ones now, instead of ahead of it, and a client alone gets the whole room.
//
// Which of its requests a client's turn takes is the client's own order: the one with the
// earliest deadline (a TTFT target the client sent), then the others in arrival order. A deadline
// reorders a client's own backlog, never another client's share.
//
// A client is forgotten once it has nothing queued and the class's time has passed its finish,
// and every idle client once the class empties (the table stays bounded by the queued requests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace ramjet::request {

class FairQueue {
 public:
  static constexpr int64_t kNoDeadline = std::numeric_limits<int64_t>::max();

  explicit FairQueue(size_t classes = 1);

  // Queues request `id` (unique while queued) of `client` in `cls` (< classes) costing `cost`
  // tokens (≥ 1 counted) at `weight` (> 0; 1 = an equal share), due by `deadline` (any clock the
  // caller keeps to; kNoDeadline: none).
  void push(uint64_t id, size_t cls, const std::string& client, uint64_t cost, double weight = 1.0,
            int64_t deadline = kNoDeadline);
  // The request that leaves next (nullopt when empty); pop() takes it out.
  std::optional<uint64_t> peek() const;
  std::optional<uint64_t> pop();
  // Takes `id` out wherever it is (it gave up: its time ran out, its client left); its client
  // gives back its last turn. False when it was not queued.
  bool remove(uint64_t id);

  size_t size() const { return where_.size(); }
  bool empty() const { return where_.empty(); }
  size_t size(size_t cls) const { return classes_.at(cls).turns.size(); }
  size_t clients_tracked() const;  // (tests: the finish table stays bounded)

 private:
  using Turn = std::tuple<double, uint64_t>;            // start, arrival (unique)
  using Pending = std::tuple<int64_t, uint64_t, uint64_t>;  // deadline, arrival, id
  struct Client {
    double finish = 0;
    std::set<Turn> turns;       // its booked turns
    std::set<Pending> pending;  // its requests, in the order its turns take them
  };
  struct Class {
    double now = 0;  // the virtual time: the start of the last turn taken
    std::set<std::tuple<double, uint64_t, std::string>> turns;  // every client's turns: start, arrival, client
    std::unordered_map<std::string, Client> clients;
  };
  struct Where {
    size_t cls;
    std::string client;
    Pending pending;
  };
  void tidy(Class& c);

  std::vector<Class> classes_;
  std::unordered_map<uint64_t, Where> where_;
  uint64_t arrivals_ = 0;
};

}  // namespace ramjet::request
