#include "kv/route/route_listeners.h"

#include <utility>

namespace pdkv::kv {

class RouteListeners::Subscription : public RouteSubscription {
 public:
  Subscription(std::shared_ptr<State> state, uint64_t id) : state_(std::move(state)), id_(id) {}
  ~Subscription() override {
    MutexLock lock(state_->mu);  // waits for a call in progress
    state_->listeners.erase(id_);
  }

 private:
  const std::shared_ptr<State> state_;
  const uint64_t id_;
};

RouteListeners::RouteListeners() : state_(std::make_shared<State>()) {}

std::unique_ptr<RouteSubscription> RouteListeners::add(RouteListener listener) {
  MutexLock lock(state_->mu);
  const uint64_t id = state_->next_id++;
  state_->listeners.emplace(id, std::move(listener));
  return std::make_unique<Subscription>(state_, id);
}

void RouteListeners::notify(const std::vector<RouteChange>& changes) {
  if (changes.empty()) return;
  MutexLock lock(state_->mu);
  for (const RouteChange& change : changes) {
    for (const auto& [id, listener] : state_->listeners) listener(change);
  }
}

}  // namespace pdkv::kv
