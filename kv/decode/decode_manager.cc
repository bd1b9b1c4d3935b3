// DecodeManager: creation, start-up, shutdown and its room count. The other jobs of the
// class each have their own file in this folder (decode_manager.h lists them).
#include "kv/decode/decode_manager.h"

#include <utility>

#include "common/logging.h"
#include "kv/decode/room_grant.h"
#include "kv/runtime/manager_common.h"
#include "kv/runtime/manager_runtime.h"

namespace pdkv::kv {

DecodeManager::DecodeManager(DecodeManagerConfig config, std::shared_ptr<RouteDirectory> directory)
    : RankManager(proto::Role::kDecode, config.args.engine_rank),
      config_(std::move(config)),
      directory_(std::move(directory)),
      breakers_(BreakerPolicy{config_.options.route_breaker_failures,
                              config_.options.route_breaker_backoff}) {}

Result<std::unique_ptr<DecodeManager>> DecodeManager::create(
    DecodeManagerConfig config, const ControlChannelFactory& channels,
    std::shared_ptr<RouteDirectory> directory) {
  return ManagerCreation::create<DecodeManager>(std::move(config), channels, std::move(directory),
                                                "decode");
}

Status DecodeManager::start(const ControlChannelFactory& channels) {
  const KvArgs& a = config_.args;
  // Peers write only into what a room granted (room_grant.h), under its grant's id.
  PDKV_ASSIGN_OR_RETURN(engine_, start_rank_engine(config_.engine, config_.options, a,
                                                   engine::MemoryAccess::kPeerWritable));
  grant_buffers_ = std::make_unique<const RankGrantBuffers>(a);
  for (const engine::Region& r : rank_regions(a)) {
    PDKV_RETURN_IF_ERROR(registered_.add(r.addr, r.length));
  }
  ChannelCallbacks handlers;
  handlers.on_message = [this](proto::Message m) { on_message(std::move(m)); };
  handlers.on_peer_gone = [this](const std::string& endpoint) { on_peer_gone(endpoint); };
  handlers.on_peer_refused = [this](const std::string& endpoint) { on_peer_refused(endpoint); };
  PDKV_RETURN_IF_ERROR(open_control_channel(channels, config_.engine.host, a, std::move(handlers)));
  // A prefill's Success status may ride the room's last batch (prefill_transfer.cc): the
  // engine hands it over once every byte of that batch landed here.
  engine_->set_note_handler([this](std::span<const uint8_t> note) { on_note(note); });
  route_subscription_ =
      directory_->subscribe([this](const RouteChange& change) { on_route_change(change); });
  timer_ = std::thread([this] { timer_loop(); });
  PDKV_LOG_INFO("decode rank {} ready: control {} engine {}", a.engine_rank, channel_->endpoint(),
                engine_->endpoint());
  return Status();
}

DecodeManager::~DecodeManager() { shutdown(); }

void DecodeManager::shutdown() {
  if (!runtime_.begin_stop()) return;  // wakes the timer too
  route_subscription_.reset();         // waits for a route change being handled
  metrics_registration_.reset();       // waits for a scrape that is reading this manager
  // Lookups in flight return at once (a lane would otherwise sleep towards its room's
  // bootstrap deadline); each lane then sees the stop and returns. No lane starts after
  // begin_stop().
  stop_lookups_.fire();
  std::vector<std::thread> lanes;
  {
    // Under one lock with the lanes' own hand-over (lane_loop), so none is missed.
    MutexLock lock(mu_);
    lanes.swap(finished_lanes_);
    for (auto& [addr, lane] : lanes_) {
      if (lane.worker.joinable()) lanes.push_back(std::move(lane.worker));
    }
  }
  for (std::thread& t : lanes) t.join();
  if (timer_.joinable()) timer_.join();
  // As on the prefill: tell the prefill ranks while the channel still runs. No note
  // handler runs after the channel stopped (it may send through the channel).
  stop_control_channel(
      channel_, [this] { fail_open_rooms(); },
      [this] {
        if (engine_) engine_->set_note_handler({});
      });
  engine_.reset();
}

size_t DecodeManager::rooms_in_tables() const {
  MutexLock lock(mu_);
  return rooms_.size();
}

}  // namespace pdkv::kv
