#include "engine/backends/tcp/socket_util.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/clock.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/send_all.h"

namespace pdkv::engine::tcp {
namespace {

std::string errno_text(int err) { return std::string(std::strerror(err)); }

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { freeaddrinfo(ai); }
};

Result<std::unique_ptr<addrinfo, AddrInfoDeleter>> resolve(const std::string& host, uint16_t port,
                                                           bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* out = nullptr;
  const std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &out);
  if (rc != 0) {
    return unavailable("cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  return std::unique_ptr<addrinfo, AddrInfoDeleter>(out);
}

int remaining_ms(TimePoint deadline) {
  auto left = std::chrono::duration_cast<Millis>(deadline - now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

bool is_peer_gone(int err) { return err == ECONNRESET || err == EPIPE || err == ENOTCONN; }

}  // namespace

EventFd::EventFd() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
void EventFd::signal() const {
  uint64_t one = 1;
  ssize_t rc = ::write(fd_.get(), &one, sizeof one);
  (void)rc;  // EAGAIN means the counter is already non-zero: still signalled
}
void EventFd::drain() const {
  uint64_t value;
  ssize_t rc = ::read(fd_.get(), &value, sizeof value);
  (void)rc;
}

Result<UniqueFd> listen_tcp(const std::string& host, uint16_t port, uint16_t* bound_port) {
  PDKV_ASSIGN_OR_RETURN(auto addrs, resolve(host, port, true));
  std::string last_error = "no address";
  for (addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last_error = errno_text(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), 512) != 0) {
      last_error = errno_text(errno);
      continue;
    }
    PDKV_RETURN_IF_ERROR(set_nonblocking(fd.get()));
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    *bound_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                 : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    return fd;
  }
  return unavailable("cannot listen on " + format_host_port(host, port) + ": " + last_error);
}

Result<UniqueFd> connect_tcp(const std::string& endpoint, int timeout_ms) {
  PDKV_ASSIGN_OR_RETURN(HostPort hp, parse_host_port(endpoint));
  PDKV_ASSIGN_OR_RETURN(auto addrs, resolve(hp.host, hp.port, false));
  const TimePoint deadline = now() + Millis(timeout_ms);
  std::string last_error = "no address";
  for (addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd.valid()) {
      last_error = errno_text(errno);
      continue;
    }
    int rc;
    do {
      rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0 && errno != EINPROGRESS) {
      last_error = errno_text(errno);
      continue;
    }
    if (rc != 0) {
      pollfd p{fd.get(), POLLOUT, 0};
      int n;
      do {
        n = ::poll(&p, 1, remaining_ms(deadline));
      } while (n < 0 && errno == EINTR);
      if (n == 0) {
        return unavailable("connect to " + endpoint + " timed out after " +
                           std::to_string(timeout_ms) + " ms");
      }
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last_error = errno_text(err);
        continue;
      }
    }
    return fd;
  }
  return unavailable("connect to " + endpoint + " failed: " + last_error);
}

void tune_socket(int fd, const TcpOptions& options) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (options.socket_buffer_bytes > 0) {
    int size = options.socket_buffer_bytes;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  }
}

Status wait_fd(int fd, short events, int stop_fd, int timeout_ms) {
  pollfd p[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
  const nfds_t count = stop_fd >= 0 ? 2 : 1;
  while (true) {
    int n = ::poll(p, count, timeout_ms);
    if (n < 0 && errno == EINTR) continue;  // a signal is not a timeout: retry (approximate)
    if (n < 0) return internal_error("poll: " + errno_text(errno));
    if (n == 0) return deadline_exceeded("no progress for " + std::to_string(timeout_ms) + " ms");
    if (count == 2 && (p[1].revents & POLLIN)) return aborted("engine shutting down");
    return Status();  // readable/writable or error: the next syscall reports which
  }
}

namespace {

// wait_fd for POLLIN, asking `check` first and between slices of the wait; timeout_ms
// still bounds the whole wait (-1 = none).
Status wait_readable(int fd, int stop_fd, int timeout_ms, const ReadCheck& check) {
  if (!check) return wait_fd(fd, POLLIN, stop_fd, timeout_ms);
  PDKV_RETURN_IF_ERROR(check());
  int left = timeout_ms;
  while (true) {
    const int slice = left < 0 ? kReadCheckSliceMs : std::min(left, kReadCheckSliceMs);
    Status ready = wait_fd(fd, POLLIN, stop_fd, slice);
    if (ready.code() != StatusCode::kDeadlineExceeded) return ready;
    PDKV_RETURN_IF_ERROR(check());
    if (left >= 0) {
      left -= slice;
      if (left <= 0) {
        return deadline_exceeded("no progress for " + std::to_string(timeout_ms) + " ms");
      }
    }
  }
}

}  // namespace

Status write_full(int fd, const void* data, size_t len, int stop_fd, int timeout_ms) {
  return send_all(
      fd, data, len, [&] { return wait_fd(fd, POLLOUT, stop_fd, timeout_ms); },
      [](int err) {
        if (is_peer_gone(err)) return unavailable("peer closed the connection: " + errno_text(err));
        return unavailable("send: " + errno_text(err));
      });
}

Status read_full(int fd, void* data, size_t len, int stop_fd, int first_byte_timeout_ms,
                 int timeout_ms, ReadCheck check) {
  auto* p = static_cast<uint8_t*>(data);
  const size_t total = len;
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return unavailable(len == total ? "peer closed the connection"
                                      : "peer closed the connection mid-frame");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      PDKV_RETURN_IF_ERROR(
          wait_readable(fd, stop_fd, len == total ? first_byte_timeout_ms : timeout_ms, check));
      continue;
    }
    return unavailable("recv: " + errno_text(errno));
  }
  return Status();
}

Status readv_full(int fd, struct iovec* iov, int iov_count, int stop_fd, int timeout_ms,
                  ReadCheck check) {
  while (iov_count > 0) {
    ssize_t n = ::readv(fd, iov, iov_count);
    if (n == 0) return unavailable("peer closed the connection mid-frame");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        PDKV_RETURN_IF_ERROR(wait_readable(fd, stop_fd, timeout_ms, check));
        continue;
      }
      return unavailable("readv: " + errno_text(errno));
    }
    auto done = static_cast<size_t>(n);
    while (iov_count > 0 && done >= iov->iov_len) {
      done -= iov->iov_len;
      ++iov;
      --iov_count;
    }
    if (iov_count > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + done;
      iov->iov_len -= done;
    }
  }
  return Status();
}

}  // namespace pdkv::engine::tcp
