#include "engine/lease/wire.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/host_port.h"
#include "common/send_all.h"

namespace pdkv::engine::lease {
namespace {

std::string errno_text(int err) { return std::string(std::strerror(err)); }

int remaining_ms(TimePoint deadline) {
  auto left = std::chrono::duration_cast<Millis>(deadline - now()).count();
  if (left < 0) return 0;
  return left > 1000000 ? 1000000 : static_cast<int>(left) + 1;
}

// Waits until fd is ready for `events`; DeadlineExceeded when the deadline passes.
Status wait_fd(int fd, short events, TimePoint deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = remaining_ms(deadline);
    if (ms == 0) return deadline_exceeded(std::string("control channel: timed out ") + what);
    int r = ::poll(&p, 1, ms);
    if (r > 0) return Status();
    if (r < 0 && errno != EINTR) return internal_error("poll: " + errno_text(errno));
  }
}

// Every integer on the wire: little-endian, fixed width, byte by byte (never a struct
// copy, so neither the host's byte order nor its padding reaches the wire).
template <class T>
void put_le(T v, uint8_t* out) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}
template <class T>
T get_le(const uint8_t* in) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(in[i]) << (8 * i);
  return v;
}

}  // namespace

void encode_frame_header(MsgType type, uint32_t payload_bytes, uint8_t* out) {
  out[0] = kWireVersion;
  out[1] = static_cast<uint8_t>(type);
  out[2] = 0;
  out[3] = 0;
  put_le(payload_bytes, out + 4);
}

Result<FrameHeader> decode_frame_header(std::span<const uint8_t> bytes) {
  if (bytes.size() < kFrameHeaderBytes) return data_loss("control channel: frame header truncated");
  const auto n = get_le<uint32_t>(bytes.data() + 4);
  if (bytes[0] != kWireVersion || bytes[1] == 0 || bytes[1] > kMaxMsgType || bytes[2] != 0 ||
      bytes[3] != 0 || n > kMaxPayloadBytes) {
    return data_loss("control channel: malformed frame header (version " +
                     std::to_string(bytes[0]) + ", type " + std::to_string(bytes[1]) + ", " +
                     std::to_string(n) + " payload bytes)");
  }
  return FrameHeader{static_cast<MsgType>(bytes[1]), n};
}

template <class T>
void Writer::fixed(T v) {
  uint8_t le[sizeof(T)];
  put_le(v, le);
  out_.insert(out_.end(), le, le + sizeof(T));
}
void Writer::u32(uint32_t v) { fixed(v); }
void Writer::u64(uint64_t v) { fixed(v); }
void Writer::bytes(std::string_view s) {
  u32(static_cast<uint32_t>(s.size()));
  out_.insert(out_.end(), s.begin(), s.end());
}

template <class T>
Status Reader::fixed(T* v, const char* truncated) {
  if (remaining() < sizeof(T)) return data_loss(truncated);
  *v = get_le<T>(in_.data() + pos_);
  pos_ += sizeof(T);
  return Status();
}
Status Reader::u8(uint8_t* v) { return fixed(v, "control message truncated (u8)"); }
Status Reader::u32(uint32_t* v) { return fixed(v, "control message truncated (u32)"); }
Status Reader::u64(uint64_t* v) { return fixed(v, "control message truncated (u64)"); }
Status Reader::bytes(std::string* v) {
  uint32_t n = 0;
  PDKV_RETURN_IF_ERROR(u32(&n));
  if (remaining() < n) return data_loss("control message truncated (bytes)");
  v->assign(reinterpret_cast<const char*>(in_.data() + pos_), n);
  pos_ += n;
  return Status();
}

void Socket::shutdown_both() {
  if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);
}

Status Socket::write_all(const uint8_t* p, size_t n, TimePoint deadline) {
  return send_all(
      fd(), p, n, [&] { return wait_fd(fd(), POLLOUT, deadline, "sending"); },
      [](int err) {
        return unavailable("control channel: peer closed (" + errno_text(err) + ")");
      });
}

Status Socket::read_all(uint8_t* p, size_t n, TimePoint deadline) {
  while (n > 0) {
    ssize_t r = ::recv(fd(), p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return unavailable("control channel: peer closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      PDKV_RETURN_IF_ERROR(wait_fd(fd(), POLLIN, deadline, "waiting for the peer"));
      continue;
    }
    return unavailable("control channel: " + errno_text(errno));
  }
  return Status();
}

Status Socket::send_frame(MsgType type, std::span<const uint8_t> payload, TimePoint deadline) {
  uint8_t header[kFrameHeaderBytes];
  encode_frame_header(type, static_cast<uint32_t>(payload.size()), header);
  // Header and payload leave in one sendmsg: two small sends would meet Nagle and the
  // peer's delayed ACK and cost ~40 ms per lease round trip.
  iovec iov[2] = {{header, sizeof(header)}, {const_cast<uint8_t*>(payload.data()), payload.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = payload.empty() ? 1 : 2;
  ssize_t w = ::sendmsg(fd(), &msg, MSG_NOSIGNAL);
  if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    return unavailable("control channel: peer closed (" + errno_text(errno) + ")");
  }
  size_t sent = w < 0 ? 0 : static_cast<size_t>(w);
  if (sent < sizeof(header)) {
    PDKV_RETURN_IF_ERROR(write_all(header + sent, sizeof(header) - sent, deadline));
    sent = sizeof(header);
  }
  size_t body = sent - sizeof(header);
  return write_all(payload.data() + body, payload.size() - body, deadline);
}

Status Socket::recv_frame(MsgType* type, std::vector<uint8_t>* payload, TimePoint deadline,
                          uint32_t max_payload_bytes) {
  uint8_t header[kFrameHeaderBytes];
  PDKV_RETURN_IF_ERROR(read_all(header, sizeof(header), deadline));
  PDKV_ASSIGN_OR_RETURN(FrameHeader h, decode_frame_header(header));
  if (h.payload_bytes > max_payload_bytes) {
    return data_loss("control channel: a frame of " + std::to_string(h.payload_bytes) +
                     " payload bytes where at most " + std::to_string(max_payload_bytes) +
                     " are accepted");
  }
  *type = h.type;
  payload->resize(h.payload_bytes);
  return read_all(payload->data(), h.payload_bytes, deadline);
}

Result<Socket> connect_to(const std::string& endpoint, int timeout_ms) {
  PDKV_ASSIGN_OR_RETURN(HostPort hp, parse_host_port(endpoint));
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int gai = getaddrinfo(hp.host.c_str(), std::to_string(hp.port).c_str(), &hints, &res);
  if (gai != 0 || res == nullptr) {
    return unavailable("cannot resolve '" + endpoint + "': " + gai_strerror(gai));
  }
  Socket sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) {
    freeaddrinfo(res);
    return internal_error("socket: " + errno_text(errno));
  }
  PDKV_RETURN_IF_ERROR(set_nonblocking(sock.fd()));
  int rc = ::connect(sock.fd(), res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0 && errno != EINPROGRESS) {
    return unavailable("connect to " + endpoint + ": " + errno_text(errno));
  }
  if (rc != 0) {
    Status waited = wait_fd(sock.fd(), POLLOUT, now() + Millis(timeout_ms), "connecting");
    if (!waited.ok()) {
      return unavailable("connect to " + endpoint + ": no answer within " +
                         std::to_string(timeout_ms) + " ms");
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return unavailable("connect to " + endpoint + ": " + errno_text(err));
  }
  set_nodelay(sock.fd());
  return sock;
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Result<Socket> listen_on(const std::string& host, int port, int* bound_port) {
  Socket sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return internal_error("socket: " + errno_text(errno));
  int one = 1;
  setsockopt(sock.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return invalid_argument("listen host '" + host + "' is not an IPv4 address");
  }
  if (::bind(sock.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return unavailable("bind " + host + ":" + std::to_string(port) + ": " + errno_text(errno));
  }
  if (::listen(sock.fd(), 128) != 0) return unavailable("listen: " + errno_text(errno));
  socklen_t len = sizeof(addr);
  getsockname(sock.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
  *bound_port = ntohs(addr.sin_port);
  PDKV_RETURN_IF_ERROR(set_nonblocking(sock.fd()));
  return sock;
}

std::string host_identity() {
  std::string boot_id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot_id);
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) == 0) boot_id += "/" + std::to_string(st.st_ino);
  return boot_id;
}

}  // namespace pdkv::engine::lease
