#include "engine/backends/tcp/tcp_auth.h"

#include <sys/socket.h>

#include <cstring>
#include <span>
#include <vector>

#include "engine/backends/tcp/socket_util.h"
#include "engine/backends/tcp/tcp_frame.h"
#include "engine/session_auth.h"

namespace pdkv::engine::tcp {
namespace {

static_assert(kAuthHelloBody == kAuthHelloBytes && kAuthChallengeBody == kAuthChallengeBytes &&
              kAuthProofBody == kAuthProofBytes);

FrameType frame_of(AuthStep step) {
  switch (step) {
    case AuthStep::kHello: return FrameType::kAuthHello;
    case AuthStep::kChallenge: return FrameType::kAuthChallenge;
    case AuthStep::kProof: return FrameType::kAuthProof;
  }
  return FrameType::kAuthHello;
}

// One handshake message = a tcp_frame.h header whose `count` is the body's size, then
// the body.
class TcpAuthTransport final : public AuthTransport {
 public:
  TcpAuthTransport(int fd, int stop_fd, int timeout_ms)
      : fd_(fd), stop_fd_(stop_fd), timeout_ms_(timeout_ms) {}

  Status send(AuthStep step, std::span<const uint8_t> body) override {
    uint8_t frame[kHeaderSize + kAuthChallengeBody];
    FrameHeader h;
    h.type = frame_of(step);
    h.count = static_cast<uint32_t>(body.size());
    encode_header(h, frame);
    std::memcpy(frame + kHeaderSize, body.data(), body.size());
    return write_full(fd_, frame, kHeaderSize + body.size(), stop_fd_, timeout_ms_);
  }

  Status recv(AuthStep step, std::span<uint8_t> body) override {
    uint8_t header[kHeaderSize];
    PDKV_RETURN_IF_ERROR(read_full(fd_, header, kHeaderSize, stop_fd_, timeout_ms_, timeout_ms_));
    Result<FrameHeader> h = decode_header(std::span<const uint8_t>(header, kHeaderSize), 1);
    if (!h.ok()) return h.status();
    if (h->type == FrameType::kAck && step == AuthStep::kChallenge) {
      refusal_ = read_refusal(fd_, *h, timeout_ms_);
      return refusal_;
    }
    if (h->type != frame_of(step)) return unexpected_auth_message(step);
    return read_full(fd_, body.data(), body.size(), stop_fd_, timeout_ms_, timeout_ms_);
  }

  // The receiver's refusal (no slot for us), if it sent one instead of its challenge.
  const Status& refusal() const { return refusal_; }

 private:
  Status refusal_;
  const int fd_;
  const int stop_fd_;
  const int timeout_ms_;
};

}  // namespace

Status authenticate_to_receiver(int fd, const ClusterKey& key, int timeout_ms) {
  TcpAuthTransport transport(fd, -1, timeout_ms);
  Status st = engine::authenticate_to_receiver(transport, key, kTcpDataChannel);
  // Reported as it is: the generic handshake reads a closed connection as a secret
  // mismatch, which a full receiver is not.
  return transport.refusal().ok() ? st : transport.refusal();
}

Status authenticate_sender(int fd, const ClusterKey& key, int stop_fd, int timeout_ms) {
  TcpAuthTransport transport(fd, stop_fd, timeout_ms);
  return engine::authenticate_sender(transport, key, kTcpDataChannel);
}

void refuse_connection(int fd, const Status& why) {
  const std::vector<uint8_t> frame = encode_ack(0, 0, why, 0, 0);
  (void)::send(fd, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  // Read away what the sender already wrote: closing with unread bytes resets the
  // connection, and the reset could overtake the frame above.
  uint8_t sink[512];
  while (::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
  }
  ::close(fd);
}

Status read_refusal(int fd, const FrameHeader& header, int timeout_ms) {
  std::vector<uint8_t> body(header.count);
  PDKV_RETURN_IF_ERROR(read_full(fd, body.data(), body.size(), -1, timeout_ms, timeout_ms));
  Result<AckBody> ack = decode_ack_body(body, header);
  if (!ack.ok()) return ack.status();
  const auto code = static_cast<StatusCode>(header.aux);
  if (code == StatusCode::kOk) return data_loss("the receiver answered the handshake with an ACK");
  return Status(code, "the receiver refused the connection: " + ack->message);
}

}  // namespace pdkv::engine::tcp
