// PeerLiveness: one peer rank's liveness as a KV manager tracks it (both roles probe the
// ranks they share rooms with).
//
// Any message from the peer counts as heard. A peer is dead only when max_failures probes
// went unanswered AND nothing was heard for the bound: counting probes means a stall of
// this process (its timer not sending, its receive thread not running) never counts
// against the peer. A peer whose process died is found sooner by its connection closing
// (ControlChannel's on_peer_gone); this is the fallback for a silent one.
// Thread safety: none (guarded by the owning manager's lock).
#pragma once

#include <chrono>
#include <cstdint>

#include "common/clock.h"

namespace pdkv::kv {

struct PeerLiveness {
  TimePoint last_heard = now();
  uint64_t probe_seq = 0;
  int unanswered = 0;  // probes sent since last heard

  void heard() {
    last_heard = now();
    unanswered = 0;
  }
  bool dead(std::chrono::milliseconds bound, int max_failures) const {
    return now() - last_heard > bound && unanswered >= max_failures;
  }
  // The sequence number of the next probe, which counts as unanswered until heard().
  uint64_t next_probe() {
    ++unanswered;
    return ++probe_seq;
  }
};

}  // namespace pdkv::kv
