#include "engine/backends/tcp/tcp_auth.h"

#include <cstring>
#include <span>

#include "engine/backends/tcp/socket_util.h"
#include "engine/backends/tcp/tcp_frame.h"

namespace pdkv::engine::tcp {
namespace {

constexpr std::string_view kReceiverLabel = "pdkv-tcp-receiver";
constexpr std::string_view kSenderLabel = "pdkv-tcp-sender";

// Writes one authentication frame: header + body.
Status write_auth_frame(int fd, FrameType type, std::span<const uint8_t> body, int stop_fd,
                        int timeout_ms) {
  uint8_t frame[kHeaderSize + kAuthChallengeBody];
  FrameHeader h;
  h.type = type;
  h.count = static_cast<uint32_t>(body.size());
  encode_header(h, frame);
  std::memcpy(frame + kHeaderSize, body.data(), body.size());
  return write_full(fd, frame, kHeaderSize + body.size(), stop_fd, timeout_ms);
}

// Reads one frame that must be of `type`; its body goes to `body` (exactly its size).
Status read_auth_frame(int fd, FrameType type, std::span<uint8_t> body, int stop_fd,
                       int timeout_ms) {
  uint8_t header[kHeaderSize];
  PDKV_RETURN_IF_ERROR(read_full(fd, header, kHeaderSize, stop_fd, timeout_ms, timeout_ms));
  Result<FrameHeader> h = decode_header(std::span<const uint8_t>(header, kHeaderSize), 1);
  if (!h.ok()) return h.status();
  if (h->type != type) {
    if (type == FrameType::kAuthHello) {
      return unauthenticated(
          "peer did not authenticate (it has no cluster secret, or is not a pdkv member); "
          "connection refused");
    }
    return unauthenticated("peer broke the authentication handshake");
  }
  return read_full(fd, body.data(), body.size(), stop_fd, timeout_ms, timeout_ms);
}

}  // namespace

Status authenticate_to_receiver(int fd, const ClusterKey& key, int timeout_ms) {
  const ClusterKey::Nonce nonce_s = ClusterKey::random_nonce();
  PDKV_RETURN_IF_ERROR(write_auth_frame(fd, FrameType::kAuthHello, nonce_s, -1, timeout_ms));
  uint8_t challenge[kAuthChallengeBody];
  Status st = read_auth_frame(fd, FrameType::kAuthChallenge, challenge, -1, timeout_ms);
  if (st.code() == StatusCode::kUnavailable) {
    return unauthenticated(
        "the receiver closed the connection during authentication: it has no cluster secret "
        "or a different one (" +
        st.message() + ")");
  }
  if (!st.ok()) return st;
  std::span<const uint8_t> nonce_r(challenge, ClusterKey::kNonceBytes);
  std::span<const uint8_t> mac_r(challenge + ClusterKey::kNonceBytes, ClusterKey::kMacBytes);
  if (!key.verify(KeyUse::kDataPlane, mac_r, {as_bytes(kReceiverLabel), nonce_s, nonce_r})) {
    return unauthenticated(
        "the receiver's proof does not verify: it does not hold this cluster's secret; not "
        "sending it any data");
  }
  const ClusterKey::Mac proof =
      key.mac(KeyUse::kDataPlane, {as_bytes(kSenderLabel), nonce_s, nonce_r});
  return write_auth_frame(fd, FrameType::kAuthProof, proof, -1, timeout_ms);
}

Status authenticate_sender(int fd, const ClusterKey& key, int stop_fd, int timeout_ms) {
  ClusterKey::Nonce nonce_s{};
  PDKV_RETURN_IF_ERROR(read_auth_frame(fd, FrameType::kAuthHello, nonce_s, stop_fd, timeout_ms));
  const ClusterKey::Nonce nonce_r = ClusterKey::random_nonce();
  const ClusterKey::Mac mac_r =
      key.mac(KeyUse::kDataPlane, {as_bytes(kReceiverLabel), nonce_s, nonce_r});
  uint8_t challenge[kAuthChallengeBody];
  std::memcpy(challenge, nonce_r.data(), nonce_r.size());
  std::memcpy(challenge + nonce_r.size(), mac_r.data(), mac_r.size());
  PDKV_RETURN_IF_ERROR(
      write_auth_frame(fd, FrameType::kAuthChallenge, challenge, stop_fd, timeout_ms));
  ClusterKey::Mac proof{};
  PDKV_RETURN_IF_ERROR(read_auth_frame(fd, FrameType::kAuthProof, proof, stop_fd, timeout_ms));
  if (!key.verify(KeyUse::kDataPlane, proof, {as_bytes(kSenderLabel), nonce_s, nonce_r})) {
    return unauthenticated("the sender's proof does not verify: wrong cluster secret");
  }
  return Status();
}

}  // namespace pdkv::engine::tcp
