#include "kv/failed_peer_tracker.h"

namespace pdkv::kv {

void FailedPeerTracker::mark_failed(const std::string& peer, TimePoint at) {
  if (ttl_.count() <= 0) return;
  MutexLock lock(mu_);
  Mark& mark = marks_[peer];
  mark.failed_at = at;
  ++mark.failures;
}

bool FailedPeerTracker::is_failed(const std::string& peer, TimePoint at) {
  if (ttl_.count() <= 0) return false;
  MutexLock lock(mu_);
  auto it = marks_.find(peer);
  if (it == marks_.end()) return false;
  if (at - it->second.failed_at < ttl_) return true;
  marks_.erase(it);
  return false;
}

void FailedPeerTracker::clear(const std::string& peer) {
  MutexLock lock(mu_);
  marks_.erase(peer);
}

int FailedPeerTracker::failure_count(const std::string& peer) const {
  MutexLock lock(mu_);
  auto it = marks_.find(peer);
  return it == marks_.end() ? 0 : it->second.failures;
}

}  // namespace pdkv::kv
