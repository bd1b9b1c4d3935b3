// Checks that a host taken from the network (a rank's advertised address, a route entry)
// is an IP address or a DNS host name, before it is turned into an endpoint anything
// connects to. A route entry naming "*", "host:port", "ipc:///..." or bytes a resolver or
// ZeroMQ would interpret some other way is refused with a reason, never connected to.
//
// Thread safety: pure function.
#pragma once

#include <string_view>

#include "common/status.h"

namespace pdkv {

// OK for an IPv4 or IPv6 literal (inet_pton) or a host name of RFC 1123 labels (letters,
// digits, '-', not at a label's ends; labels of 1-63 bytes; 253 bytes in all; an optional
// trailing dot). Every byte of `host` is checked (letters, digits, '-', '.', ':' only), a
// NUL anywhere included. InvalidArgument saying why otherwise.
Status check_host_name(std::string_view host);

}  // namespace pdkv
