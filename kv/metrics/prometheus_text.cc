#include "kv/metrics/prometheus_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace pdkv::kv {
namespace {

std::string_view type_name(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

// Shortest text that reads back as the same double; integers without a fraction.
std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return fmt::format("{}", v);
}

// Backslash and newline escaped, as in a HELP line; `escape_quote` also escapes '"' (a
// label value is quoted, a HELP text is not).
std::string escape(std::string_view text, bool escape_quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"' && escape_quote) {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string PrometheusText::escape_label_value(std::string_view value) {
  return escape(value, /*escape_quote=*/true);
}

PrometheusText::Family& PrometheusText::family(std::string_view name) {
  auto it = std::find_if(families_.begin(), families_.end(),
                         [&](const Family& f) { return f.name == name; });
  if (it != families_.end()) return *it;
  // Not declared: an untyped family (a programming error the exposition test catches).
  families_.push_back(Family{std::string(name), MetricType::kGauge, "(undeclared)", ""});
  return families_.back();
}

void PrometheusText::declare(std::string_view name, MetricType type, std::string_view help) {
  auto it = std::find_if(families_.begin(), families_.end(),
                         [&](const Family& f) { return f.name == name; });
  if (it == families_.end())
    families_.push_back(Family{std::string(name), type, std::string(help), ""});
}

void PrometheusText::append_series(std::string& out, std::string_view name,
                                   const MetricLabels& labels, std::string_view extra_name,
                                   std::string_view extra_value) {
  out += name;
  if (labels.empty() && extra_name.empty()) return;
  out += '{';
  bool first = true;
  for (const auto& [key, value] : labels) {
    if (!first) out += ',';
    first = false;
    out += key;
    out += "=\"";
    out += escape_label_value(value);
    out += '"';
  }
  if (!extra_name.empty()) {
    if (!first) out += ',';
    out += extra_name;
    out += "=\"";
    out += extra_value;
    out += '"';
  }
  out += '}';
}

void PrometheusText::sample(std::string_view name, const MetricLabels& labels, double value) {
  std::string& out = family(name).samples;
  append_series(out, name, labels);
  out += ' ';
  out += number(value);
  out += '\n';
}

void PrometheusText::histogram(std::string_view name, const MetricLabels& labels,
                               const Histogram::Snapshot& s) {
  std::string& out = family(name).samples;
  const std::string bucket = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < s.bounds.size(); ++i) {
    cumulative += s.counts[i];
    append_series(out, bucket, labels, "le",
                  number(static_cast<double>(s.bounds[i]) / s.raw_per_unit));
    out += ' ' + std::to_string(cumulative) + '\n';
  }
  append_series(out, bucket, labels, "le", "+Inf");
  out += ' ' + std::to_string(s.count) + '\n';
  append_series(out, std::string(name) + "_sum", labels);
  out += ' ' + number(static_cast<double>(s.sum) / s.raw_per_unit) + '\n';
  append_series(out, std::string(name) + "_count", labels);
  out += ' ' + std::to_string(s.count) + '\n';
}

std::string PrometheusText::str() const {
  std::string out;
  for (const Family& f : families_) {
    out += "# HELP " + f.name + ' ' + escape(f.help, /*escape_quote=*/false) + '\n';
    out += "# TYPE " + f.name + ' ' + std::string(type_name(f.type)) + '\n';
    out += f.samples;
  }
  return out;
}

}  // namespace pdkv::kv
