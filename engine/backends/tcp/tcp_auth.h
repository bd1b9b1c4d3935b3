// Mutual challenge-response authentication of a TCP data-plane connection, run before a
// single byte of KV data is accepted or sent (docs/SECURITY.md).
//
// Both ends hold the cluster secret (common/cluster_key.h). With nonces chosen fresh by
// each side for this connection only:
//   sender   -> AUTH_HELLO      nonce_s
//   receiver -> AUTH_CHALLENGE  nonce_r, HMAC_dp("pdkv-tcp-receiver", nonce_s, nonce_r)
//   sender   -> AUTH_PROOF      HMAC_dp("pdkv-tcp-sender", nonce_s, nonce_r)
// so the sender checks it talks to a member (a stranger posing as a decode gets no KV
// bytes) and the receiver checks the sender is one (a stranger writes nothing). A
// recorded handshake is useless: the other side's nonce differs every time. The HELLO of
// tcp_frame.h follows as before. The wire is not encrypted (docs/SECURITY.md says how to
// add that).
//
// An end without a secret facing one with it fails the handshake with Unauthenticated,
// naming the mismatch; so does a wrong secret. Each call takes at most `timeout_ms` per
// step, so a silent peer cannot hold a connection thread.
//
// Thread safety: free functions; each call owns its fd for the duration.
#pragma once

#include "common/cluster_key.h"
#include "common/status.h"

namespace pdkv::engine::tcp {

// Sender side, right after connect.
Status authenticate_to_receiver(int fd, const ClusterKey& key, int timeout_ms);
// Receiver side, the first frames of an accepted connection. `stop_fd` aborts the wait.
Status authenticate_sender(int fd, const ClusterKey& key, int stop_fd, int timeout_ms);

}  // namespace pdkv::engine::tcp
