// RouteListeners: the subscribers of one watching RouteDirectory (route_directory.h) and
// the delivery of its changes to them. A directory calls notify() after it updated its
// own view and released its own locks, so a listener may look routes up again and a
// lookup never waits behind a listener.
//
// Delivery holds one mutex while it calls the listeners: changes arrive one at a time in
// notify() order, and dropping a subscription (which takes that mutex) waits for a call in
// progress. The subscriptions keep that state alive, so one may outlive the directory.
//
// Thread safety: add() and notify() may be called from any thread; a listener must not
// call add() or drop its own subscription (it would wait for itself).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "kv/route/route_directory.h"

namespace pdkv::kv {

class RouteListeners {
 public:
  RouteListeners();
  std::unique_ptr<RouteSubscription> add(RouteListener listener);
  // Calls every listener with each change, in order; call it without the caller's locks.
  void notify(const std::vector<RouteChange>& changes);

 private:
  struct State {
    Mutex mu;  // held while listeners run
    uint64_t next_id PDKV_GUARDED_BY(mu) = 1;
    std::map<uint64_t, RouteListener> listeners PDKV_GUARDED_BY(mu);
  };
  class Subscription;
  const std::shared_ptr<State> state_;
};

}  // namespace pdkv::kv
