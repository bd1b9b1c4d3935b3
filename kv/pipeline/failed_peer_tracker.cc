#include "kv/pipeline/failed_peer_tracker.h"

#include <algorithm>

namespace pdkv::kv {

FailedPeerTracker::FailedPeerTracker(std::chrono::milliseconds ttl,
                                     std::chrono::milliseconds first_cooldown)
    : ttl_(ttl),
      first_cooldown_(std::max(std::chrono::milliseconds(1), std::min(first_cooldown, ttl))) {}

namespace {
constexpr size_t kSweepAbove = 64;
}

void FailedPeerTracker::mark_failed(const std::string& peer, TimePoint began, TimePoint at) {
  if (ttl_.count() <= 0) return;
  MutexLock lock(mu_);
  sweep(at);
  Mark& mark = marks_[peer];
  if (began < mark.closed_at) return;  // began before the peer last proved healthy
  if (mark.failures > 0 && at - mark.failed_at >= ttl_) mark.failures = 0;  // aged out
  if (mark.failures > 0 && began < mark.failed_at) {
    return;  // in flight when the breaker opened (or last doubled): already counted
  }
  mark.failed_at = at;
  ++mark.failures;
  // Doubling, capped at the TTL; the shift is bounded so it cannot overflow.
  auto cooldown = first_cooldown_ * (int64_t{1} << std::min(mark.failures - 1, 30));
  mark.refused_until = at + std::min<std::chrono::milliseconds>(cooldown, ttl_);
}

bool FailedPeerTracker::is_failed(const std::string& peer, TimePoint at) {
  return refused_for(peer, at).count() > 0;
}

std::chrono::milliseconds FailedPeerTracker::refused_for(const std::string& peer, TimePoint at) {
  if (ttl_.count() <= 0) return std::chrono::milliseconds(0);
  MutexLock lock(mu_);
  auto it = marks_.find(peer);
  if (it == marks_.end()) return std::chrono::milliseconds(0);
  if (it->second.failures == 0) return std::chrono::milliseconds(0);
  if (at - it->second.failed_at >= ttl_) {
    marks_.erase(it);
    return std::chrono::milliseconds(0);
  }
  if (at >= it->second.refused_until) return std::chrono::milliseconds(0);  // probe allowed
  return std::chrono::ceil<std::chrono::milliseconds>(it->second.refused_until - at);
}

void FailedPeerTracker::end_cooldown(const std::string& peer, TimePoint at) {
  MutexLock lock(mu_);
  auto it = marks_.find(peer);
  if (it != marks_.end() && it->second.refused_until > at) it->second.refused_until = at;
}

void FailedPeerTracker::record_success(const std::string& peer) {
  MutexLock lock(mu_);
  if (marks_.empty()) return;  // the common case: nothing failed, nothing to close
  auto it = marks_.find(peer);
  if (it == marks_.end() || it->second.failures == 0) return;
  it->second = Mark{};
  it->second.closed_at = now();
}

void FailedPeerTracker::clear(const std::string& peer) {
  if (ttl_.count() <= 0) return;
  const TimePoint at = now();
  MutexLock lock(mu_);
  sweep(at);
  Mark& mark = marks_[peer];
  mark = Mark{};
  mark.closed_at = at;
}

int FailedPeerTracker::failure_count(const std::string& peer) const {
  MutexLock lock(mu_);
  auto it = marks_.find(peer);
  return it == marks_.end() ? 0 : it->second.failures;
}

void FailedPeerTracker::sweep(TimePoint at) {
  if (marks_.size() <= kSweepAbove) return;
  for (auto it = marks_.begin(); it != marks_.end();) {
    const TimePoint last = it->second.failures > 0 ? it->second.failed_at : it->second.closed_at;
    it = at - last >= ttl_ ? marks_.erase(it) : std::next(it);
  }
}

}  // namespace pdkv::kv
