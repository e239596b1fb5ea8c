// request/stream/observers: the routing state a served exchange changes, as exchange observers
// (request/stream/observer.h). app/main.cc adds them to the proxy.
#pragma once

#include "request/route/router.h"
#include "request/stream/observer.h"

namespace ramjet::request {

// Single-flight: a request whose prefix is new everywhere leads it on the engine it is
// dispatched to; concurrent requests with the same leading blocks follow it there while it
// prefills. The lead ends with the attempt (its response complete, or the attempt failed).
class SingleFlightLeads final : public ExchangeObserver {
 public:
  explicit SingleFlightLeads(route::Router& router)
      : ExchangeObserver(kDispatched | kCompleted | kFailed), router_(router) {}
  void dispatched(ExchangeRecord& x, size_t engine) override { x.lead = router_.lead(engine, *x.routed, *x.prep); }
  void completed(ExchangeRecord& x, size_t) override { x.lead.end(); }
  void failed(ExchangeRecord& x, size_t) override { x.lead.end(); }

 private:
  route::Router& router_;
};

// Index learning: a complete 200 response on an inference endpoint tells the router's overlap
// sources that its engine now holds the request's prefix.
class IndexLearning final : public ExchangeObserver {
 public:
  explicit IndexLearning(route::Router& router) : ExchangeObserver(kCompleted), router_(router) {}
  void completed(ExchangeRecord& x, size_t engine) override {
    if (x.accounted) router_.observe(engine, *x.prep);
  }

 private:
  route::Router& router_;
};

}  // namespace ramjet::request
