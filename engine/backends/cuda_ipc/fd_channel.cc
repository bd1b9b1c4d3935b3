#include "engine/backends/cuda_ipc/fd_channel.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pdkv::engine::cuda_ipc {
namespace {

Status errno_status(const char* what) {
  return unavailable(std::string(what) + ": " + std::strerror(errno));
}

socklen_t abstract_address(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(addr->sun_path) - 1);
  std::memcpy(addr->sun_path + 1, name.data(), n);  // sun_path[0] = 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

}  // namespace

Status random_bytes(std::span<uint8_t> out) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::getrandom(out.data() + done, out.size() - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return internal_error(std::string("getrandom: ") + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status();
}

Result<FdChannel> FdChannel::connect(const std::string& name, int timeout_ms) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno_status("socket(AF_UNIX)");
  sockaddr_un addr;
  const socklen_t len = abstract_address(name, &addr);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return errno_status(("connect to the device-handle socket @" + name).c_str());
  }
  FdChannel channel(std::move(fd));
  PDKV_RETURN_IF_ERROR(channel.set_timeout(timeout_ms));
  return channel;
}

Status FdChannel::set_timeout(int timeout_ms) {
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  if (::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
      ::setsockopt(fd_.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0) {
    return errno_status("setsockopt(SO_RCVTIMEO)");
  }
  return Status();
}

Status FdChannel::send(std::span<const uint8_t> record, int fd) {
  iovec iov{const_cast<uint8_t*>(record.data()), record.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  for (;;) {
    const ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(record.size())) return Status();
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return deadline_exceeded("device-handle socket: send timed out");
    }
    return errno_status("device-handle socket: sendmsg");
  }
}

Status FdChannel::receive(std::vector<uint8_t>* record, UniqueFd* fd) {
  record->resize(kMaxRecordBytes);
  iovec iov{record->data(), record->size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(fd_.get(), &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    return deadline_exceeded("device-handle socket: nothing received in time");
  }
  if (n < 0) return errno_status("device-handle socket: recvmsg");
  // Take ownership of every descriptor that arrived before judging the record, so none
  // leaks whatever the sender attached.
  std::vector<UniqueFd> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received = -1;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.emplace_back(received);
    }
  }
  if (n == 0) return unavailable("device-handle socket: peer closed");
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    return data_loss("device-handle socket: record or descriptors truncated");
  }
  if (fds.size() > 1) return data_loss("device-handle socket: more than one descriptor");
  record->resize(static_cast<size_t>(n));
  *fd = fds.empty() ? UniqueFd() : std::move(fds[0]);
  return Status();
}

Result<FdListener> FdListener::listen() {
  FdListener l;
  uint8_t nonce[8];
  PDKV_RETURN_IF_ERROR(random_bytes(nonce));
  char hex[17];
  for (int i = 0; i < 8; ++i) std::snprintf(hex + 2 * i, 3, "%02x", nonce[i]);
  l.name_ = "pdkv-cuda-ipc-" + std::to_string(::getpid()) + "-" + hex;
  l.fd_ = UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!l.fd_.valid()) return errno_status("socket(AF_UNIX)");
  sockaddr_un addr;
  const socklen_t len = abstract_address(l.name_, &addr);
  if (::bind(l.fd_.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return errno_status("bind the device-handle socket");
  }
  if (::listen(l.fd_.get(), 64) != 0) return errno_status("listen on the device-handle socket");
  return l;
}

Result<FdChannel> FdListener::accept(int timeout_ms) {
  pollfd p{fd_.get(), POLLIN, 0};
  const int ready = ::poll(&p, 1, timeout_ms);
  if (ready < 0 && errno != EINTR) return errno_status("poll the device-handle socket");
  if (ready <= 0) return FdChannel();
  UniqueFd conn(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!conn.valid()) return FdChannel();  // gone again (EAGAIN, ECONNABORTED)
  return FdChannel(std::move(conn));
}

void FdListener::shutdown() {
  if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);
}

}  // namespace pdkv::engine::cuda_ipc
