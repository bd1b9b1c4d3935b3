// Where the bootstrap tests run their BootstrapServer: loopback, on a free port.
#pragma once

#include "bootstrap/server.h"

namespace pdkv::bootstrap::testing {

// Default options but for the address: 127.0.0.1, port 0 (the kernel picks a free one;
// BootstrapServer::port() says which).
inline ServerOptions loopback_options() {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  return o;
}

}  // namespace pdkv::bootstrap::testing
