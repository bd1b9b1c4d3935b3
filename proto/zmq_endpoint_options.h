// Options and counters of proto::ZmqEndpoint (zmq_endpoint.h).
// Thread safety: plain value types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/cluster_key.h"
#include "common/config.h"
#include "common/status.h"

namespace pdkv::proto {

struct EndpointOptions {
  std::string bind_host = "127.0.0.1";
  // Host put into endpoint() for peers to connect to; empty = bind_host (set it when
  // binding a wildcard address such as 0.0.0.0).
  std::string advertise_host;
  // Messages queued per peer before send() fails with kUnavailable (ZMQ_SNDHWM); also the
  // PULL socket's ZMQ_RCVHWM and the most decoded messages the receive thread holds (so
  // an urgent message overtakes a backlog of up to this many). 10000 holds a burst of
  // 1024 rooms' messages several times over.
  int send_hwm = 10000;
  int linger_ms = 0;         // unsent messages at close are dropped
  size_t max_frames = 8;     // more = malformed (drained, dropped)
  size_t drain_batch = 256;  // most messages read from the PULL socket at once
  // ZMQ_RECONNECT_IVL / _MAX of the PUSH sockets: a retry waits the interval plus up to
  // one interval of jitter. The interval bounds how soon a killed peer is reported (one
  // failed retry); retries of a peer that stays away back off to the maximum, which also
  // bounds how late a message queued before its peer listens leaves.
  int reconnect_interval_ms = 50;
  int reconnect_interval_max_ms = 1000;
  // The cluster secret's keys. Set: the PULL socket is a CURVE server that admits only
  // clients proving the secret (zap_authenticator.h) and every PUSH socket a CURVE client;
  // messages are then authenticated and encrypted. Null: plain TCP, anyone may send.
  std::shared_ptr<const ClusterKey> cluster_key;
  // Most peers the endpoint keeps a socket for (zmq_socket_budget.h): send() to one more
  // fails with kUnavailable until forget_peer() frees one. Fewer when the process's limits
  // do not fit them (logged at start).
  size_t max_peers = 8192;

  // PDKV_ZMQ_SNDHWM, PDKV_ZMQ_MAX_PEERS and PDKV_SECRET_FILE (docs/CONFIG.md) from `settings` if
  // set there, else the environment, else the default; other fields default.
  static Result<EndpointOptions> from(const config::Settings& settings);
  // The same with the cluster key already read (null: none).
  static Result<EndpointOptions> from(const config::Settings& settings,
                                      std::shared_ptr<const ClusterKey> cluster_key);
  static Result<EndpointOptions> from_env() { return from(config::Settings()); }
};

struct EndpointStats {
  uint64_t received = 0;         // decoded and handed to the handler
  uint64_t malformed = 0;        // dropped by the decoder
  uint64_t handler_errors = 0;   // handler returned an error or threw
  uint64_t sent = 0;             // messages queued to a peer
  uint64_t send_failures = 0;    // messages not queued (send error, or left of a burst)
  uint64_t urgent = 0;           // received messages handled ahead of the others
  uint64_t drained_batches = 0;  // reads of the PULL socket that found messages
  uint64_t disconnects = 0;      // established connections to peers that closed
  uint64_t peers_gone = 0;       // on_peer_gone calls
  uint64_t auth_refused = 0;     // connections refused: no proof of the cluster secret
  uint64_t auth_failed = 0;      // our handshakes a peer refused (it has another secret)
  uint64_t peers_over_cap = 0;   // sends refused: max_peers sockets were open
  uint64_t once_dropped = 0;     // send_once() calls over its rate
};

}  // namespace pdkv::proto
