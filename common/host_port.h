// The one parser of network addresses pdkv is given as text: "host:port" (engine
// endpoints, the bootstrap address, lease channels, etcd endpoints) and the ZeroMQ form
// "tcp://host:port" (control endpoints). IPv6 literals go in brackets: "[::1]:5000".
//
// Accepted:
//   host  a host name or IPv4 address of letters, digits, '-', '.', '_' (at most 253
//         bytes), or "[v6]" with an IPv6 literal inside (inet_pton), optionally "%zone".
//         Whether the name resolves is the connecting code's business; what a *network
//         peer* names is checked further by check_host_name() (host_name.h).
//   port  decimal digits only, 1 - 65535 (no sign, no spaces; 0 means "pick one" only
//         where a listener takes a port number, never in an address to connect to).
// Anything else is InvalidArgument whose message quotes the text and says what is wrong
// (no port, port 0, port out of range, port not a number, empty host, unbracketed IPv6,
// a byte that belongs in no host). Callers add what the address was for (with_context).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pdkv {

struct HostPort {
  std::string host;   // without brackets: "10.0.0.1", "node-3", "::1"
  uint16_t port = 0;  // 1 - 65535 when parsed
  bool operator==(const HostPort&) const = default;
};

// "host:port" or "[v6]:port".
Result<HostPort> parse_host_port(std::string_view text);
// "tcp://host:port" or "tcp://[v6]:port": the scheme is required.
Result<HostPort> parse_tcp_endpoint(std::string_view text);

// The inverse: brackets a host that contains ':' (and is not bracketed already).
std::string format_host_port(std::string_view host, uint16_t port);
// "tcp://" + format_host_port(host, port).
std::string format_tcp_endpoint(std::string_view host, uint16_t port);

}  // namespace pdkv
