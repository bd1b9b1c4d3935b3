// PrefillManager: creation, start-up, shutdown, layer steps and its room count. The other jobs
// of the class each have their own file in this folder (prefill_manager.h lists them).
#include "kv/prefill/prefill_manager.h"

#include <algorithm>
#include <utility>

#include "common/logging.h"
#include "kv/runtime/manager_runtime.h"

namespace pdkv::kv {

PrefillManager::PrefillManager(PrefillManagerConfig config,
                               std::shared_ptr<RouteDirectory> directory)
    : RankManager(proto::Role::kPrefill, config.args.engine_rank),
      config_(std::move(config)),
      directory_(std::move(directory)),
      failed_peers_(config_.options.failed_peer_ttl, config_.options.failed_peer_first_cooldown),
      pending_(
          PendingRoomLimits{static_cast<size_t>(config_.options.max_pending_rooms),
                            static_cast<size_t>(config_.options.max_pending_rooms_per_decode),
                            static_cast<uint64_t>(config_.options.max_pending_bytes_per_decode)}) {}

Result<std::unique_ptr<PrefillManager>> PrefillManager::create(
    PrefillManagerConfig config, const ControlChannelFactory& channels,
    std::shared_ptr<RouteDirectory> directory) {
  return ManagerCreation::create<PrefillManager>(std::move(config), channels, std::move(directory),
                                                 "prefill");
}

Status PrefillManager::start(const ControlChannelFactory& channels) {
  const KvArgs& a = config_.args;
  // A prefill only sends: its engine admits no write from anyone (no grants, ever), and
  // its KV pool is registered for reading only.
  PDKV_ASSIGN_OR_RETURN(engine_, start_rank_engine(config_.engine, config_.options, a,
                                                   engine::MemoryAccess::kLocalReadOnly));

  PipelineOptions po;
  po.window_bytes = config_.options.transfer_window_bytes;
  po.batch_bytes = config_.options.transfer_batch_bytes;
  po.transfer_attempts = config_.options.transfer_attempts;
  po.layer_num = a.layer_num();
  po.layerwise_interval = std::max<int64_t>(config_.layerwise_interval, 1);
  po.mla_l1_5 = config_.enable_mla_l1_5_cache;
  TransferPipeline::Hooks hooks;
  hooks.on_transferred = [this](const std::vector<TransferredRoom>& rooms) {
    on_rooms_transferred(rooms);
  };
  // With checksums on, a status carries the sum of the bytes sent, decided after they were
  // acknowledged: it cannot ride a batch, so the pipeline never asks.
  if (config_.options.status_in_band && !config_.options.verify_checksum) {
    hooks.status_note = [this](uint64_t room, const std::string& key) {
      return success_for_note(room, key);
    };
  }
  hooks.on_failed = [this](uint64_t room, FailureCause cause, const std::string& reason) {
    fail_room(room, cause, reason);
  };
  pipeline_ = std::make_unique<TransferPipeline>(*engine_, po, failed_peers_, metrics_, steps_,
                                                 std::move(hooks));

  ChannelCallbacks handlers;
  handlers.on_message = [this](proto::Message m) { on_message(std::move(m)); };
  handlers.on_peer_gone = [this](const std::string& endpoint) { on_peer_gone(endpoint); };
  PDKV_RETURN_IF_ERROR(open_control_channel(channels, config_.engine.host, a, std::move(handlers)));
  timer_ = std::thread([this] { timer_loop(); });

  PrefillRankInfo info;
  info.engine_rank = a.engine_rank;
  info.tp_size = a.tp_size;
  info.dp_size = a.dp_size;
  info.control_endpoint = channel_->endpoint();
  info.enable_mla_l1_5_cache = config_.enable_mla_l1_5_cache;
  info.layout = a.layout();
  info.kv_item_lens = a.kv_item_lens;
  info.state_item_lens = a.state_item_lens;
  PDKV_RETURN_IF_ERROR(
      directory_
          ->register_prefill_rank(config_.bootstrap_addr, info,
                                  now() + config_.options.bootstrap_timeout)
          .with_context("registering with the bootstrap server at " + config_.bootstrap_addr));
  rank_info_ = std::move(info);
  if (config_.options.bootstrap_refresh.count() > 0)
    bootstrap_refresher_ = std::thread([this] { bootstrap_refresh_loop(); });
  PDKV_LOG_INFO("prefill rank {} ready: control {} engine {}", a.engine_rank, channel_->endpoint(),
                engine_->endpoint());
  return Status();
}

PrefillManager::~PrefillManager() { shutdown(); }

void PrefillManager::shutdown() {
  if (!runtime_.begin_stop()) return;  // wakes the timer and the refresher too
  metrics_registration_.reset();       // waits for a scrape that is reading this manager
  // A KVSender::send running a pass on its own thread (run_pipeline_here) ends first.
  for (int n = inline_passes_.load(); n != 0; n = inline_passes_.load()) inline_passes_.wait(n);
  // The pipeline and the timer send through the channel, so they stop first; the
  // channel's receive thread (handlers) stops with the channel.
  if (pipeline_) pipeline_->stop();
  if (timer_.joinable()) timer_.join();
  if (bootstrap_refresher_.joinable()) bootstrap_refresher_.join();
  // Withdraw the route first, so decodes stop choosing this rank for new rooms.
  if (!rank_info_.control_endpoint.empty()) {
    Status withdrawn = directory_->unregister_prefill_rank(config_.bootstrap_addr, rank_info_,
                                                           now() + std::chrono::seconds(1));
    if (!withdrawn.ok())
      PDKV_LOG_WARN("prefill rank {}: route not withdrawn: {}", identity_.engine_rank,
                    withdrawn.to_string());
  }
  // Rooms still open fail while the channel can still tell their decodes; a room a
  // handler opens meanwhile fails after the channel stopped, unannounced.
  stop_control_channel(channel_, [this] { fail_open_rooms(); });
  // The engine completes the batches still in flight into the pipeline's callbacks, so it
  // goes before the pipeline.
  engine_.reset();
  pipeline_.reset();
}

void PrefillManager::fail_rooms_on_device_fault() {
  const Status fault = device_fault_for_rooms();
  if (fault.ok()) return;
  std::vector<uint64_t> open;
  {
    MutexLock lock(mu_);
    for (const auto& [room, r] : rooms_) open.push_back(room);
  }
  for (uint64_t room : open) {
    fail_room(room, FailureCause::kDeviceFault,
              "this prefill's device memory cannot be read any more: " + fault.message());
  }
}

void PrefillManager::fail_open_rooms() {
  std::vector<uint64_t> open;
  {
    MutexLock lock(mu_);
    for (const auto& [room, r] : rooms_) open.push_back(room);
  }
  for (uint64_t room : open)
    fail_room(room, FailureCause::kShutdown, "the prefill manager shut down");
}

int64_t PrefillManager::reserve_layerwise_cache_steps() {
  return steps_.reserve(config_.args.layer_num());
}

void PrefillManager::mark_layers_ready(int64_t layers) {
  steps_.mark_ready(layers);
  if (pipeline_) pipeline_->steps_advanced();
}

size_t PrefillManager::rooms_in_tables() const {
  MutexLock lock(mu_);
  return rooms_.size();
}

}  // namespace pdkv::kv
