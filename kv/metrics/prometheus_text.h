// PrometheusText: builds one exposition (text format 0.0.4) from several sources, so one
// endpoint can serve every KV manager of a process: each source adds its samples to
// families by name, and a family declared by several sources is written once, with one
// # HELP and # TYPE line and all their samples together (the format requires a family's
// samples to be contiguous).
//
// Conventions it enforces or helps with: counter families are named ..._total (checked
// in debug builds by the test), label values are escaped (backslash, quote, newline),
// help text is escaped (backslash, newline).
//
// Thread safety: none; build one per scrape on one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kv/metrics/histogram.h"

namespace pdkv::kv {

using MetricLabels = std::vector<std::pair<std::string_view, std::string>>;

enum class MetricType : uint8_t { kCounter, kGauge, kHistogram };

class PrometheusText {
 public:
  // Declares a family; declaring it again (another source) keeps the first help text.
  void declare(std::string_view name, MetricType type, std::string_view help);
  // One sample of a declared counter or gauge family.
  void sample(std::string_view family, const MetricLabels& labels, double value);
  // Every bucket, _sum and _count of one histogram series.
  void histogram(std::string_view family, const MetricLabels& labels,
                 const Histogram::Snapshot& snapshot);

  std::string str() const;

  // `value` with backslash, double quote and newline escaped (label values).
  static std::string escape_label_value(std::string_view value);

 private:
  struct Family {
    std::string name;
    MetricType type;
    std::string help;
    std::string samples;
  };
  Family& family(std::string_view name);
  static void append_series(std::string& out, std::string_view name, const MetricLabels& labels,
                            std::string_view extra_name = {}, std::string_view extra_value = {});

  std::vector<Family> families_;  // in declaration order
};

}  // namespace pdkv::kv
