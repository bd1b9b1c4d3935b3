#include "engine/session_auth.h"

#include <cstring>
#include <string>

namespace pdkv::engine {
namespace {

std::string hint() { return std::string(kSecretMismatchHint); }

}  // namespace

Status unexpected_auth_message(AuthStep expected) {
  if (expected == AuthStep::kHello) {
    return unauthenticated(
        "peer did not authenticate (it has no cluster secret, or is not a pdkv member: " + hint() +
        "); connection refused");
  }
  return unauthenticated("peer broke the authentication handshake");
}

Status authenticate_to_receiver(AuthTransport& transport, const ClusterKey& key,
                                const AuthChannel& channel) {
  const ClusterKey::Nonce nonce_s = ClusterKey::random_nonce();
  PDKV_RETURN_IF_ERROR(transport.send(AuthStep::kHello, nonce_s));
  uint8_t challenge[kAuthChallengeBytes];
  Status st = transport.recv(AuthStep::kChallenge, challenge);
  if (st.code() == StatusCode::kUnavailable) {
    // A receiver without the secret reads our hello as a malformed first frame and hangs
    // up; one that tells us why answers with its refusal instead (Unauthenticated).
    return unauthenticated(
        "the receiver closed the connection during authentication: it has no cluster secret "
        "or a different one (" +
        hint() + "; " + st.message() + ")");
  }
  if (!st.ok()) return st;
  std::span<const uint8_t> nonce_r(challenge, ClusterKey::kNonceBytes);
  std::span<const uint8_t> mac_r(challenge + ClusterKey::kNonceBytes, ClusterKey::kMacBytes);
  if (!key.verify(channel.use, mac_r, {as_bytes(channel.receiver_label), nonce_s, nonce_r})) {
    return unauthenticated(
        "the receiver's proof does not verify: it does not hold this cluster's "
        "secret (" +
        hint() + "); not sending it any data");
  }
  const ClusterKey::Mac proof =
      key.mac(channel.use, {as_bytes(channel.sender_label), nonce_s, nonce_r});
  return transport.send(AuthStep::kProof, proof);
}

Status authenticate_sender(AuthTransport& transport, const ClusterKey& key,
                           const AuthChannel& channel) {
  ClusterKey::Nonce nonce_s{};
  PDKV_RETURN_IF_ERROR(transport.recv(AuthStep::kHello, nonce_s));
  const ClusterKey::Nonce nonce_r = ClusterKey::random_nonce();
  const ClusterKey::Mac mac_r =
      key.mac(channel.use, {as_bytes(channel.receiver_label), nonce_s, nonce_r});
  uint8_t challenge[kAuthChallengeBytes];
  std::memcpy(challenge, nonce_r.data(), nonce_r.size());
  std::memcpy(challenge + nonce_r.size(), mac_r.data(), mac_r.size());
  PDKV_RETURN_IF_ERROR(transport.send(AuthStep::kChallenge, challenge));
  ClusterKey::Mac proof{};
  PDKV_RETURN_IF_ERROR(transport.recv(AuthStep::kProof, proof));
  if (!key.verify(channel.use, proof, {as_bytes(channel.sender_label), nonce_s, nonce_r})) {
    return unauthenticated("the sender's proof does not verify: wrong cluster secret (" + hint() +
                           ")");
  }
  return Status();
}

}  // namespace pdkv::engine
