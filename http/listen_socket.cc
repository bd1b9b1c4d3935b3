#include "http/listen_socket.h"

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pdkv::http {
namespace {

int bound_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return -1;
}

std::string reason(int err) {
  std::string why = std::strerror(err);
  if (err == EADDRINUSE) why += " (another process, or another server here, listens on it)";
  return why;
}

}  // namespace

Result<ListenSocket> bind_listen_socket(const std::string& host, int port, int backlog) {
  if (port < 0 || port > 65535) {
    return invalid_argument(fmt::format("port {} is not in [0, 65535]", port));
  }
  const std::string where = fmt::format("{}:{}", host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return unavailable(fmt::format("cannot bind {}: {}", where, ::gai_strerror(rc)));
  }
  int last_error = EADDRNOTAVAIL;
  ListenSocket out;
  for (addrinfo* a = found; a != nullptr && out.fd < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = errno;
      continue;
    }
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, backlog) != 0) {
      last_error = errno;
      ::close(fd);
      continue;
    }
    out.fd = fd;
    out.ipv6 = a->ai_family == AF_INET6;
  }
  ::freeaddrinfo(found);
  if (out.fd < 0) {
    return unavailable(fmt::format("cannot bind {}: {}", where, reason(last_error)));
  }
  out.port = bound_port(out.fd);
  if (out.port <= 0) {
    int err = errno;
    ::close(out.fd);
    return unavailable(
        fmt::format("cannot read the port bound at {}: {}", where, std::strerror(err)));
  }
  return out;
}

}  // namespace pdkv::http
