#include "kv/transfer_metrics.h"

#include <sstream>

namespace pdkv::kv {

void TransferMetrics::room_succeeded(double latency_ms) {
  succeeded_.fetch_add(1, std::memory_order_relaxed);
  MutexLock lock(mu_);
  for (size_t i = 0; i < kLatencyBucketsMs.size(); ++i) {
    if (latency_ms <= kLatencyBucketsMs[i]) ++buckets_[i];
  }
  ++latency_count_;
  latency_sum_ms_ += latency_ms;
}

void TransferMetrics::room_failed(FailureCause cause) {
  failed_.fetch_add(1, std::memory_order_relaxed);
  MutexLock lock(mu_);
  ++causes_[std::string(to_string(cause))];
}

void TransferMetrics::wrote(uint64_t bytes, uint64_t blocks) {
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
  blocks_.fetch_add(blocks, std::memory_order_relaxed);
}

TransferMetricsSnapshot TransferMetrics::snapshot() const {
  TransferMetricsSnapshot s;
  s.rooms_succeeded = succeeded_.load(std::memory_order_relaxed);
  s.rooms_failed = failed_.load(std::memory_order_relaxed);
  s.bytes_written = bytes_.load(std::memory_order_relaxed);
  s.blocks_written = blocks_.load(std::memory_order_relaxed);
  s.queued_chunks = queued_.load(std::memory_order_relaxed);
  MutexLock lock(mu_);
  s.failures_by_cause = causes_;
  s.latency_buckets = buckets_;
  s.latency_count = latency_count_;
  s.latency_sum_ms = latency_sum_ms_;
  return s;
}

std::string TransferMetrics::to_prometheus(const std::string& prefix,
                                           const std::string& labels) const {
  const TransferMetricsSnapshot s = snapshot();
  const std::string l = labels.empty() ? "" : "{" + labels + "}";
  auto with = [&](const std::string& extra) {
    return "{" + (labels.empty() ? extra : labels + "," + extra) + "}";
  };
  std::ostringstream out;
  out << "# TYPE " << prefix << "_rooms_total counter\n";
  out << prefix << "_rooms_total" << with("outcome=\"success\"") << ' ' << s.rooms_succeeded
      << '\n';
  out << prefix << "_rooms_total" << with("outcome=\"failed\"") << ' ' << s.rooms_failed << '\n';
  out << "# TYPE " << prefix << "_failures_total counter\n";
  for (const auto& [cause, count] : s.failures_by_cause) {
    out << prefix << "_failures_total" << with("cause=\"" + cause + "\"") << ' ' << count << '\n';
  }
  out << "# TYPE " << prefix << "_bytes_written_total counter\n";
  out << prefix << "_bytes_written_total" << l << ' ' << s.bytes_written << '\n';
  out << "# TYPE " << prefix << "_blocks_written_total counter\n";
  out << prefix << "_blocks_written_total" << l << ' ' << s.blocks_written << '\n';
  out << "# TYPE " << prefix << "_queued_chunks gauge\n";
  out << prefix << "_queued_chunks" << l << ' ' << s.queued_chunks << '\n';
  out << "# TYPE " << prefix << "_transfer_latency_ms histogram\n";
  for (size_t i = 0; i < kLatencyBucketsMs.size(); ++i) {
    std::ostringstream le;
    le << kLatencyBucketsMs[i];
    out << prefix << "_transfer_latency_ms_bucket" << with("le=\"" + le.str() + "\"") << ' '
        << s.latency_buckets[i] << '\n';
  }
  out << prefix << "_transfer_latency_ms_bucket" << with("le=\"+Inf\"") << ' ' << s.latency_count
      << '\n';
  out << prefix << "_transfer_latency_ms_sum" << l << ' ' << s.latency_sum_ms << '\n';
  out << prefix << "_transfer_latency_ms_count" << l << ' ' << s.latency_count << '\n';
  return out.str();
}

}  // namespace pdkv::kv
