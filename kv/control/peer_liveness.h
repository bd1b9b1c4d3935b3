// PeerLiveness: one peer rank's liveness as a KV manager tracks it (both roles probe the
// ranks they share rooms with).
//
// Any message from the peer counts as heard. A peer is dead only when max_failures probes
// went unanswered AND nothing was heard for the bound: counting probes means a stall of
// this process (its timer not sending, its receive thread not running) never counts
// against the peer. A peer whose process died is found sooner by its connection closing
// (ControlChannel's on_peer_gone); this is the fallback for a silent one.
// Probe sequence numbers start at a random 64-bit value per peer, so a Pong that echoes
// one proves its sender read our Ping: a stranger who forges a Pong (without a cluster
// secret nothing authenticates the sender field) cannot claim a restart of the peer.
// Thread safety: none (guarded by the owning manager's lock).
#pragma once

#include <sodium.h>

#include <chrono>
#include <cstdint>

#include "common/clock.h"

namespace pdkv::kv {

struct PeerLiveness {
  TimePoint last_heard = now();
  uint64_t probe_seq = random_seq();
  uint64_t first_seq = probe_seq + 1;  // the first probe's
  int unanswered = 0;                  // probes sent since last heard

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
  // True if `seq` is one of the last kAnswerWindow probes sent to this peer.
  bool answers(uint64_t seq) const {
    if (probe_seq + 1 == first_seq) return false;  // nothing sent yet
    const uint64_t behind = probe_seq - seq;       // wraps for seq > probe_seq
    return behind < kAnswerWindow && behind <= probe_seq - first_seq;
  }

  static constexpr uint64_t kAnswerWindow = 64;

 private:
  static uint64_t random_seq() {
    uint64_t seq = 0;
    if (sodium_init() >= 0) randombytes_buf(&seq, sizeof seq);  // idempotent, thread-safe
    return seq;
  }
};

}  // namespace pdkv::kv
