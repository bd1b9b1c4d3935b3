#include "kv/runtime/rank_manager.h"

#include <algorithm>

#include "common/logging.h"
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
  render_peer_paths(out, role_, engine_rank_, peer_paths());
}

std::vector<engine::PeerPath> RankManager::peer_paths() const {
  return engine_ ? engine_->peer_paths() : std::vector<engine::PeerPath>{};
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
