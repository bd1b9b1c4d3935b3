// Where the bootstrap tests run their BootstrapServer: loopback, on a free port.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <utility>

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

// A fixture whose tests each get their own server on loopback_options() (server_).
class LoopbackServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = BootstrapServer::start(loopback_options());
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(s).value();
  }
  // Plain cpp-httplib requests to the server, each read bounded at 10 s.
  httplib::Client raw() const {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(std::chrono::seconds(10));
    return c;
  }

  std::unique_ptr<BootstrapServer> server_;
};

}  // namespace pdkv::bootstrap::testing
