#include "kv/runtime/rank_manager.h"

#include <algorithm>

#include "common/logging.h"
#include "engine/device/device_health.h"
#include "kv/runtime/manager_common.h"

namespace pdkv::kv {

size_t RankManager::active_rooms() const {
  const size_t on_board = board_.size();
  return std::max(on_board, rooms_in_tables());
}

std::string RankManager::metrics_text() const {
  PrometheusText out;
  render_metrics(out);
  return out.str();
}

void RankManager::render_metrics(PrometheusText& out) const {
  render_rank_metrics(out, metrics_, role_, engine_rank_, active_rooms());
  // Per rank, so one process's ranks show it alike; 0 means restart the process.
  out.declare("pdkv_device_healthy", MetricType::kGauge,
              "1 while this process's CUDA device path works; 0 after a sticky driver error "
              "(an illegal address, a launch failure) failed its context for good");
  out.sample("pdkv_device_healthy",
             {{"role", role_ == proto::Role::kPrefill ? "prefill" : "decode"},
              {"rank", std::to_string(engine_rank_)}},
             engine::device_healthy() ? 1.0 : 0.0);
}

Status RankManager::device_fault_for_rooms() const {
  if (engine::device_healthy() || engine_ == nullptr || engine_->device_regions().empty()) {
    return Status();
  }
  return engine::device_fault();
}

Status RankManager::open_control_channel(const ControlChannelFactory& channels,
                                         const std::string& host, const KvArgs& args,
                                         ChannelCallbacks handlers) {
  PDKV_ASSIGN_OR_RETURN(channel_, channels(host, runtime_.gated(std::move(handlers))));
  identity_ = make_rank_identity(role_, args, channel_->endpoint(), engine_->endpoint());
  runtime_.mark_started();
  return Status();
}

proto::Ping RankManager::probe(PeerLiveness& liveness) const {
  proto::Ping ping;
  ping.sender = identity_;
  ping.seq = liveness.next_probe();
  return ping;
}

proto::Pong RankManager::pong_to(const proto::Ping& ping) const {
  proto::Pong pong;
  pong.sender = identity_;
  pong.seq = ping.seq;
  return pong;
}

void RankManager::answer_ping(const proto::Ping& ping) {
  Status sent = channel_->send(ping.sender.control_endpoint, pong_to(ping));
  if (!sent.ok())
    PDKV_LOG_DEBUG("pong to {} not sent: {}", ping.sender.control_endpoint, sent.to_string());
}

}  // namespace pdkv::kv
