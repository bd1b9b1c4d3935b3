// An exclusive TCP listen socket for the HTTP servers (http_listener.h).
//
// SO_REUSEADDR is set, so a restarted server takes its port back while connections of the
// old one sit in TIME_WAIT; SO_REUSEPORT never is: with it a second process could bind the
// same port and silently take a share of the connections (and the routes registered
// there would be lost to the first). So a port that is in use is refused, with a message
// that says so.
//
// Thread safety: a function of its arguments; the caller owns the returned descriptor.
#pragma once

#include <string>

#include "common/status.h"

namespace pdkv::http {

struct ListenSocket {
  int fd = -1;
  int port = 0;       // the bound port (the kernel's choice when asked for 0)
  bool ipv6 = false;  // AF_INET6 (else AF_INET)
};

// Binds host:port (numeric address or a name that resolves; port 0 = any free port) and
// listens with `backlog`. kUnavailable naming the address and the reason if it cannot;
// kInvalidArgument for a port outside [0, 65535].
Result<ListenSocket> bind_listen_socket(const std::string& host, int port, int backlog);

}  // namespace pdkv::http
