// KvManagerOptions: the timeouts, liveness and queue settings of a KV manager, read once
// from PDKV_* settings (docs/CONFIG.md explains each default): from(settings) takes each
// value from `settings` if set there in code, else from the environment, else the default
// (common/config.h decides this precedence for every knob).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/config.h"
#include "common/status.h"

namespace pdkv::kv {

struct KvManagerOptions {
  // Sender/Receiver construction -> room bootstrapped (route resolved, pre-allocations in).
  std::chrono::milliseconds bootstrap_timeout{120'000};
  // Pre-allocation sent (decode) / bootstrapped (prefill) -> room ended.
  std::chrono::milliseconds waiting_timeout{300'000};
  // Decode route resolution (instance_breaker.h): one lookup attempt's bound; attempts in
  // a row that fail for one instance before its rooms fail at once, and for how long; most
  // instances resolved at once (a thread each).
  std::chrono::milliseconds route_attempt_timeout{2'000};
  int route_breaker_failures = 3;
  std::chrono::milliseconds route_breaker_backoff{5'000};
  int max_resolving_instances = 64;
  // Longest wait of a finished transfer for the room's first token (wait mode only).
  std::chrono::milliseconds metadata_timeout{10'000};
  // Per-rank liveness probes and how many may go unanswered before the peer is dead.
  std::chrono::milliseconds heartbeat_interval{500};
  int heartbeat_max_failures = 3;
  // Longest refusal of a peer whose transfers keep failing (0 = never refused); the first
  // failure refuses it for failed_peer_first_cooldown, each further one in a row twice as
  // long (FailedPeerTracker).
  std::chrono::milliseconds failed_peer_ttl{30'000};
  std::chrono::milliseconds failed_peer_first_cooldown{1'000};
  // Tries of one write batch when the connection fails (reset, refused, handshake); each
  // retry opens a new connection.
  int transfer_attempts = 3;
  // How often a prefill rank registers with the bootstrap server again, so a restarted
  // (empty) server learns it within this long; 0 = only at start.
  std::chrono::milliseconds bootstrap_refresh{2'000};
  // Prefill data path (kv/pipeline/transfer_pipeline.h): bytes in flight per decode rank, and
  // most bytes per engine batch (several rooms' blocks share one).
  uint64_t transfer_window_bytes = 64ull << 20;
  uint64_t transfer_batch_bytes = 4ull << 20;
  // crc32c of every written region sent with the status and checked by the decode.
  bool verify_checksum = false;
  // Prefill: a room's Success status to each decode rank rides its last data batch to
  // that rank (kv/pipeline/status_note.h) when the engine carries notes (tcp) and the status can
  // be decided then; otherwise, or off, it is a ZeroMQ message after the acknowledgement.
  bool status_in_band = true;
  // What peers can make a prefill rank hold (bounded, docs/SECURITY.md): registered decode
  // ranks at once, and rooms that decodes pre-allocated (or aborted) before this rank's
  // KVSender for them existed. Past either, new ones are refused with a reason (not
  // silently dropped), and every room already held is unaffected.
  int64_t max_decode_peers = 4096;
  int64_t max_pending_rooms = 65536;
  // Of those, what one decode rank may make it hold (pending_room_budget.h).
  int64_t max_pending_rooms_per_decode = 8192;
  int64_t max_pending_bytes_per_decode = int64_t{1} << 28;
  // Address this rank advertises; empty = detected.
  std::string local_ip;
  // Port of the process's Prometheus endpoint (kv/metrics/process_metrics_endpoint.h; started or
  // joined by whoever embeds the manager, e.g. the Python KVManager); -1 = none, 0 = the
  // one running, else any free port.
  int metrics_port = -1;
  // Interface that endpoint listens on: loopback unless an operator opens it (a scraper
  // on another host), since /metrics tells anyone who reads it about the cluster.
  std::string metrics_host = "127.0.0.1";

  // InvalidArgument naming the setting if one is malformed or out of range.
  static Result<KvManagerOptions> from(const config::Settings& settings);
  static Result<KvManagerOptions> from_env() { return from(config::Settings()); }

  // Longest time a dead peer goes unnoticed by the heartbeat.
  std::chrono::milliseconds liveness_bound() const {
    return heartbeat_interval * heartbeat_max_failures;
  }
  // A prefill forgets a registered decode rank that holds no room and was not heard for
  // this long (its registration, its control socket, its data sessions). A live decode
  // probes every prefill it knows each heartbeat, so only a gone one (or a stranger that
  // registered and left) stays silent; one that comes back registers anew, as it does
  // after the far shorter liveness bound on its side.
  std::chrono::milliseconds idle_peer_forget() const {
    return std::max<std::chrono::milliseconds>(10 * liveness_bound(), std::chrono::seconds(30));
  }
};

}  // namespace pdkv::kv
