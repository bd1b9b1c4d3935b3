// The session handshake (engine/session_auth.h) on a TCP data-plane connection, before a
// single byte of KV data is accepted or sent (docs/SECURITY.md). This file only frames
// its three messages as tcp_frame.h frames (AUTH_HELLO, AUTH_CHALLENGE, AUTH_PROOF: the
// body's size in `count`, then the body); the HELLO of tcp_frame.h follows as before.
// The channel is kTcpDataChannel (its own derived key and labels).
//
// An end without a secret facing one with it fails the handshake with Unauthenticated,
// naming the mismatch; so does a wrong secret. Each call takes at most `timeout_ms` per
// step, so a silent peer cannot hold a connection thread.
//
// Thread safety: free functions; each call owns its fd for the duration.
#pragma once

#include "common/cluster_key.h"
#include "common/status.h"
#include "engine/backends/tcp/tcp_frame.h"

namespace pdkv::engine::tcp {

// Sender side, right after connect.
Status authenticate_to_receiver(int fd, const ClusterKey& key, int timeout_ms);
// Receiver side, the first frames of an accepted connection. `stop_fd` aborts the wait.
Status authenticate_sender(int fd, const ClusterKey& key, int stop_fd, int timeout_ms);

// A receiver with no slot for a new connection says why in an ACK frame (part 0) before
// it closes, instead of the frame the sender expects first (AUTH_CHALLENGE or HELLO_ACK):
// so a refused sender reports full slots rather than guess at a secret mismatch.
// Receiver side: sends that frame, then closes `fd`.
void refuse_connection(int fd, const Status& why);
// Sender side, `header` being that ACK: its reason, as an error.
Status read_refusal(int fd, const FrameHeader& header, int timeout_ms);

}  // namespace pdkv::engine::tcp
