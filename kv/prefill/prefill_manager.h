// PrefillManager: the prefill side of one rank.
//
// It serves decode ranks' buffer registrations and per-room pre-allocations, takes each
// room's chunks from its KVSender, hands them to the TransferPipeline (plans the writes,
// keeps many engine batches in flight per decode rank), then reports each room's status to
// every decode rank that pre-allocated it. Improvements over the reference, each tested:
//  * every failure reaches every decode rank of the room, not only the failing one;
//  * bootstrap, waiting and first-token timeouts fire (RoomStatusBoard deadlines);
//  * a decode that goes silent or whose process is gone fails its rooms (liveness per
//    rank: any message from it counts as a sign of life; a closed connection that cannot
//    be re-opened is death at once);
//  * a bad pre-allocation fails its room with a reason instead of killing a worker;
//  * a room that ended is removed from every table (active_rooms() drops to 0).
//
// Threads it owns: the control channel's receive thread (message handlers: short, never
// wait on transfers), the pipeline's dispatcher and session connector, a timer thread
// (deadlines, liveness, unsent statuses) and the bootstrap refresher. No thread sends on
// the network while holding mu_ (sends are marked PDKV_EXCLUDES(mu_)), and control sends
// never block. Every public method is thread-safe and non-blocking except shutdown().
//
// Files, one job each: prefill_manager.cc (create, start-up, shutdown, room count),
// prefill_room_api.cc (the KVSender calls), prefill_registration.cc (control messages in,
// decode registrations), prefill_pre_allocation.cc (pre-allocations, proofs, Aborts),
// prefill_rooms.cc (bootstrap, failure, statuses out), prefill_liveness.cc (timer, pings,
// decodes gone, route refresh), prefill_transfer.cc (completion: the pipeline's hooks).
// What it shares with the DecodeManager is in kv/runtime/ (metrics and endpoints:
// rank_manager.h; the timer's loop: manager_timer.h; start and stop: manager_runtime.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "engine/transfer_engine.h"
#include "kv/control/control_channel.h"
#include "kv/control/outbox.h"
#include "kv/control/peer_liveness.h"
#include "kv/kv_args.h"
#include "kv/manager_options.h"
#include "kv/metrics/metrics_registry.h"
#include "kv/metrics/transfer_metrics.h"
#include "kv/pipeline/failed_peer_tracker.h"
#include "kv/pipeline/step_counter.h"
#include "kv/pipeline/transfer_checksum.h"
#include "kv/pipeline/transfer_pipeline.h"
#include "kv/prefill/destination_plan.h"
#include "kv/prefill/ended_room_log.h"
#include "kv/prefill/pending_room_budget.h"
#include "kv/prefill/prefill_metadata_store.h"
#include "kv/room/failure_cause.h"
#include "kv/room/room_status_board.h"
#include "kv/route/route_directory.h"
#include "kv/runtime/manager_runtime.h"
#include "kv/runtime/rank_manager.h"
#include "kv/state_lists.h"

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

// Its room count, metrics and endpoints are RankManager's (rank_manager.h).
class PrefillManager final : public RankManager {
 public:
  static Result<std::unique_ptr<PrefillManager>> create(PrefillManagerConfig config,
                                                        const ControlChannelFactory& channels,
                                                        std::shared_ptr<RouteDirectory> directory);
  ~PrefillManager() override;  // shutdown()

  // --- KVSender calls -------------------------------------------------------------
  // Starts tracking `room` (Bootstrapping; the bootstrap timeout starts now).
  std::shared_ptr<const RoomHandle> open_room(uint64_t room);
  // The request has num_pages pages in total. InvalidArgument if called twice or < 0.
  Status init_room(uint64_t room, int64_t num_pages, std::optional<int64_t> aux_index);
  // One chunk of prefill page indices; the one that completes num_pages is the last and
  // may carry the state slots. Chunks may arrive before the pre-allocations (they wait).
  // `layerwise`: unset = the manager's setting (layerwise_interval > 0 streams the chunk's
  // layer groups as the forward marks them); false = the chunk's KV is complete already
  // (e.g. a prefix-cache hit without a forward): send it at once.
  // `sources` (optional): the device stream whose work issued so far writes this chunk's
  // KV (the forward pass); the point is recorded now, so the caller goes on at once, and
  // the engine's copies wait for it on the device. Unset: the caller has synchronised.
  // `state`: the state groups' lists (kv/state_lists.h), given with the last chunk.
  Status send_chunk(uint64_t room, std::span<const int64_t> pages, StateSlotLists state,
                    std::optional<ChunkOwnership> ownership = std::nullopt,
                    std::optional<bool> layerwise = std::nullopt, engine::SourceReady sources = {});
  // Fails the room (reason kept) and tells every decode rank that pre-allocated it.
  void abort_room(uint64_t room, const std::string& reason);

  // --- engine hooks ---------------------------------------------------------------
  void set_prefill_metadata(uint64_t room, int64_t bootstrap_token,
                            std::vector<int32_t> spec_candidate_ids);
  int64_t reserve_layerwise_cache_steps();
  void mark_layers_ready(int64_t layers);

  const KvArgs& args() const { return config_.args; }

  // Stops every thread; rooms still open fail (FailureCause::kShutdown). Idempotent.
  void shutdown();

 private:
  // create() is ManagerCreation::create (manager_runtime.h).
  friend class ManagerCreation;
  // One incarnation's registration and the challenge its answer carried.
  struct DecodeRegistration {
    proto::BufferRegistration registration;  // its fragments moved to `fragments`
    Status layout_status;                    // why its pre-allocations are refused, if they are
    uint64_t challenge = 0;
    // The registration's fragment list, converted and checked once, for the
    // pre-allocations that name it (all of a DecodeManager's).
    FragmentList fragments;
  };
  struct DecodePeer : DecodeRegistration {
    PeerLiveness liveness;  // this rank probes the decodes it holds rooms for
    // A pre-allocation echoed the challenge: the decode receives at its endpoint. Until
    // then this rank keeps no socket or data session for it (answers go on one-off
    // sockets), so registrations alone, from anyone, make it hold only this record.
    bool proven = false;
    // Another incarnation that registered at this endpoint and has not yet proved it
    // receives there (by echoing its challenge in a pre-allocation): a restart of the
    // decode, or a stranger naming it. Proved, it replaces this one (whose rooms fail as
    // a restart); until then this one's rooms go on.
    std::optional<DecodeRegistration> successor;
    // The shared parts of this decode's latest room's plan (fragment list, buffers),
    // taken by the next rooms where equal (destination_plan.h).
    PlanSharing last_plan_parts;
  };

  // This manager's record of one room: its decode destinations, its chunks until it is
  // bootstrapped, its first-token wait (room_state.h lists the room names).
  struct PrefillRoom {
    bool sender_open = false;
    // A decode aborted the room before its KVSender existed: the sender fails at once
    // with this reason instead of waiting for pre-allocations that will not come.
    std::optional<RoomFailure> aborted_early;
    int64_t num_pages = -1;
    std::optional<int64_t> aux_index;
    int64_t next_page = 0;
    bool last_chunk_sent = false;
    uint32_t required_destinations = 0;
    // Keyed by the decode rank's control endpoint.
    std::map<std::string, std::shared_ptr<const DestinationPlan>> destinations;
    // PDKV_VERIFY_CHECKSUM: what was sent to each destination so far, same keys.
    std::map<std::string, std::shared_ptr<TransferChecksum>> checksums;
    // Chunks sent before the room was bootstrapped. Whether it is, and whether a chunk went
    // to the pipeline, is its state on board_ (WaitingForInput, Transferring), not kept here.
    std::deque<TransferChunk> waiting_chunks;
    // Every byte written and waiting for the first token (wait_for_prefill_metadata, the
    // room is in awaiting_metadata_) until this.
    TimePoint metadata_deadline;
    TimePoint first_seen;
    TimePoint last_chunk_at;   // send() of the last chunk (stage end_to_end)
    TimePoint transferred_at;  // every byte acknowledged (stage status_delivery)
  };

  PrefillManager(PrefillManagerConfig config, std::shared_ptr<RouteDirectory> directory);
  Status start(const ControlChannelFactory& channels);
  size_t rooms_in_tables() const override PDKV_EXCLUDES(mu_);

  // Control-plane handlers (receive thread).
  void on_message(proto::Message message) PDKV_EXCLUDES(mu_);
  void on_registration(proto::BufferRegistration reg) PDKV_EXCLUDES(mu_);
  void on_pre_allocation(proto::PreAllocation pre) PDKV_EXCLUDES(mu_);
  void on_abort(const proto::Abort& abort) PDKV_EXCLUDES(mu_);
  void on_ping(const proto::Ping& ping) PDKV_EXCLUDES(mu_);
  // The decode's process is gone (its control connection closed for good).
  void on_peer_gone(const std::string& endpoint) PDKV_EXCLUDES(mu_);

  // Starts the room in the pipeline, with the chunks that waited, once its KVSender is
  // open and every decode rank pre-allocated; at most once (the board's state says).
  void maybe_bootstrap(uint64_t room, PrefillRoom& r) PDKV_REQUIRES(mu_);
  // One chunk of a bootstrapped room to the pipeline; `state`: the room's state on the
  // board, moved to Transferring by its first chunk. `wake` false: the caller runs the
  // pipeline's pass itself next (run_pipeline_here).
  void hand_to_pipeline(uint64_t room, RoomState state, TransferChunk chunk, bool wake = true)
      PDKV_REQUIRES(mu_);
  // send_chunk's checks and hand-over (under mu_), then, with no lock held, a pipeline
  // pass on the caller's thread (TransferPipeline::run_here).
  Status hand_chunk_over(uint64_t room, std::span<const int64_t> pages, StateSlotLists state,
                         std::optional<ChunkOwnership> ownership, std::optional<bool> layerwise,
                         engine::SourceReady sources) PDKV_EXCLUDES(mu_);
  void run_pipeline_here() PDKV_EXCLUDES(mu_);

  // Pipeline hooks (dispatcher thread), in prefill_transfer.cc.
  void on_rooms_transferred(const std::vector<TransferredRoom>& rooms) PDKV_EXCLUDES(mu_);
  // The room's Success status for decode rank `key`, to ride the room's last batch to
  // it (status_note.h), if it can be decided now: nullopt while the first token is
  // awaited. Never asked with checksums on (the hook is not installed then).
  std::optional<proto::TransferStatus> success_for_note(uint64_t room, const std::string& key)
      PDKV_EXCLUDES(mu_);
  // The room's Success status for one destination (checksum: that destination's).
  proto::TransferStatus success_status(uint64_t room, const PrefillRoom& r, const std::string& key,
                                       const DestinationPlan& dest,
                                       const PrefillMetadata& meta) const PDKV_REQUIRES(mu_);
  // Success statuses of a room whose bytes are all written and whose metadata is in (or
  // not waited for), to every decode rank but those in `delivered` (theirs rode the
  // room's last batch to them); the room leaves the tables.
  void complete_room(uint64_t room, PrefillRoom& r, const PrefillMetadata& meta,
                     const std::vector<std::string>& delivered, Outbox& out) PDKV_REQUIRES(mu_);
  void expire_metadata_waits() PDKV_EXCLUDES(mu_);

  // Fails the room, notifies every non-dummy destination, and drops it from the tables.
  // `stage` unset: the stage of the room's state (RoomStatusBoard::fail).
  void fail_room(uint64_t room, FailureCause cause, const std::string& reason,
                 std::optional<FailureStage> stage = std::nullopt) PDKV_EXCLUDES(mu_);
  // After a sticky device error (device_fault_for_rooms), every room: by the timer.
  void fail_rooms_on_device_fault() PDKV_EXCLUDES(mu_);
  void drop_room(uint64_t room) PDKV_REQUIRES(mu_);
  // The room's entry for a message of `decode` holding `bytes` there (pending_room_budget.h):
  // a room whose KVSender is open is not charged; otherwise the budget is, and past one of
  // its bounds nothing is created and the error names the bound.
  Result<PrefillRoom*> room_for_peer_message(uint64_t room, const std::string& decode,
                                             uint64_t bytes) PDKV_REQUIRES(mu_);
  void fail_open_rooms() PDKV_EXCLUDES(mu_);  // shutdown
  proto::TransferStatus status_of(uint64_t room, proto::TransferState state) const;
  // A Failed status carrying the failure's reason, cause and stage.
  proto::TransferStatus failed_status(uint64_t room, const RoomFailure& failure) const;
  // Sends what `out` holds; what the channel refuses (the decode's queue full) is kept
  // and retried by the timer for up to kStatusRetryWindow: a lost Success would otherwise
  // fail a finished room on the decode's waiting timeout.
  void flush(Outbox& out) PDKV_EXCLUDES(mu_);
  void resend_statuses() PDKV_EXCLUDES(mu_);
  // Any message from a decode rank is a sign of life.
  void heard_from(const proto::RankIdentity& sender) PDKV_EXCLUDES(mu_);
  // The decode that registered here as `sender` (same endpoint and incarnation), or null:
  // only such a decode is heard, answered, or may pre-allocate or abort a room.
  // Sends to a decode rank: on its socket once it is proven, else on a one-off socket.
  void send_to_decode(const std::string& endpoint, bool proven, const proto::Message& message)
      PDKV_EXCLUDES(mu_);
  // The decode a pre-allocation is from, if its challenge proves it; a successor that
  // proves itself replaces the registered incarnation first.
  struct Proof {
    bool first = false;  // the decode (or its successor) was not proven before
    // A successor replaced the registered incarnation: the replaced one's rooms and
    // engine endpoint.
    std::vector<uint64_t> orphaned;
    std::optional<std::string> stale_engine_endpoint;
  };
  DecodePeer* proven_decode(const proto::PreAllocation& pre, Proof& proof) PDKV_REQUIRES(mu_);
  DecodePeer* registered_decode(const proto::RankIdentity& sender) PDKV_REQUIRES(mu_);

  void timer_loop();
  // Fails the rooms that decodes' messages opened and whose KVSender did not come within
  // the bootstrap timeout (without a KVSender a room has no board entry, so no deadline).
  void fail_orphan_rooms() PDKV_EXCLUDES(mu_);
  // Registers this rank with the bootstrap server again every bootstrap_refresh: a
  // restarted server starts empty, and decodes that resolve routes afresh (new ones, or
  // ones that lost this rank) would time out on it. Own thread: a dead server blocks
  // each attempt up to its deadline.
  void bootstrap_refresh_loop();
  // Pings decodes with rooms here; fails the rooms of those that stopped answering.
  void check_liveness() PDKV_EXCLUDES(mu_);

  PrefillManagerConfig config_;
  std::shared_ptr<RouteDirectory> directory_;
  PrefillMetadataStore metadata_;
  FailedPeerTracker failed_peers_;
  EndedRoomLog ended_;  // failed rooms, to answer pre-allocations that arrive after
  StepCounter steps_;

  mutable Mutex mu_;
  std::unordered_map<std::string, DecodePeer> decodes_ PDKV_GUARDED_BY(mu_);
  std::unordered_map<uint64_t, PrefillRoom> rooms_ PDKV_GUARDED_BY(mu_);
  // Rooms in rooms_ without a KVSender yet: what decodes alone made this rank hold.
  PendingRoomBudget pending_ PDKV_GUARDED_BY(mu_);
  std::set<uint64_t> awaiting_metadata_ PDKV_GUARDED_BY(mu_);

  std::unique_ptr<TransferPipeline> pipeline_;
  std::thread timer_;
  std::thread bootstrap_refresher_;
  PrefillRankInfo rank_info_;  // what start() registered
  struct UnsentStatus {
    std::string endpoint;
    proto::Message status;
    TimePoint give_up;
  };
  static constexpr std::chrono::milliseconds kStatusRetryWindow{5000};
  static constexpr size_t kMaxUnsentStatuses = 4096;
  Mutex outbox_mu_;
  std::deque<UnsentStatus> unsent_statuses_ PDKV_GUARDED_BY(outbox_mu_);
  std::atomic<int> inline_passes_{0};  // run_pipeline_here calls under way
};

}  // namespace pdkv::kv
