#include "kv/metrics/transfer_metrics.h"

namespace pdkv::kv {
namespace {

constexpr uint64_t kUs = 1000, kMs = 1000 * kUs, kS = 1000 * kMs;
// 100 µs .. 60 s: a loopback room of a few pages takes well under a millisecond, a
// cross-host room of gigabytes seconds, timeouts fire at tens of seconds.
constexpr std::array<uint64_t, 18> kSecondsBounds = {
    100 * kUs, 250 * kUs, 500 * kUs, 1 * kMs, 2500 * kUs, 5 * kMs, 10 * kMs, 25 * kMs, 50 * kMs,
    100 * kMs, 250 * kMs, 500 * kMs, 1 * kS,  2500 * kMs, 5 * kS,  10 * kS,  30 * kS,  60 * kS};
constexpr uint64_t kKiB = 1024, kMiB = 1024 * kKiB, kGiB = 1024 * kMiB;
constexpr std::array<uint64_t, 12> kBytesBounds = {4 * kKiB,   16 * kKiB, 64 * kKiB, 256 * kKiB,
                                                   1 * kMiB,   4 * kMiB,  16 * kMiB, 64 * kMiB,
                                                   256 * kMiB, 1 * kGiB,  4 * kGiB,  16 * kGiB};
constexpr std::array<uint64_t, 11> kBlocksBounds = {1,    4,     16,    64,     256,    1024,
                                                    4096, 16384, 65536, 262144, 1048576};
static_assert(kSecondsBounds.size() <= Histogram::kMaxBuckets);

MetricLabels with(const MetricLabels& labels, std::string_view key, std::string value) {
  MetricLabels out = labels;
  out.emplace_back(key, std::move(value));
  return out;
}

}  // namespace

std::string_view to_string(RoomStage stage) {
  switch (stage) {
    case RoomStage::kQueueWait: return "queue_wait";
    case RoomStage::kPlanning: return "planning";
    case RoomStage::kWire: return "wire";
    case RoomStage::kStatusDelivery: return "status_delivery";
    case RoomStage::kEndToEnd: return "end_to_end";
  }
  return "unknown";
}

TransferMetrics::TransferMetrics()
    : stages_{Histogram(kSecondsBounds, 1e9), Histogram(kSecondsBounds, 1e9),
              Histogram(kSecondsBounds, 1e9), Histogram(kSecondsBounds, 1e9),
              Histogram(kSecondsBounds, 1e9)},
      room_bytes_(kBytesBounds, 1),
      room_blocks_(kBlocksBounds, 1) {}

void TransferMetrics::room_failed(FailureCause cause) {
  const auto i = static_cast<size_t>(cause);
  causes_[i < causes_.size() ? i : 0].fetch_add(1, std::memory_order_relaxed);
}

void TransferMetrics::observe(RoomStage stage, std::chrono::nanoseconds duration) {
  stages_[static_cast<size_t>(stage)].observe(
      duration.count() > 0 ? static_cast<uint64_t>(duration.count()) : 0);
}

void TransferMetrics::observe_room_size(uint64_t bytes, uint64_t blocks) {
  room_bytes_.observe(bytes);
  room_blocks_.observe(blocks);
}

TransferMetricsSnapshot TransferMetrics::snapshot() const {
  TransferMetricsSnapshot s;
  s.rooms_succeeded = succeeded_.load(std::memory_order_relaxed);
  s.bytes_written = bytes_.load(std::memory_order_relaxed);
  s.blocks_written = blocks_.load(std::memory_order_relaxed);
  s.statuses_in_band = in_band_.load(std::memory_order_relaxed);
  s.queued_chunks = queued_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < causes_.size(); ++i) {
    const uint64_t n = causes_[i].load(std::memory_order_relaxed);
    s.rooms_failed += n;
    if (n != 0) s.failures_by_cause[std::string(to_string(static_cast<FailureCause>(i)))] = n;
  }
  for (size_t i = 0; i < kRoomStages; ++i) s.stages[i] = stages_[i].snapshot();
  s.room_bytes = room_bytes_.snapshot();
  s.room_blocks = room_blocks_.snapshot();
  return s;
}

void TransferMetrics::render(PrometheusText& out, const MetricLabels& labels, bool sender) const {
  const TransferMetricsSnapshot s = snapshot();
  out.declare("pdkv_rooms_total", MetricType::kCounter, "Rooms ended, by outcome.");
  out.sample("pdkv_rooms_total", with(labels, "outcome", "success"),
             static_cast<double>(s.rooms_succeeded));
  out.sample("pdkv_rooms_total", with(labels, "outcome", "failed"),
             static_cast<double>(s.rooms_failed));
  out.declare("pdkv_room_failures_total", MetricType::kCounter,
              "Rooms failed, by cause (docs/ARCHITECTURE.md: kv/room/failure_cause.h).");
  for (size_t i = 0; i < causes_.size(); ++i) {
    const auto cause = static_cast<FailureCause>(i);
    out.sample("pdkv_room_failures_total", with(labels, "cause", std::string(to_string(cause))),
               static_cast<double>(causes_[i].load(std::memory_order_relaxed)));
  }
  out.declare("pdkv_statuses_in_band_total", MetricType::kCounter,
              "Success statuses that rode the room's last data batch (prefill: sent so; "
              "decode: received so) instead of a ZeroMQ message after the acknowledgement.");
  out.sample("pdkv_statuses_in_band_total", labels, static_cast<double>(s.statuses_in_band));
  out.declare("pdkv_room_stage_seconds", MetricType::kHistogram,
              "Time a room spent in each stage (queue_wait, planning, wire, status_delivery: "
              "prefill; end_to_end: both roles).");
  for (size_t i = 0; i < kRoomStages; ++i) {
    const auto stage = static_cast<RoomStage>(i);
    if (!sender && stage != RoomStage::kEndToEnd) continue;
    out.histogram("pdkv_room_stage_seconds", with(labels, "stage", std::string(to_string(stage))),
                  s.stages[i]);
  }
  if (!sender) return;
  out.declare("pdkv_written_bytes_total", MetricType::kCounter,
              "KV bytes written to decode ranks and acknowledged by them.");
  out.sample("pdkv_written_bytes_total", labels, static_cast<double>(s.bytes_written));
  out.declare("pdkv_written_blocks_total", MetricType::kCounter,
              "Contiguous blocks written to decode ranks and acknowledged by them.");
  out.sample("pdkv_written_blocks_total", labels, static_cast<double>(s.blocks_written));
  out.declare("pdkv_queued_chunks", MetricType::kGauge,
              "Chunks handed to the data path and not planned yet.");
  out.sample("pdkv_queued_chunks", labels, static_cast<double>(s.queued_chunks));
  out.declare("pdkv_room_bytes", MetricType::kHistogram, "Bytes written per transferred room.");
  out.histogram("pdkv_room_bytes", labels, s.room_bytes);
  out.declare("pdkv_room_blocks", MetricType::kHistogram, "Blocks written per transferred room.");
  out.histogram("pdkv_room_blocks", labels, s.room_blocks);
}

}  // namespace pdkv::kv
