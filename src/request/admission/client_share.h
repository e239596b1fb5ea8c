// request/admission/client_share: each client's requests per model pool, for the
// waiting room's burst slots (RJ_ADMISSION_ENGINE_BURST). A client holding fewer requests than its
// fair share of the pool's slots (the slots divided among the clients holding requests, it
// included; a request is held from the waiting room to its end) may take an engine's burst slot — past RJ_ADMISSION_ENGINE_MAX_INFLIGHT — instead of
// waiting for a slot to free: two short questions are not stuck behind another client's long
// generations, which hold every regular slot. A client past its share waits as before, so the
// burst slots stay free for the clients that need them. Thread-safe; one short lock per call.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace ramjet::request {

class ClientShares {
 public:
  // One more request of `client` in `pool` (waiting or in flight, until it ends): returns whether
  // the client held fewer than ceil(slots / clients) requests there before it, where clients
  // counts those holding requests there, `client` included. One step, so that a burst of
  // simultaneous requests from one client cannot all find it under its share.
  bool enter(const std::string& pool, const std::string& client, uint64_t slots);
  // It ended.
  void remove(const std::string& pool, const std::string& client);
  size_t clients(const std::string& pool) const;  // with requests in flight (tests)

 private:
  mutable std::mutex mu_;
  // pool -> client -> requests held (entries at zero are erased).
  std::unordered_map<std::string, std::unordered_map<std::string, int64_t>> inflight_;
};

}  // namespace ramjet::request
