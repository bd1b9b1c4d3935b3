// FailedPeerTracker: which transfer destinations recently failed, as a circuit breaker.
//
// After a write to a peer fails (its retries spent), further transfers to it are refused
// for a cooldown, so every room queued behind a dead decode fails at once instead of each
// waiting for its own I/O timeout. The reference refused for the whole TTL (30 s) after a
// single failure, so one transient reset failed every room to a healthy decode for 30 s
// (found by the chaos suite). Here the first cooldown is short (`first_cooldown`, at most
// the TTL) and doubles with each failure in a row, up to the TTL; once it has passed, the
// next transfer is let through as a probe. A success or a new buffer registration from
// the peer (it restarted) closes the breaker; so does a TTL without failures. A sign of life
// (a pre-allocation from the peer: it is up and wants KV) ends the current cooldown, so
// its next transfer is the probe.
//
// Only a failure of an attempt that began after the last mark doubles the cooldown: the
// attempts already in flight when the breaker opened (a link cut fails them all, one after
// another) are that one failure, not a row of them; counted, they pushed the cooldown to
// 8 s and refused a healthy decode long after the link came back (chaos R3). Likewise a
// failure of an attempt that began before the breaker last closed says nothing about the
// peer since.
// ttl <= 0 disables tracking.
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
  static constexpr std::chrono::milliseconds kDefaultFirstCooldown{1000};

  explicit FailedPeerTracker(std::chrono::milliseconds ttl,
                             std::chrono::milliseconds first_cooldown = kDefaultFirstCooldown);

  // A transfer attempt that began at `began` failed (its retries spent).
  void mark_failed(const std::string& peer, TimePoint began, TimePoint at = now());
  // The peer showed it is alive: its next transfer is let through as a probe.
  void end_cooldown(const std::string& peer, TimePoint at = now());
  // True while the peer's cooldown runs; a mark older than the TTL is removed.
  bool is_failed(const std::string& peer, TimePoint at = now());
  // How long transfers to the peer stay refused from `at` (0 = not refused).
  std::chrono::milliseconds refused_for(const std::string& peer, TimePoint at = now());
  // A transfer to the peer succeeded: forget its failures.
  void record_success(const std::string& peer);
  void clear(const std::string& peer);
  // Failures in a row recorded for the peer since its last success or clear().
  int failure_count(const std::string& peer) const;

 private:
  struct Mark {
    TimePoint failed_at;
    TimePoint refused_until;
    int failures = 0;       // 0: the breaker is closed (the entry remembers closed_at)
    TimePoint closed_at{};  // last success or clear(): older attempts' failures are stale
  };
  // Erases entries with no news for a TTL once the map holds more than a few, so peers
  // that went away for good (a restart has a new endpoint) are not kept forever.
  void sweep(TimePoint at) PDKV_REQUIRES(mu_);
  const std::chrono::milliseconds ttl_;
  const std::chrono::milliseconds first_cooldown_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Mark> marks_ PDKV_GUARDED_BY(mu_);
};

}  // namespace pdkv::kv
