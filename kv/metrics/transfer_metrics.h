// TransferMetrics: what a KV manager reports about its rooms (the reference had one
// latency hook and a stub collector), in
// Prometheus conventions (base units, _total counters, role / cause / stage as labels):
// rooms ended by outcome, failures by cause, bytes and blocks written, queued chunks, and
// per-room histograms: the time each room spent in each stage (RoomStage) and its size
// in bytes and blocks. render() writes them into a PrometheusText under the labels the
// manager gives (role, rank), so one endpoint can serve every manager of a process.
//
// Cost: every update is a few relaxed atomic adds on fixed arrays; nothing locks or
// allocates, so the data path may update per batch and per room (never per page).
//
// Thread safety: every method may be called from any thread. A snapshot is not one
// instant, but every counter and bucket is monotonic.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "kv/metrics/histogram.h"
#include "kv/metrics/prometheus_text.h"
#include "kv/room/failure_cause.h"

namespace pdkv::kv {

// Where a room's time went (label `stage` of pdkv_room_stage_seconds).
enum class RoomStage : uint8_t {
  // Prefill: a chunk handed to the data path until its planning starts (summed over the
  // room's chunks; includes waiting for window room on the decode's link).
  kQueueWait,
  // Prefill: resolving pages and building block lists (summed over the room's chunks).
  kPlanning,
  // Prefill: first batch carrying the room's bytes submitted until the last one
  // acknowledged by the decode's engine.
  kWire,
  // Prefill: every byte acknowledged until the Success statuses are handed to the
  // control channel (includes waiting for the first token, wait_for_prefill_metadata).
  kStatusDelivery,
  // Prefill: send() of the room's last chunk until Success. Decode: KVReceiver created
  // until Success (every byte in this rank's memory).
  kEndToEnd,
};
inline constexpr size_t kRoomStages = 5;
std::string_view to_string(RoomStage stage);

struct TransferMetricsSnapshot {
  uint64_t rooms_succeeded = 0;
  uint64_t rooms_failed = 0;
  uint64_t bytes_written = 0;
  uint64_t blocks_written = 0;
  // Success statuses that rode a room's last data batch (prefill: sent so; decode:
  // received so) instead of a ZeroMQ message after the acknowledgement.
  uint64_t statuses_in_band = 0;
  // Causes that occurred, keyed by to_string(FailureCause) (the metric label).
  std::map<std::string, uint64_t> failures_by_cause;
  int64_t queued_chunks = 0;
  std::array<Histogram::Snapshot, kRoomStages> stages;
  Histogram::Snapshot room_bytes, room_blocks;
};

class TransferMetrics {
 public:
  TransferMetrics();
  TransferMetrics(const TransferMetrics&) = delete;
  TransferMetrics& operator=(const TransferMetrics&) = delete;

  void room_succeeded() { succeeded_.fetch_add(1, std::memory_order_relaxed); }
  void status_in_band() { in_band_.fetch_add(1, std::memory_order_relaxed); }
  // Counted under the cause's stable label (to_string(FailureCause)).
  void room_failed(FailureCause cause);
  // A batch the decode acknowledged.
  void wrote(uint64_t bytes, uint64_t blocks) {
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    blocks_.fetch_add(blocks, std::memory_order_relaxed);
  }
  void queue_depth_delta(int64_t delta) { queued_.fetch_add(delta, std::memory_order_relaxed); }
  // One room's time in `stage` (negative durations count as 0).
  void observe(RoomStage stage, std::chrono::nanoseconds duration);
  // One transferred room's size.
  void observe_room_size(uint64_t bytes, uint64_t blocks);

  TransferMetricsSnapshot snapshot() const;

  // Adds this manager's families to `out`, each sample labelled with `labels` (e.g.
  // role="prefill", rank="0"). `sender`: the prefill families (bytes written, queued
  // chunks, room sizes) are included.
  void render(PrometheusText& out, const MetricLabels& labels, bool sender) const;

 private:
  std::atomic<uint64_t> succeeded_{0}, bytes_{0}, blocks_{0}, in_band_{0};
  std::atomic<int64_t> queued_{0};
  std::array<std::atomic<uint64_t>, kMaxFailureCause + 1> causes_{};
  std::array<Histogram, kRoomStages> stages_;
  Histogram room_bytes_, room_blocks_;
};

}  // namespace pdkv::kv
