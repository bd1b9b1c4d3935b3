// RankManager: what a prefill and a decode manager of one rank both hold and show.
//
// Both keep every room's lifecycle on a RoomStatusBoard, count transfers in
// TransferMetrics, run a transfer engine and a control channel under a ManagerRuntime
// (start and stop), open that channel the same way (open_control_channel), probe their
// peers and answer their probes the same way (probe, pong_to, answer_ping), and answer the
// same questions from outside: how many rooms they still hold, their metrics (alone, or
// into the process's exposition), their two endpoints. The managers derive from it
// (PrefillManager, DecodeManager) and keep everything else, including their own room
// tables, which rooms_in_tables() counts.
//
// Thread safety: the public methods may be called from any thread once the manager was
// created (ManagerCreation::create); the board, the metrics and the runtime are each
// thread-safe, and the engine and channel are set in start() and released in shutdown().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "engine/transfer_engine.h"
#include "kv/control/control_channel.h"
#include "kv/control/peer_liveness.h"
#include "kv/kv_args.h"
#include "kv/metrics/metrics_registry.h"
#include "kv/metrics/prometheus_text.h"
#include "kv/metrics/transfer_metrics.h"
#include "kv/room/room_status_board.h"
#include "kv/runtime/manager_runtime.h"
#include "proto/messages.h"

namespace pdkv::kv {

class RankManager {
 public:
  virtual ~RankManager() = default;
  RankManager(const RankManager&) = delete;
  RankManager& operator=(const RankManager&) = delete;

  // Rooms held in any table (0 once every room ended): the larger of the board's count and
  // the manager's own table's, since a room can be in one only (a prefill holds a decode's
  // pre-allocation before the room's KVSender puts it on the board).
  size_t active_rooms() const;
  TransferMetricsSnapshot metrics() const { return metrics_.snapshot(); }
  // Prometheus text of this rank's metrics alone (labelled role, rank); the process's
  // endpoint serves every manager's (MetricsRegistry::process()).
  std::string metrics_text() const;
  void render_metrics(PrometheusText& out) const;
  const std::string& control_endpoint() const { return channel_->endpoint(); }
  const std::string& engine_endpoint() const { return engine_->endpoint(); }

 protected:
  RankManager(proto::Role role, int64_t engine_rank) : role_(role), engine_rank_(engine_rank) {}

  // The rooms in the manager's own table (it takes its own lock).
  virtual size_t rooms_in_tables() const = 0;

  // start()'s control-plane step, after the engine started: opens the control channel on
  // `host` with `handlers` (each run only from now on: ManagerRuntime::gated), sets this
  // rank's identity from `args` and the two endpoints, and marks the manager started.
  Status open_control_channel(const ControlChannelFactory& channels, const std::string& host,
                              const KvArgs& args, ChannelCallbacks handlers);

  // This rank's next probe of a peer; it counts as unanswered until the peer is heard.
  proto::Ping probe(PeerLiveness& liveness) const;
  // This rank's Pong to `ping`.
  proto::Pong pong_to(const proto::Ping& ping) const;
  // The process's device fault when this rank's engine holds device memory (its rooms all
  // need the device path, which a sticky driver error ended for good), else OK: the
  // managers' timers fail every room with it (FailureCause::kDeviceFault) on each tick.
  Status device_fault_for_rooms() const;
  // Answers a peer's Ping on the control channel (a lost Pong is only logged: the peer
  // probes again).
  void answer_ping(const proto::Ping& ping);

  // Set in start() (ManagerCreation::create), released in shutdown().
  std::unique_ptr<engine::TransferEngine> engine_;
  std::unique_ptr<ControlChannel> channel_;
  proto::RankIdentity identity_;  // set in start(), once the channel's endpoint is known

  RoomStatusBoard board_;
  TransferMetrics metrics_;
  // In MetricsRegistry::process() from create() until shutdown() (its first step).
  std::unique_ptr<MetricsRegistry::Registration> metrics_registration_;
  // Start and stop: the handlers' gate, the stop signal, the manager threads' sleep.
  ManagerRuntime runtime_;

 private:
  const proto::Role role_;
  const int64_t engine_rank_;
};

}  // namespace pdkv::kv
