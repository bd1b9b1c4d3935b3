// TransferMetrics: what a KV manager reports about its rooms (SPEC §12 item 19): rooms
// ended by outcome, failures by cause, bytes and blocks written, and the latency from a
// room's first chunk to its status being sent, as a cumulative histogram. Rendered in
// the Prometheus text format by to_prometheus().
//
// Thread safety: every method may be called from any thread (relaxed atomics; a
// snapshot is not one instant but every counter is monotonic).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "common/mutex.h"
#include "kv/failure_cause.h"

namespace pdkv::kv {

// Upper bounds of the latency buckets, in milliseconds.
inline constexpr std::array<double, 12> kLatencyBucketsMs = {1,   2,   5,   10,   20,   50,
                                                             100, 200, 500, 1000, 5000, 30000};

struct TransferMetricsSnapshot {
  uint64_t rooms_succeeded = 0;
  uint64_t rooms_failed = 0;
  uint64_t bytes_written = 0;
  uint64_t blocks_written = 0;
  std::map<std::string, uint64_t> failures_by_cause;  // keyed by to_string(FailureCause)
  std::array<uint64_t, kLatencyBucketsMs.size()> latency_buckets{};  // cumulative
  uint64_t latency_count = 0;
  double latency_sum_ms = 0;
  int64_t queued_chunks = 0;
};

class TransferMetrics {
 public:
  void room_succeeded(double latency_ms);
  // Counted under the cause's stable label (to_string(FailureCause)), the metric label.
  void room_failed(FailureCause cause);
  void wrote(uint64_t bytes, uint64_t blocks);
  void queue_depth_delta(int64_t delta) { queued_.fetch_add(delta, std::memory_order_relaxed); }

  TransferMetricsSnapshot snapshot() const;
  // `prefix` e.g. "pdkv_prefill"; `labels` e.g. "rank=\"0\"" (may be empty).
  std::string to_prometheus(const std::string& prefix, const std::string& labels) const;

 private:
  std::atomic<uint64_t> succeeded_{0}, failed_{0}, bytes_{0}, blocks_{0};
  std::atomic<int64_t> queued_{0};
  mutable Mutex mu_;
  std::map<std::string, uint64_t> causes_ PDKV_GUARDED_BY(mu_);
  std::array<uint64_t, kLatencyBucketsMs.size()> buckets_ PDKV_GUARDED_BY(mu_){};
  uint64_t latency_count_ PDKV_GUARDED_BY(mu_) = 0;
  double latency_sum_ms_ PDKV_GUARDED_BY(mu_) = 0;
};

}  // namespace pdkv::kv
