// DecodeManager: the decode side of one rank.
//
// For each room it resolves the prefill ranks through the bootstrap directory (retrying
// until the bootstrap timeout), registers its buffers once with each prefill rank it
// routes to, sends the room's pre-allocation to every target, and counts the prefill
// ranks' status messages: Success only when every required rank reported success (so
// poll() == Success means every byte is in this rank's memory). The first token and
// speculative ids are kept from whichever rank sends them.
//
// Failures: a Failed status, a refused registration, a prefill rank that stops answering
// pings (per-rank liveness, heartbeat_interval x max_failures), the bootstrap timeout and
// the waiting timeout each fail the room with a reason, and the other prefill ranks of the
// room are told (Abort) so they stop. A room that ended leaves every table.
//
// Liveness: any message from a prefill rank counts as a sign of life; a rank whose
// control connection closed and refuses reconnection (its process is gone) fails its
// rooms at once; silence longer than heartbeat_interval x max_failures is the fallback.
//
// Route changes: with a directory that watches its routes (etcd), a prefill rank whose
// route vanishes (or moves to another endpoint) is dropped from the resolved-route cache,
// so new rooms resolve it again, and the rooms still bootstrapping with it (their
// pre-allocation not handed to it yet) fail at once with the registry's reason
// (kBootstrapFailed). Rooms already handed to it are left to it and to liveness.
//
// Resolution: the address a room names comes from the request, so one that never answers
// must hold up only the rooms naming it. Each prefill instance's rooms are resolved in
// order on a thread of their own (a lane, gone once its rooms are; at most
// max_resolving_instances at once, past which a room naming another instance fails at
// once); each lookup attempt is bounded by route_attempt_timeout and retried until the
// room's bootstrap deadline; an instance whose attempts keep failing has its rooms failed
// at once for a while (instance_breaker.h). shutdown() interrupts lookups in flight.
//
// Threads it owns: the control channel's receive thread (handlers), resolver lanes
// (bootstrap lookups: the only place that blocks on HTTP), and a timer thread (deadlines,
// pings). Public methods are thread-safe and never block on the network. No thread sends
// while holding mu_: messages decided under it go into an Outbox flushed after it is
// released (send paths are marked PDKV_EXCLUDES(mu_)), and control sends never block.
//
// Files, one job each: decode_manager.cc (create, start-up, shutdown, room count),
// decode_room_api.cc (the KVReceiver calls), decode_resolution.cc (route resolution and
// registration, resolver lanes), decode_pre_allocation.cc (the pre-allocation
// protocol), decode_statuses.cc (statuses, batch notes, Aborts), decode_liveness.cc
// (timer, pings, peers gone or refused, route changes), decode_room_end.cc (fencing and
// failure of a room). What it shares with the PrefillManager is in kv/runtime/ (metrics
// and endpoints: rank_manager.h; the timer's loop: manager_timer.h; start and stop:
// manager_runtime.h).
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

#include "common/interrupt.h"
#include "common/mutex.h"
#include "common/status.h"
#include "engine/transfer_engine.h"
#include "kv/control/control_channel.h"
#include "kv/control/outbox.h"
#include "kv/control/peer_liveness.h"
#include "kv/decode/room_grant.h"
#include "kv/kv_args.h"
#include "kv/manager_options.h"
#include "kv/metrics/metrics_registry.h"
#include "kv/metrics/transfer_metrics.h"
#include "kv/pipeline/transfer_checksum.h"
#include "kv/room/failure_cause.h"
#include "kv/room/room_status_board.h"
#include "kv/route/instance_breaker.h"
#include "kv/route/route_directory.h"
#include "kv/route/route_plan.h"
#include "kv/runtime/manager_runtime.h"
#include "kv/runtime/rank_manager.h"

namespace pdkv::kv {

struct DecodeManagerConfig {
  KvArgs args;
  std::string bootstrap_addr;  // default for receivers that name none
  // This rank holds MLA pages partially (L1.5 cache, docs/API.md): every send_metadata
  // carries the request's page ownership, and only owned pages are written.
  bool enable_mla_l1_5_cache = false;
  engine::EngineOptions engine;
  KvManagerOptions options;
};

// What the decode learns with the KV: the prefill's first sampled token and speculative
// candidate ids (valid once the room is Success). Shared with the KVReceiver so it
// outlives the room's table entries.
class ReceivedMetadata {
 public:
  int64_t bootstrap_token() const {
    MutexLock lock(mu_);
    return token_;
  }
  std::vector<int32_t> spec_candidate_ids() const {
    MutexLock lock(mu_);
    return ids_;
  }

 private:
  friend class DecodeManager;
  mutable Mutex mu_;
  int64_t token_ PDKV_GUARDED_BY(mu_) = -1;
  std::vector<int32_t> ids_ PDKV_GUARDED_BY(mu_);
};

// Decode-side L1.5 ownership of the whole request: one mask entry per destination page,
// and the local page of each owned page i at page_local_indices[page_indices_mapping[i]]
// (no mapping means cumsum(mask) - 1, the order of the mask).
struct RequestOwnership {
  std::vector<uint8_t> page_transfer_mask;
  std::vector<int64_t> page_local_indices;
  std::optional<std::vector<int64_t>> page_indices_mapping{};
};

struct PreAllocationRequest {
  std::vector<int64_t> kv_pages;  // destination pages after the decode prefix
  std::optional<int64_t> aux_index;
  // The state groups' lists, concatenated (state_group_ends below: the end of each).
  std::vector<int64_t> state_slots;
  uint64_t decode_prefix_len = 0;  // tokens
  std::optional<RequestOwnership> ownership;
  // The end of each state group's list in state_slots (empty = one list, the single-list
  // form; kv/state_lists.h). Last, so the older positional initialisers still read.
  std::vector<uint32_t> state_group_ends = {};
};

// Its room count, metrics and endpoints are RankManager's (rank_manager.h).
class DecodeManager final : public RankManager {
 public:
  static Result<std::unique_ptr<DecodeManager>> create(DecodeManagerConfig config,
                                                       const ControlChannelFactory& channels,
                                                       std::shared_ptr<RouteDirectory> directory);
  ~DecodeManager() override;  // shutdown()

  struct Handles {
    std::shared_ptr<const RoomHandle> status;
    std::shared_ptr<const ReceivedMetadata> metadata;
  };
  // KVReceiver construction: Bootstrapping, the bootstrap timeout starts now.
  // Empty bootstrap_addr = the manager's default.
  Handles open_room(uint64_t room, const std::string& bootstrap_addr);
  // Starts resolving the room's prefill ranks (non-blocking).
  Status init_room(uint64_t room, std::optional<int64_t> prefill_dp_rank);
  // The destination pages and slots; sent as soon as the route is known.
  Status send_metadata(uint64_t room, PreAllocationRequest request);
  // Fails the room and tells its prefill ranks to stop.
  void abort_room(uint64_t room, const std::string& reason);

  void shutdown();

 private:
  // create() is ManagerCreation::create (manager_runtime.h).
  friend class ManagerCreation;
  struct Target {
    RouteTarget route;
    std::string endpoint;  // the prefill rank's control endpoint
  };
  // This manager's record of one room: its prefill targets, its pre-allocation, grant
  // and ticket, the statuses counted so far (room_state.h lists the room names).
  struct DecodeRoom {
    std::string bootstrap_addr;
    std::shared_ptr<ReceivedMetadata> metadata;
    bool init_requested = false;
    std::optional<int64_t> prefill_dp_rank;
    // Protocol progress, not lifecycle (that is the room's RoomState on board_): its
    // prefill ranks were found and `targets` set, so they can be sent its pre-allocation
    // or told it failed.
    bool resolved = false;
    std::vector<Target> targets;
    uint32_t required_responses = 1;
    std::set<int64_t> responders;  // prefill TP ranks that reported Success
    // From send_metadata on (kept until the room ends, for resends): a target is sent its
    // pre-allocation only once its prefill rank has accepted our registration (else it
    // would refuse it), and one the channel refused is retried by the timer.
    std::optional<PreAllocationRequest> pending;
    std::vector<bool> pre_sent;  // per target
    // Aborted while its prefill ranks were still being resolved: once they are, they are
    // told (instead of sent the pre-allocation), then the room is dropped.
    std::optional<std::string> abort_after_resolve;
    int64_t token = -1;
    std::vector<int32_t> ids;
    TimePoint opened;
    // The room's write grant (room_grant.h) from send_metadata() until the room ends;
    // 0 = none (not granted yet, or revoked).
    uint64_t grant = 0;
    // The room's ticket (proto::PreAllocation::ticket), drawn when the room opens.
    uint64_t ticket = 0;
    // PDKV_VERIFY_CHECKSUM only, from send_metadata() on: what the room granted, which
    // bounds the regions its statuses may make this rank re-read. Shared: a status
    // checks against it outside mu_.
    std::shared_ptr<const GrantedDestination> granted;
  };
  struct PrefillPeer {
    std::string bootstrap_addr;
    int64_t tp_rank = 0;
    uint64_t incarnation = 0;  // from its messages; 0 = not heard yet
    // Its accepted RegistrationResult's challenge, echoed in every pre-allocation to it.
    uint64_t challenge = 0;
    bool registration_sent = false;
    TimePoint registration_sent_at;
    // A RegistrationResult answered it; until then the timer sends it again every
    // kRegistrationRetry, since a registration lost on the wire (a reset connection, a
    // send timing out before ZeroMQ connected) would leave this rank's rooms without it.
    bool registration_acked = false;
    Status refused;  // set if it refused our registration
    PeerLiveness liveness;
    // The fragments our registration to it carried: a pre-allocation whose route has
    // these names them instead of carrying a copy (the same list for every room).
    WireFragments registered_fragments;
  };
  struct Instance {
    PrefillRankInfo info;
    RoomRoute route;
    std::map<std::pair<int64_t, int64_t>, std::string> endpoints;  // (dp group, tp rank)
  };

  DecodeManager(DecodeManagerConfig config, std::shared_ptr<RouteDirectory> directory);
  Status start(const ControlChannelFactory& channels);
  size_t rooms_in_tables() const override PDKV_EXCLUDES(mu_);

  void on_message(proto::Message message) PDKV_EXCLUDES(mu_);
  void on_status(const proto::TransferStatus& status) PDKV_EXCLUDES(mu_);
  // A batch note (engine thread): a Success status that rode the room's last batch.
  void on_note(std::span<const uint8_t> note) PDKV_EXCLUDES(mu_);
  // PDKV_VERIFY_CHECKSUM: OK, or why this success status must not count.
  Status check_status_checksum(const proto::TransferStatus& status) const;
  // The target of `r` that sent `status`, or null (logged, rate-limited) if the status
  // names a prefill rank that is not one of the room's targets or the wrong ticket.
  const Target* status_sender(const proto::TransferStatus& status, const DecodeRoom& r) const
      PDKV_REQUIRES(mu_);
  void on_registration_result(const proto::RegistrationResult& result) PDKV_EXCLUDES(mu_);
  void on_pong(const proto::Pong& pong) PDKV_EXCLUDES(mu_);
  void on_abort(const proto::Abort& abort) PDKV_EXCLUDES(mu_);
  // From the directory's watch thread (RouteDirectory::subscribe).
  void on_route_change(const RouteChange& change) PDKV_EXCLUDES(mu_);
  // The prefill rank's process is gone (its control connection closed for good).
  void on_peer_gone(const std::string& endpoint) PDKV_EXCLUDES(mu_);
  // The prefill rank refused our control handshake (the cluster secrets differ): its
  // rooms fail at once with that reason instead of at a timeout.
  void on_peer_refused(const std::string& endpoint) PDKV_EXCLUDES(mu_);
  void heard_from(const std::string& endpoint) PDKV_EXCLUDES(mu_);
  // True if `endpoint` is a prefill rank this decode resolved for one of its rooms.
  bool knows_prefill(const std::string& endpoint) const PDKV_EXCLUDES(mu_);
  // The prefill peer of `target`, sending it this rank's registration (into `out`) if
  // nothing did yet: it takes pre-allocations and aborts only from registered decodes.
  PrefillPeer& register_once(const Target& target, const std::string& bootstrap_addr, Outbox& out)
      PDKV_REQUIRES(mu_);

  // One instance's lane: resolves its rooms in order until none is left.
  void lane_loop(const std::string& addr) PDKV_EXCLUDES(mu_);
  // Queues `room` on its instance's lane (starting the lane); a reason if it must fail at
  // once instead (too many instances resolving).
  std::optional<std::string> queue_for_resolution(uint64_t room, const std::string& addr)
      PDKV_REQUIRES(mu_);
  // The lane threads that returned, joined outside mu_.
  std::vector<std::thread> take_finished_lanes() PDKV_EXCLUDES(mu_);
  Status resolve(uint64_t room) PDKV_EXCLUDES(mu_);
  // Fails a room whose resolution failed, naming the cause.
  void fail_resolution(uint64_t room, const Status& resolved) PDKV_EXCLUDES(mu_);
  // The instance's route (cached unless routes_epoch_ moved past `epoch` meanwhile).
  Result<Instance> instance_for(const std::string& addr, TimePoint deadline, uint64_t epoch)
      PDKV_EXCLUDES(mu_);
  struct Resolution {
    Instance instance;
    std::vector<Target> targets;
  };
  // The instance's route and the endpoints of the ranks a room of DP group `dp_rank`
  // (nullopt: by room id) reaches, from the caches or the directory; `epoch`: the
  // routes_epoch_ the caller started at.
  Result<Resolution> find_targets(uint64_t room, const std::string& addr,
                                  std::optional<int64_t> dp_rank, TimePoint deadline,
                                  uint64_t epoch) PDKV_EXCLUDES(mu_);
  // Puts the room's pre-allocations its targets are ready for into `out`, skipping the
  // endpoints in `skip`.
  void send_pre_allocations(uint64_t room, DecodeRoom& r, Outbox& out,
                            const std::set<std::string>* skip = nullptr) PDKV_REQUIRES(mu_);
  bool ready_for_pre_allocation(const std::string& endpoint) const PDKV_REQUIRES(mu_);
  // Timer: registrations not answered yet, pre-allocations not sent yet.
  void resend_unacknowledged() PDKV_EXCLUDES(mu_);
  // Queues what it can of the rooms' unsent pre-allocations: only rooms with a target at
  // `target` if given (its registration was just accepted), skipping `skip`'s endpoints.
  void send_unsent_pre_allocations(const std::string* target, const std::set<std::string>* skip,
                                   Outbox& out) PDKV_REQUIRES(mu_);
  proto::BufferRegistration registration(const WireFragments& fragments) const;

  // `stage` unset: the stage of the room's state here (RoomStatusBoard::fail).
  void fail_room(uint64_t room, FailureCause cause, const std::string& reason, bool tell_prefill,
                 std::optional<FailureStage> stage = std::nullopt) PDKV_EXCLUDES(mu_);
  void drop_room(uint64_t room) PDKV_REQUIRES(mu_);
  void fail_open_rooms() PDKV_EXCLUDES(mu_);  // shutdown
  // After a sticky device error (device_fault_for_rooms), every room: by the timer.
  void fail_rooms_on_device_fault() PDKV_EXCLUDES(mu_);
  // Revokes the room's write grant, if it has one, before its end is published: until
  // the writes admitted under it have landed, the room's handle keeps its end hidden.
  // `end` kCompleted only when the room succeeded: a prefill retrying a batch whose
  // acknowledgement it lost is then told the room is done (AlreadyCompleted).
  void revoke_grant(uint64_t room, DecodeRoom& r,
                    engine::GrantEnd end = engine::GrantEnd::kWithdrawn) PDKV_REQUIRES(mu_);
  // Sends what `out` holds; pre-allocations the channel refused go back to the timer.
  void flush(Outbox& out) PDKV_EXCLUDES(mu_);

  void timer_loop();
  void heartbeat() PDKV_EXCLUDES(mu_);

  DecodeManagerConfig config_;
  std::shared_ptr<RouteDirectory> directory_;
  // The directory's route changes (none from the HTTP one), from start() to shutdown().
  std::unique_ptr<RouteSubscription> route_subscription_;
  engine::MemoryRegistry registered_;  // this rank's buffers: where checksum regions must lie
  std::unique_ptr<const RankGrantBuffers> grant_buffers_;  // set in start()

  mutable Mutex mu_;
  std::unordered_map<uint64_t, DecodeRoom> rooms_ PDKV_GUARDED_BY(mu_);
  std::unordered_map<std::string, PrefillPeer> prefills_ PDKV_GUARDED_BY(mu_);
  // Prefill ranks dropped from prefills_ whose control sockets heartbeat() closes on its
  // next run (not at once: the Aborts just sent them would be dropped with the socket).
  std::set<std::string> forget_later_ PDKV_GUARDED_BY(mu_);
  std::unordered_map<std::string, Instance> instances_ PDKV_GUARDED_BY(mu_);
  // Rooms waiting for their instance's lane, by instance address.
  struct ResolutionLane {
    std::deque<uint64_t> rooms;
    std::thread worker;
  };
  std::map<std::string, ResolutionLane> lanes_ PDKV_GUARDED_BY(mu_);
  std::vector<std::thread> finished_lanes_ PDKV_GUARDED_BY(mu_);
  InstanceBreakers breakers_ PDKV_GUARDED_BY(mu_);
  // Fired by shutdown(): route lookups in flight return at once.
  Interrupt stop_lookups_;
  std::set<uint64_t> unsent_pre_allocations_ PDKV_GUARDED_BY(mu_);  // rooms
  // Counts the routes that vanished: a resolver that finds it moved while it looked
  // routes up resolves again, since what it found may be a vanished route.
  uint64_t routes_epoch_ PDKV_GUARDED_BY(mu_) = 0;

  static constexpr std::chrono::milliseconds kRegistrationRetry{200};
  std::thread timer_;
};

}  // namespace pdkv::kv
