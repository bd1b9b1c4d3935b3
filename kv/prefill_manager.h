// PrefillManager: the prefill side of one rank (SPEC §4, §5.2, §9, §10).
//
// It serves decode ranks' buffer registrations and per-room pre-allocations, takes each
// room's chunks from its KVSender, plans the writes (DestinationPlan over plan/) and
// pushes them through the transfer engine, then reports each room's status to every
// decode rank that pre-allocated it. Improvements over the reference, each tested:
//  * every failure reaches every decode rank of the room, not only the failing one;
//  * bootstrap, waiting and first-token timeouts fire (RoomStatusBoard deadlines);
//  * a decode that stops answering pings fails its rooms (liveness per rank);
//  * a bad pre-allocation fails its room with a reason instead of killing a worker;
//  * a room that ended is removed from every table (active_rooms() drops to 0).
//
// Threads it owns: the control channel's receive thread (message handlers: short, never
// wait on transfers), `transfer_queues` workers (each serves the rooms whose destination
// set hashes to it, so one slow decode stalls only its queue), and a timer thread
// (deadlines, liveness). Every public method is thread-safe and non-blocking except
// shutdown(), which joins the threads (a transfer in flight is bounded by the engine's
// I/O timeout).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "engine/transfer_engine.h"
#include "kv/control_channel.h"
#include "kv/destination_plan.h"
#include "kv/ended_room_log.h"
#include "kv/failed_peer_tracker.h"
#include "kv/kv_args.h"
#include "kv/manager_options.h"
#include "kv/prefill_metadata_store.h"
#include "kv/room_status_board.h"
#include "kv/route_directory.h"
#include "kv/step_counter.h"
#include "kv/transfer_checksum.h"
#include "kv/transfer_metrics.h"

namespace pdkv::kv {

struct PrefillManagerConfig {
  KvArgs args;
  std::string bootstrap_addr;  // "host:port" of the bootstrap server
  bool enable_mla_l1_5_cache = false;
  int64_t layerwise_interval = 0;  // > 0: stream layer groups as the forward marks them
  bool wait_for_prefill_metadata = false;
  engine::EngineOptions engine;
  KvManagerOptions options;
};

// Prefill-side L1.5 ownership of one chunk (copied; see plan::SrcOwnership).
struct ChunkOwnership {
  std::vector<uint8_t> page_transfer_mask;
  std::vector<int64_t> page_local_indices;
};

class PrefillManager {
 public:
  static Result<std::unique_ptr<PrefillManager>> create(PrefillManagerConfig config,
                                                        const ControlChannelFactory& channels,
                                                        std::shared_ptr<RouteDirectory> directory);
  ~PrefillManager();
  PrefillManager(const PrefillManager&) = delete;
  PrefillManager& operator=(const PrefillManager&) = delete;

  // --- KVSender calls -------------------------------------------------------------
  // Starts tracking `room` (Bootstrapping; the bootstrap timeout starts now).
  std::shared_ptr<const RoomHandle> open_room(uint64_t room);
  // The request has num_pages pages in total. InvalidArgument if called twice or < 0.
  Status init_room(uint64_t room, int64_t num_pages, std::optional<int64_t> aux_index);
  // One chunk of prefill page indices; the one that completes num_pages is the last and
  // may carry the state slots. Chunks may arrive before the pre-allocations (they wait).
  Status send_chunk(uint64_t room, std::span<const int64_t> pages,
                    std::span<const int64_t> state_slots,
                    std::optional<ChunkOwnership> ownership = std::nullopt);
  // Fails the room (reason kept) and tells every decode rank that pre-allocated it.
  void abort_room(uint64_t room, const std::string& reason);

  // --- engine hooks ---------------------------------------------------------------
  void set_prefill_metadata(uint64_t room, int64_t bootstrap_token,
                            std::vector<int32_t> spec_candidate_ids);
  int64_t reserve_layerwise_cache_steps();
  void mark_layers_ready(int64_t layers);

  // Rooms held in any table (0 once every room ended).
  size_t active_rooms() const;
  TransferMetricsSnapshot metrics() const { return metrics_.snapshot(); }
  // Prometheus text of this rank's metrics (pdkv_prefill_*, labelled with the rank).
  std::string metrics_text() const;
  const std::string& control_endpoint() const { return channel_->endpoint(); }
  const std::string& engine_endpoint() const { return engine_->endpoint(); }
  const KvArgs& args() const { return config_.args; }

  // Stops every thread; rooms still open fail with "shutdown". Idempotent.
  void shutdown();

 private:
  struct Chunk {
    uint64_t room = 0;
    int64_t first_page = 0;
    std::vector<int64_t> pages;
    std::vector<int64_t> state_slots;
    bool is_last = false;
    std::optional<int64_t> begin_cache_step;
    std::optional<ChunkOwnership> ownership;
  };

  struct DecodePeer {
    proto::BufferRegistration registration;
    Status layout_status;  // why its pre-allocations are refused, if they are
    TimePoint last_seen;
  };

  struct Room {
    bool sender_open = false;
    // A decode aborted the room before its KVSender existed: the sender fails at once
    // with this reason instead of waiting for pre-allocations that will not come.
    std::optional<std::string> aborted_early;
    int64_t num_pages = -1;
    std::optional<int64_t> aux_index;
    int64_t next_page = 0;
    bool last_chunk_sent = false;
    uint32_t required_destinations = 0;
    // Keyed by the decode rank's control endpoint.
    std::map<std::string, std::shared_ptr<const DestinationPlan>> destinations;
    // PDKV_VERIFY_CHECKSUM: what was sent to each destination so far, same keys.
    std::map<std::string, std::shared_ptr<TransferChecksum>> checksums;
    bool bootstrapped = false;
    std::deque<Chunk> waiting_chunks;  // sent before the room was bootstrapped
    int queued_chunks = 0;
    size_t shard = 0;
    TimePoint first_seen;
    TimePoint transfer_start;
    uint64_t bytes_written = 0;
  };

  struct Queue {
    Mutex mu;
    CondVar ready;
    std::deque<Chunk> chunks PDKV_GUARDED_BY(mu);
  };

  PrefillManager(PrefillManagerConfig config, std::shared_ptr<RouteDirectory> directory);
  Status start(const ControlChannelFactory& channels);

  // Control-plane handlers (receive thread).
  void on_message(proto::Message message);
  void on_registration(proto::BufferRegistration reg);
  void on_pre_allocation(proto::PreAllocation pre);
  void on_abort(const proto::Abort& abort);
  void on_ping(const proto::Ping& ping);

  void maybe_bootstrap(uint64_t room, Room& r) PDKV_REQUIRES(mu_);
  void enqueue(Chunk chunk, Room& r) PDKV_REQUIRES(mu_);

  // Transfer path (workers), in prefill_transfer.cc.
  void worker_loop(Queue& queue);
  void process_chunk(const Chunk& chunk);
  // Where one chunk goes: a decode rank's plan and engine endpoint, and (checksums on)
  // the running sum of what that rank was sent.
  struct ChunkDestination {
    uint64_t room = 0;
    std::string key;
    std::shared_ptr<const DestinationPlan> plan;
    std::string engine_endpoint;
    std::shared_ptr<TransferChecksum> checksum;  // null unless verify_checksum
  };
  Status transfer_kv(const ChunkDestination& dest, const Chunk& chunk, uint64_t& bytes);
  Status wait_for_layers(uint64_t room, int64_t target_step);
  // The manager stops, or the room failed or left the board: its work is moot.
  bool room_ended(uint64_t room) const;
  Status write_blocks(const ChunkDestination& dest, std::vector<plan::Block>& blocks,
                      uint64_t& bytes);
  Result<engine::SessionId> session_for(const std::string& engine_endpoint);
  void forget_session(const std::string& engine_endpoint);
  void finish_success(uint64_t room);

  // Fails the room, notifies every non-dummy destination, and drops it from the tables.
  void fail_room(uint64_t room, const std::string& cause, const std::string& reason);
  void drop_room(uint64_t room) PDKV_REQUIRES(mu_);
  void fail_open_rooms();  // shutdown
  // A status whose send fails (the decode's socket not connected, a reset) is kept and
  // retried by the timer for up to kStatusRetryWindow: a lost Success would otherwise
  // fail a finished room on the decode's waiting timeout.
  void send_status(const std::string& endpoint, const proto::TransferStatus& status);
  void resend_statuses();

  void timer_loop();
  // Registers this rank with the bootstrap server again every bootstrap_refresh: a
  // restarted server starts empty, and decodes that resolve routes afresh (new ones, or
  // ones that lost this rank) would time out on it. Own thread: a dead server blocks
  // each attempt up to its deadline.
  void bootstrap_refresh_loop();
  void check_liveness();

  PrefillManagerConfig config_;
  std::shared_ptr<RouteDirectory> directory_;
  std::unique_ptr<engine::TransferEngine> engine_;
  std::unique_ptr<ControlChannel> channel_;
  proto::RankIdentity identity_;

  RoomStatusBoard board_;
  PrefillMetadataStore metadata_;
  FailedPeerTracker failed_peers_;
  EndedRoomLog ended_;  // failed rooms, to answer pre-allocations that arrive after
  StepCounter steps_;
  TransferMetrics metrics_;

  mutable Mutex mu_;
  std::unordered_map<std::string, DecodePeer> decodes_ PDKV_GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Room> rooms_ PDKV_GUARDED_BY(mu_);

  Mutex sessions_mu_;
  std::unordered_map<std::string, engine::SessionId> sessions_ PDKV_GUARDED_BY(sessions_mu_);

  std::vector<std::unique_ptr<Queue>> queues_;
  std::vector<std::thread> workers_;
  std::thread timer_;
  std::thread bootstrap_refresher_;
  PrefillRankInfo rank_info_;  // what start() registered
  struct UnsentStatus {
    std::string endpoint;
    proto::TransferStatus status;
    TimePoint give_up;
  };
  static constexpr std::chrono::milliseconds kStatusRetryWindow{5000};
  static constexpr size_t kMaxUnsentStatuses = 4096;
  Mutex outbox_mu_;
  std::deque<UnsentStatus> unsent_statuses_ PDKV_GUARDED_BY(outbox_mu_);

  Mutex timer_mu_;
  CondVar timer_wake_;
  std::atomic<bool> stopping_{false};
};

}  // namespace pdkv::kv
