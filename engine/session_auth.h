// The session handshake of the data plane: a mutual challenge-response keyed from the
// cluster secret, run at the start of every data-plane connection before a single other
// byte is accepted or sent (docs/SECURITY.md). One implementation for every transport:
// the TCP backend's data connections (backends/tcp/tcp_auth.h) and the lease channel of
// the shm and ucx backends (lease/lease_auth.h) only frame its three messages.
//
// With nonces chosen fresh by each side for this connection only:
//   sender   -> HELLO      nonce_s
//   receiver -> CHALLENGE  nonce_r, HMAC(K_use, receiver_label, nonce_s, nonce_r)
//   sender   -> PROOF      HMAC(K_use, sender_label, nonce_s, nonce_r)
// so the sender checks it talks to a member (a stranger posing as a decode gets no KV
// bytes, and with shm no CMA write either) and the receiver checks the sender is one (a
// stranger writes nothing, nor learns where it could). A recorded handshake is useless:
// the other side's nonce differs every time. Each channel (AuthChannel) MACs under its
// own derived key (ClusterKey::KeyUse) and labels, so a transcript of one can never be
// answered or replayed on another. Nothing after the handshake is encrypted or MAC'd
// (docs/SECURITY.md, "Not covered").
//
// Errors: every failure is Unauthenticated naming the mismatch, except transport
// failures other than a hang-up (a silent peer: DeadlineExceeded; a stop: Aborted).
//
// Thread safety: free functions; a transport is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/cluster_key.h"
#include "common/status.h"

namespace pdkv::engine {

enum class AuthStep : uint8_t { kHello, kChallenge, kProof };

inline constexpr size_t kAuthHelloBytes = ClusterKey::kNonceBytes;
inline constexpr size_t kAuthChallengeBytes = ClusterKey::kNonceBytes + ClusterKey::kMacBytes;
inline constexpr size_t kAuthProofBytes = ClusterKey::kMacBytes;

// Which connections a handshake admits to: its derived key and its two labels.
struct AuthChannel {
  KeyUse use;
  std::string_view receiver_label;
  std::string_view sender_label;
};
// The TCP backend's data connections (their wire bytes are those of the first release).
inline constexpr AuthChannel kTcpDataChannel{KeyUse::kDataPlane, "pdkv-tcp-receiver",
                                             "pdkv-tcp-sender"};
// The lease channel of the shm and ucx backends: its own key, so a TCP handshake never
// authenticates a lease session (nor the reverse).
inline constexpr AuthChannel kLeaseChannel{KeyUse::kLeaseChannel, "pdkv-lease-receiver",
                                           "pdkv-lease-sender"};
// The path channel (engine/path/path_channel.h), where engines of the automatic transport
// choice advertise their locality and backends. It shares the lease channel's derived key
// (both are control channels of the data plane) but not its labels, which every MAC covers:
// a lease transcript never answers a path handshake, nor the reverse.
inline constexpr AuthChannel kPathChannel{KeyUse::kLeaseChannel, "pdkv-path-receiver",
                                          "pdkv-path-sender"};

// What the operator should check when a handshake fails; part of every such message.
inline constexpr std::string_view kSecretMismatchHint =
    "the cluster secrets differ, or only one side has PDKV_SECRET_FILE";

// How one transport carries the handshake's messages. Each call is bounded by the
// transport's own per-step timeout, so a silent peer cannot hold the calling thread.
class AuthTransport {
 public:
  // Sends the message of `step`; `body` has that step's size.
  virtual Status send(AuthStep step, std::span<const uint8_t> body) = 0;
  // Receives the next message, which must be of `step` with exactly body.size() bytes.
  // Unauthenticated when the peer sent something else (unexpected_auth_message(), or the
  // peer's own refusal), Unavailable when it hung up, DeadlineExceeded when it was silent.
  virtual Status recv(AuthStep step, std::span<uint8_t> body) = 0;

 protected:
  ~AuthTransport() = default;
};

// Sender side, right after connect: proves membership and checks the receiver's proof.
Status authenticate_to_receiver(AuthTransport& transport, const ClusterKey& key,
                                const AuthChannel& channel);
// Receiver side, on the first bytes of an accepted connection.
Status authenticate_sender(AuthTransport& transport, const ClusterKey& key,
                           const AuthChannel& channel);

// What a transport returns from recv() when the peer sent a message other than the
// handshake's `expected` one (a peer without the secret starts with its plain hello).
Status unexpected_auth_message(AuthStep expected);

}  // namespace pdkv::engine
