// FailedPeerTracker: which transfer destinations recently failed (SPEC §10 item 1).
//
// After a write to a peer fails, further transfers to it are refused for `ttl` so that
// every room queued behind a dead decode fails at once instead of each waiting for its
// own I/O timeout. A new buffer registration from the peer (it restarted) clears the
// mark. ttl <= 0 disables tracking.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "common/mutex.h"

namespace pdkv::kv {

class FailedPeerTracker {
 public:
  explicit FailedPeerTracker(std::chrono::milliseconds ttl) : ttl_(ttl) {}

  void mark_failed(const std::string& peer, TimePoint at = now());
  // True while the peer's mark is younger than the TTL; an expired mark is removed.
  bool is_failed(const std::string& peer, TimePoint at = now());
  void clear(const std::string& peer);
  // Failures recorded for the peer since its last clear().
  int failure_count(const std::string& peer) const;

 private:
  struct Mark {
    TimePoint failed_at;
    int failures = 0;
  };
  const std::chrono::milliseconds ttl_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Mark> marks_ PDKV_GUARDED_BY(mu_);
};

}  // namespace pdkv::kv
