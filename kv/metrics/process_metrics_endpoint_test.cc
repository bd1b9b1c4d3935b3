// The process's metrics endpoint over real loopback HTTP: shared by every caller, serving
// every registered source, refusing a second fixed port, and safe while sources come and
// go during scrapes (the sanitizer builds run this one).
#include "kv/metrics/process_metrics_endpoint.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kv/metrics/metrics_registry.h"

namespace pdkv::kv {
namespace {

MetricsRegistry::Source gauge_source(std::string rank) {
  return [rank](PrometheusText& out) {
    out.declare("pdkv_test_gauge", MetricType::kGauge, "Test.");
    out.sample("pdkv_test_gauge", {{"role", "decode"}, {"rank", rank}}, 1);
  };
}

TEST(ProcessMetricsEndpoint, OneEndpointServesEverySourceOfTheProcess) {
  auto a = MetricsRegistry::process().add(gauge_source("0"));
  auto b = MetricsRegistry::process().add(gauge_source("1"));
  auto first = ProcessMetricsEndpoint::acquire("127.0.0.1", 0);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto second = ProcessMetricsEndpoint::acquire("127.0.0.1", 0);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first->get(), second->get());
  auto same_port = ProcessMetricsEndpoint::acquire("127.0.0.1", (*first)->port());
  ASSERT_TRUE(same_port.ok());
  const int other = (*first)->port() == 1 ? 2 : 1;
  auto conflict = ProcessMetricsEndpoint::acquire("127.0.0.1", other);
  ASSERT_FALSE(conflict.ok());
  EXPECT_EQ(conflict.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(conflict.status().message().find(std::to_string((*first)->port())), std::string::npos);

  httplib::Client client("127.0.0.1", (*first)->port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const std::string family = "# HELP pdkv_test_gauge Test.\n# TYPE pdkv_test_gauge gauge\n";
  EXPECT_EQ(res->body.find(family), res->body.rfind(family)) << "one HELP/TYPE per family";
  EXPECT_NE(res->body.find("pdkv_test_gauge{role=\"decode\",rank=\"0\"} 1\n"), std::string::npos);
  EXPECT_NE(res->body.find("pdkv_test_gauge{role=\"decode\",rank=\"1\"} 1\n"), std::string::npos);
  a.reset();
  res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body.find("rank=\"0\""), std::string::npos);
}

TEST(ProcessMetricsEndpoint, StopsWithTheLastHandle) {
  int port = 0;
  {
    auto endpoint = ProcessMetricsEndpoint::acquire("127.0.0.1", 0);
    ASSERT_TRUE(endpoint.ok());
    port = (*endpoint)->port();
  }
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(1);
  EXPECT_FALSE(client.Get("/health"));
}

TEST(ProcessMetricsEndpoint, SourcesComeAndGoDuringScrapes) {
  auto endpoint = ProcessMetricsEndpoint::acquire("127.0.0.1", 0);
  ASSERT_TRUE(endpoint.ok());
  std::atomic<bool> done{false};
  std::atomic<int> ok_scrapes{0};
  std::thread scraper([&] {
    httplib::Client client("127.0.0.1", (*endpoint)->port());
    while (!done) {
      auto res = client.Get("/metrics");
      if (res && res->status == 200) ++ok_scrapes;
    }
  });
  // Sources come and go until several scrapes ran across them (a loaded machine may not
  // schedule the scraper during the first 200), for at most 20 s.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int i = 0; (i < 200 || ok_scrapes.load() < 5) && std::chrono::steady_clock::now() < give_up;
       ++i) {
    auto r = MetricsRegistry::process().add(gauge_source(std::to_string(i)));
    std::this_thread::yield();
  }
  done = true;
  scraper.join();
  EXPECT_GT(ok_scrapes.load(), 0);
}

}  // namespace
}  // namespace pdkv::kv
