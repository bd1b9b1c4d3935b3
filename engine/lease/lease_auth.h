// The session handshake (engine/session_auth.h) on the lease channel: with a cluster
// secret, the first frames of every control connection of the shm and ucx backends are
// kAuthHello, kAuthChallenge and kAuthProof (their raw bodies, messages.h), under the
// channel's own key (kLeaseChannel); kHello follows only once both ends proved the
// secret. So a sender that cannot prove it gets no lease, no CMA probe address, no UCX
// worker address and no rkeys; a receiver that cannot prove it is never written to.
//
// A refusal is said, not only done: the side that refuses sends kAuthRefused with the
// reason before it closes, so the other end reports Unauthenticated naming the mismatch
// (kSecretMismatchHint) instead of a bare hang-up.
//
// Every step waits at most `step_timeout_ms` and a peer not yet authenticated sends at
// most kMaxHandshakePayloadBytes per frame, so a silent or garbage-sending stranger
// holds a connection thread for a bounded time and no memory.
//
// Thread safety: free functions; each call owns its socket for the duration.
#pragma once

#include <string_view>

#include "common/cluster_key.h"
#include "common/status.h"
#include "engine/lease/wire.h"
#include "engine/session_auth.h"

namespace pdkv::engine::lease {

// Sender side (LeaseClient::connect), right after connect.
// The lease frame type that carries one handshake step.
MsgType lease_frame_type(AuthStep step);

// `channel`: kLeaseChannel, or another channel framed the same way (the path channel).
Status authenticate_to_lease_server(Socket& sock, const ClusterKey& key, int step_timeout_ms,
                                    const AuthChannel& channel = kLeaseChannel);
// Receiver side (LeaseServer), on an accepted connection. On failure it has already told
// the peer why (best effort); the caller closes the connection.
Status authenticate_lease_client(Socket& sock, const ClusterKey& key, int step_timeout_ms,
                                 const AuthChannel& channel = kLeaseChannel);

// Best effort: sends kAuthRefused with `reason` (the caller then closes).
void send_refusal(Socket& sock, std::string_view reason, int timeout_ms);
// Unauthenticated naming the peer's refusal, from a kAuthRefused payload.
Status refused_by_peer(std::span<const uint8_t> payload);

}  // namespace pdkv::engine::lease
