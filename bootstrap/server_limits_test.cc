// A hostile client against the bootstrap server's own listener: an oversized chunked
// registration is cut off (http/http_listener_limits_test.cc checks every limit of the
// listener itself).
#include <gtest/gtest.h>

#include <string>

#include "bootstrap/server.h"
#include "bootstrap/test_server.h"
#include "http/testing/raw_http_client.h"

namespace pdkv::bootstrap {
namespace {

using http::testing::raw_get;
using http::testing::RawConnection;
using http::testing::RawReply;
using std::chrono::milliseconds;

constexpr size_t kMiB = 1 << 20;

// The bootstrap server keeps its contract (an oversized body is a 400 naming the body)
// for chunked bodies too, which cpp-httplib 0.11 buffered whole.
TEST(HttpListenerLimits, TheBootstrapServerCutsOffAChunkedRegistrationPastItsLimit) {
  auto s = BootstrapServer::start(testing::loopback_options());
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  RawConnection c((*s)->port());
  ASSERT_TRUE(c.send_all("PUT /route HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"));
  EXPECT_LT(c.send_chunks(16 * 1024, 64 * kMiB), 16 * kMiB);
  RawReply r = c.read_reply(milliseconds(2000));
  if (r.status != 0) {
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(r.body.find("\"field\":\"body\""), std::string::npos) << r.body;
  }
  EXPECT_NE((*s)->metrics_text().find("pdkv_bootstrap_errors_total{kind=\"payload_too_large\"} 1"),
            std::string::npos);
  EXPECT_EQ(raw_get((*s)->port(), "/health", milliseconds(1000)).status, 200);
}

}  // namespace
}  // namespace pdkv::bootstrap
