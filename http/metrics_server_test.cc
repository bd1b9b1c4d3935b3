// A real metrics endpoint over loopback, scraped with cpp-httplib.
#include "http/metrics_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <stdexcept>

namespace pdkv::http {
namespace {

TEST(MetricsServerTest, ServesWhatRenderReturnsAtEachScrape) {
  std::atomic<int> scrapes{0};
  auto m = MetricsServer::start("127.0.0.1", 0,
                                [&] { return "pdkv_scrapes " + std::to_string(++scrapes) + "\n"; });
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  httplib::Client c("127.0.0.1", (*m)->port());
  auto first = c.Get("/metrics");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->body, "pdkv_scrapes 1\n");
  auto second = c.Get("/metrics");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->body, "pdkv_scrapes 2\n");
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->body, "OK");
  auto missing = c.Get("/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST(MetricsServerTest, ARenderThatThrowsIsA500AndTheServerGoesOn) {
  std::atomic<bool> fail{true};  // read on the server's worker thread
  auto m = MetricsServer::start("127.0.0.1", 0, [&]() -> std::string {
    if (fail) throw std::runtime_error("snapshot failed");
    return "ok 1\n";
  });
  ASSERT_TRUE(m.ok());
  httplib::Client c("127.0.0.1", (*m)->port());
  auto bad = c.Get("/metrics");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 500);
  EXPECT_NE(bad->body.find("snapshot failed"), std::string::npos);
  fail = false;
  auto good = c.Get("/metrics");
  ASSERT_TRUE(good);
  EXPECT_EQ(good->body, "ok 1\n");
}

// cpp-httplib binds with SO_REUSEADDR, so a busy port is not a reliable failure; an
// address this host does not have (TEST-NET-1, RFC 5737) is.
TEST(MetricsServerTest, AnAddressThatCannotBeBoundIsUnavailableNamingIt) {
  auto m = MetricsServer::start("192.0.2.1", 0, [] { return std::string(); });
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(m.status().message().find("192.0.2.1"), std::string::npos) << m.status().to_string();
}

}  // namespace
}  // namespace pdkv::http
