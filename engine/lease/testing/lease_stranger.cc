#include "engine/lease/testing/lease_stranger.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "engine/lease/lease_auth.h"
#include "engine/lease/messages.h"
#include "engine/session_auth.h"

namespace pdkv::engine::lease::testing {
namespace {

// A member's side of the handshake that keeps a copy of every frame it sends.
class RecordingTransport final : public AuthTransport {
 public:
  explicit RecordingTransport(Socket& sock) : sock_(sock) {}
  Status send(AuthStep step, std::span<const uint8_t> body) override {
    sent.push_back({lease_frame_type(step), std::vector<uint8_t>(body.begin(), body.end())});
    return sock_.send_frame(lease_frame_type(step), body, now() + Millis(3000));
  }
  Status recv(AuthStep step, std::span<uint8_t> body) override {
    MsgType type{};
    PDKV_RETURN_IF_ERROR(sock_.recv_frame(&type, &buf_, now() + Millis(3000)));
    if (type != lease_frame_type(step)) return unexpected_auth_message(step);
    return decode_auth_body(buf_, body);
  }
  std::vector<Frame> sent;

 private:
  Socket& sock_;
  std::vector<uint8_t> buf_;
};

}  // namespace

bool Answer::any_write_material() const {
  return std::any_of(types.begin(), types.end(), [](MsgType t) {
    return t == MsgType::kHelloAck || t == MsgType::kGrant || t == MsgType::kRegions;
  });
}

Answer send_raw(const std::string& endpoint, std::span<const uint8_t> bytes,
                std::chrono::milliseconds timeout) {
  Answer answer;
  auto sock = connect_to(endpoint, 2000);
  if (!sock.ok()) return answer;
  // The endpoint may close while we still send (it refuses at the first bad frame).
  size_t off = 0;
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (off < bytes.size() && std::chrono::steady_clock::now() < end) {
    ssize_t n = ::send(sock->fd(), bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{sock->fd(), POLLOUT, 0};
      ::poll(&p, 1, 10);
    } else {
      break;
    }
  }
  std::vector<uint8_t> got;
  uint8_t buf[4096];
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{sock->fd(), POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    ssize_t n = ::recv(sock->fd(), buf, sizeof buf, 0);
    if (n > 0) {
      got.insert(got.end(), buf, buf + n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    answer.closed = true;  // EOF or reset
    break;
  }
  for (size_t at = 0; at + kFrameHeaderBytes <= got.size();) {
    auto h = decode_frame_header(std::span<const uint8_t>(got).subspan(at));
    if (!h.ok() || at + kFrameHeaderBytes + h->payload_bytes > got.size()) break;
    answer.types.push_back(h->type);
    at += kFrameHeaderBytes + h->payload_bytes;
  }
  return answer;
}

std::vector<uint8_t> encode_frames(const std::vector<Frame>& frames) {
  std::vector<uint8_t> out;
  for (const Frame& f : frames) {
    uint8_t header[kFrameHeaderBytes];
    encode_frame_header(f.type, static_cast<uint32_t>(f.payload.size()), header);
    out.insert(out.end(), header, header + kFrameHeaderBytes);
    out.insert(out.end(), f.payload.begin(), f.payload.end());
  }
  return out;
}

std::vector<Frame> hello_and_requests(const std::string& backend, uint64_t dst, uint64_t length) {
  std::vector<Frame> frames(3);
  frames[0].type = MsgType::kHello;
  encode_hello(Hello{backend, host_identity()}, &frames[0].payload);
  frames[1].type = MsgType::kRegionsReq;
  frames[2].type = MsgType::kLease;
  const uint64_t range[] = {dst, length, 0};
  encode_lease(1, range, &frames[2].payload);
  return frames;
}

Result<std::vector<Frame>> record_member_handshake(const std::string& endpoint,
                                                   const ClusterKey& key) {
  PDKV_ASSIGN_OR_RETURN(Socket sock, connect_to(endpoint, 2000));
  RecordingTransport transport(sock);
  PDKV_RETURN_IF_ERROR(authenticate_to_receiver(transport, key, kLeaseChannel));
  return transport.sent;
}

}  // namespace pdkv::engine::lease::testing
