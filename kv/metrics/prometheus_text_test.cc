#include "kv/metrics/prometheus_text.h"

#include <gtest/gtest.h>

#include <array>
#include <thread>
#include <vector>

#include "kv/metrics/metrics_registry.h"
#include "kv/metrics/transfer_metrics.h"

namespace pdkv::kv {
namespace {

constexpr std::array<uint64_t, 3> kBounds = {10, 100, 1000};

TEST(Histogram, BucketsAreUpperInclusiveAndCountIsTheirSum) {
  Histogram h(kBounds, 1);
  for (uint64_t v : {0, 10, 11, 100, 5000}) h.observe(v);
  auto s = h.snapshot();
  EXPECT_EQ(s.counts[0], 2u);  // 0, 10
  EXPECT_EQ(s.counts[1], 2u);  // 11, 100
  EXPECT_EQ(s.counts[2], 0u);
  EXPECT_EQ(s.counts[3], 1u);  // +Inf
  EXPECT_EQ(s.count, 5u);
  EXPECT_EQ(s.sum, 5121u);
}

TEST(Histogram, ConcurrentObservationsAreAllCounted) {
  Histogram h(kBounds, 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) h.observe(static_cast<uint64_t>(i % 2000));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.snapshot().count, 40000u);
}

TEST(PrometheusText, HistogramIsCumulativeInBaseUnits) {
  Histogram h(kBounds, 1000);  // raw = milli-units
  h.observe(5);
  h.observe(50);
  PrometheusText out;
  out.declare("x_seconds", MetricType::kHistogram, "X.");
  out.histogram("x_seconds", {{"role", "prefill"}}, h.snapshot());
  EXPECT_EQ(out.str(),
            "# HELP x_seconds X.\n"
            "# TYPE x_seconds histogram\n"
            "x_seconds_bucket{role=\"prefill\",le=\"0.01\"} 1\n"
            "x_seconds_bucket{role=\"prefill\",le=\"0.1\"} 2\n"
            "x_seconds_bucket{role=\"prefill\",le=\"1\"} 2\n"
            "x_seconds_bucket{role=\"prefill\",le=\"+Inf\"} 2\n"
            "x_seconds_sum{role=\"prefill\"} 0.055\n"
            "x_seconds_count{role=\"prefill\"} 2\n");
}

TEST(PrometheusText, LabelValuesAndHelpAreEscaped) {
  PrometheusText out;
  out.declare("y_total", MetricType::kCounter, "a \\ b\nc");
  out.sample("y_total", {{"v", "q\"x\\y\nz"}}, 3);
  EXPECT_EQ(out.str(),
            "# HELP y_total a \\\\ b\\nc\n"
            "# TYPE y_total counter\n"
            "y_total{v=\"q\\\"x\\\\y\\nz\"} 3\n");
}

TEST(PrometheusText, FamiliesOfSeveralSourcesAreWrittenOnceAndTogether) {
  PrometheusText out;
  for (const char* role : {"prefill", "decode"}) {
    out.declare("a_total", MetricType::kCounter, "A.");
    out.sample("a_total", {{"role", role}}, 1);
    out.declare("b", MetricType::kGauge, "B.");
    out.sample("b", {{"role", role}}, 2);
  }
  EXPECT_EQ(out.str(),
            "# HELP a_total A.\n# TYPE a_total counter\n"
            "a_total{role=\"prefill\"} 1\na_total{role=\"decode\"} 1\n"
            "# HELP b B.\n# TYPE b gauge\n"
            "b{role=\"prefill\"} 2\nb{role=\"decode\"} 2\n");
}

TEST(TransferMetrics, EveryCauseIsALabelAndStagesAreHistograms) {
  TransferMetrics m;
  m.room_failed(FailureCause::kPeerDead);
  m.observe(RoomStage::kWire, std::chrono::milliseconds(3));
  PrometheusText out;
  m.render(out, {{"role", "prefill"}, {"rank", "0"}}, true);
  const std::string text = out.str();
  EXPECT_NE(
      text.find("pdkv_room_failures_total{role=\"prefill\",rank=\"0\",cause=\"peer_dead\"} 1"),
      std::string::npos);
  EXPECT_NE(text.find("pdkv_room_failures_total{role=\"prefill\",rank=\"0\",cause=\"shutdown\"} 0"),
            std::string::npos);
  EXPECT_NE(text.find("pdkv_room_stage_seconds_bucket{role=\"prefill\",rank=\"0\",stage=\"wire\","
                      "le=\"0.005\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("pdkv_room_stage_seconds_sum{role=\"prefill\",rank=\"0\",stage=\"wire\"} 0.003"),
      std::string::npos);
  EXPECT_EQ(m.snapshot().rooms_failed, 1u);
}

TEST(MetricsRegistry, RendersEverySourceUntilItsRegistrationGoes) {
  MetricsRegistry registry;
  auto source = [](const char* role) {
    return [role](PrometheusText& out) {
      out.declare("z", MetricType::kGauge, "Z.");
      out.sample("z", {{"role", role}}, 1);
    };
  };
  auto a = registry.add(source("prefill"));
  auto b = registry.add(source("decode"));
  EXPECT_EQ(registry.render(),
            "# HELP z Z.\n# TYPE z gauge\nz{role=\"prefill\"} 1\nz{role=\"decode\"} 1\n");
  a.reset();
  EXPECT_EQ(registry.render(), "# HELP z Z.\n# TYPE z gauge\nz{role=\"decode\"} 1\n");
  EXPECT_EQ(registry.size(), 1u);
}

}  // namespace
}  // namespace pdkv::kv
