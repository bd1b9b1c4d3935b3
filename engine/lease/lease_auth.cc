#include "engine/lease/lease_auth.h"

#include <vector>

#include "engine/lease/messages.h"
#include "engine/session_auth.h"

namespace pdkv::engine::lease {

MsgType lease_frame_type(AuthStep step) {
  switch (step) {
    case AuthStep::kHello: return MsgType::kAuthHello;
    case AuthStep::kChallenge: return MsgType::kAuthChallenge;
    case AuthStep::kProof: return MsgType::kAuthProof;
  }
  return MsgType::kAuthHello;
}

namespace {

// One handshake message = one lease frame of its type carrying the raw body.
class LeaseAuthTransport final : public AuthTransport {
 public:
  LeaseAuthTransport(Socket& sock, int step_timeout_ms)
      : sock_(sock), step_timeout_ms_(step_timeout_ms) {}

  Status send(AuthStep step, std::span<const uint8_t> body) override {
    return sock_.send_frame(lease_frame_type(step), body, now() + Millis(step_timeout_ms_));
  }

  Status recv(AuthStep step, std::span<uint8_t> body) override {
    MsgType type{};
    PDKV_RETURN_IF_ERROR(sock_.recv_frame(&type, &payload_, now() + Millis(step_timeout_ms_),
                                          kMaxHandshakePayloadBytes));
    if (type == MsgType::kAuthRefused) return refused_by_peer(payload_);
    if (type != lease_frame_type(step)) return unexpected_auth_message(step);
    return decode_auth_body(payload_, body);
  }

 private:
  Socket& sock_;
  const int step_timeout_ms_;
  std::vector<uint8_t> payload_;
};

}  // namespace

Status authenticate_to_lease_server(Socket& sock, const ClusterKey& key, int step_timeout_ms,
                                    const AuthChannel& channel) {
  LeaseAuthTransport transport(sock, step_timeout_ms);
  Status st = authenticate_to_receiver(transport, key, channel);
  // Told too, so the receiver's log names the attempt rather than a bare hang-up.
  if (!st.ok() && st.code() != StatusCode::kUnavailable) {
    send_refusal(sock,
                 "the receiving endpoint did not prove the cluster secret (" +
                     std::string(kSecretMismatchHint) + ")",
                 step_timeout_ms);
  }
  return st;
}

Status authenticate_lease_client(Socket& sock, const ClusterKey& key, int step_timeout_ms,
                                 const AuthChannel& channel) {
  LeaseAuthTransport transport(sock, step_timeout_ms);
  Status st = authenticate_sender(transport, key, channel);
  // A hang-up or a stop needs no answer; anything else (a plain hello from a keyless
  // sender, a wrong proof, garbage) is told why.
  if (!st.ok() && st.code() != StatusCode::kUnavailable) {
    send_refusal(sock,
                 "this endpoint admits cluster members only and the session did not prove the "
                 "cluster secret (" +
                     std::string(kSecretMismatchHint) + ")",
                 step_timeout_ms);
  }
  return st;
}

void send_refusal(Socket& sock, std::string_view reason, int timeout_ms) {
  std::vector<uint8_t> out;
  encode_auth_refused(reason, &out);
  (void)sock.send_frame(MsgType::kAuthRefused, out, now() + Millis(timeout_ms));
}

Status refused_by_peer(std::span<const uint8_t> payload) {
  Result<std::string> reason = decode_auth_refused(payload);
  if (!reason.ok()) return unauthenticated("the peer refused the session (unreadable reason)");
  return unauthenticated("the peer refused the session: " + *reason);
}

}  // namespace pdkv::engine::lease
