// TransferPipeline: the prefill's data path. Chunks of bootstrapped rooms become engine
// batches that are submitted without waiting; completions, not blocked workers, advance
// the rooms (the blocking one-chunk-per-worker path it replaced reached a sixth of the
// engine's throughput at 1024 concurrent rooms).
//
// All state belongs to whoever runs a pass, under pass_mu_: the dispatcher thread, or a
// caller of run_here() (KVSender::send, right after handing a chunk over) when no pass is
// running, so a small request's bytes leave from the caller's thread without waiting for
// the dispatcher to wake (P5 latency). Each pass
//  1. takes what other threads handed over (rooms, chunks, cancellations, completions,
//     opened sessions, layer-step advances),
//  2. plans ready chunks into blocks per destination (DestinationPlan over plan/), as
//     WritePieces on the PeerLink of each decode engine endpoint; a layerwise chunk plans
//     each layer group once the forward marked its layers (an event, no parked thread),
//  3. submits batches on every link while its bytes in flight stay under the window, so
//     a slow decode backs pressure up to its own rooms only; pieces of different rooms
//     bound for one decode rank share batches (PeerLink),
//  4. reports rooms whose every planned byte was acknowledged, and rooms it failed.
// It never blocks on the network: sessions open and close on the SessionConnector's
// thread, and the engine reports each batch through submit_async's callback.
//
// Failures: a batch whose connection failed (kUnavailable) is sent again on a new session
// after a backoff, up to `transfer_attempts` in all (batches are idempotent: same bytes to
// the same addresses, read by nobody before the status). A batch of several rooms that
// the decode rejected (a bad destination, or a grant it revoked because it cancelled the
// room) is split per room so only the guilty room fails (kOutOfRange); a refusal never
// counts against the peer (classify_batch_failure). Anything else fails the batch's rooms
// (kLinkLost once the retries are spent), and (unless aborted here) opens the peer's
// circuit breaker (FailedPeerTracker), which fails later rooms to it at once.
//
// Thread safety: public methods may be called from any thread and never block on the
// network (stop() joins the dispatcher; run_here() runs a pass, which plans, submits and
// calls the hooks). on_transferred and on_failed run on whichever thread ran the pass
// (the dispatcher or a run_here() caller), possibly two at once, with no pipeline lock
// held; they may call back into the pipeline. status_note runs inside a pass.
//
// Files: transfer_pipeline.cc (the calls above, the dispatcher, the pass, the rooms'
// table), pipeline_planning.cc (chunks -> blocks -> pieces), pipeline_submission.cc
// (pieces -> batches on the engine, status notes), pipeline_completion.cc (sessions
// opened, batches acknowledged or failed).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "engine/transfer_engine.h"
#include "kv/metrics/transfer_metrics.h"
#include "kv/pipeline/failed_peer_tracker.h"
#include "kv/pipeline/peer_link.h"
#include "kv/pipeline/session_connector.h"
#include "kv/pipeline/step_counter.h"
#include "kv/pipeline/transfer_checksum.h"
#include "kv/prefill/destination_plan.h"
#include "kv/room/failure_cause.h"
#include "plan/schedule.h"
#include "proto/messages.h"

namespace pdkv::kv {

// Prefill-side L1.5 ownership of one chunk (copied; see plan::SrcOwnership).
struct ChunkOwnership {
  std::vector<uint8_t> page_transfer_mask;
  std::vector<int64_t> page_local_indices;
};

// Where one room's KV goes on one decode rank.
struct TransferDestination {
  std::string key;              // the decode rank's control endpoint (for messages)
  std::string engine_endpoint;  // its transfer engine
  std::shared_ptr<const DestinationPlan> plan;
  std::shared_ptr<TransferChecksum> checksum;  // null unless checksums are on
};

struct TransferChunk {
  int64_t first_page = 0;
  std::vector<int64_t> pages;
  std::vector<int64_t> state_slots;        // last chunk only: the state groups' lists, concatenated
  std::vector<uint32_t> state_group_ends;  // the end of each group's list (empty = one list)
  std::optional<int64_t> aux_index;        // last chunk only
  bool is_last = false;
  // Set: stream layer groups as the forward marks them ready (layerwise); unset: the
  // chunk's KV is complete, send it at once.
  std::optional<int64_t> begin_cache_step;
  std::optional<ChunkOwnership> ownership;
  // Where the model's device stream made the chunk's KV valid (null: the caller had
  // synchronised before send); marked when the chunk was handed over.
  std::shared_ptr<const engine::ReadyEvent> ready;
  TimePoint queued_at{};  // set by add_chunk (stage queue_wait)
};

struct PipelineOptions {
  uint64_t window_bytes = 64ull << 20;  // in flight per decode engine endpoint
  uint64_t batch_bytes = 4ull << 20;    // most bytes per engine batch
  size_t batch_blocks = 65536;          // most blocks per engine batch
  int transfer_attempts = 3;
  std::chrono::milliseconds first_backoff{50};  // doubled per further attempt
  int64_t layer_num = 0;
  int64_t layerwise_interval = 1;
  bool mla_l1_5 = false;
};

// A room whose last chunk was planned and every planned byte acknowledged.
struct TransferredRoom {
  uint64_t room = 0;
  // Decode ranks (TransferDestination::key) whose Success status rode the room's last
  // batch to them as a note (status_note.h) and was handled before that batch was
  // acknowledged: nothing is left to send them.
  std::vector<std::string> delivered_to;
};

class TransferPipeline {
 public:
  struct Hooks {
    std::function<void(const std::vector<TransferredRoom>& rooms)> on_transferred;
    // A room the pipeline failed (not called for cancel_room()).
    std::function<void(uint64_t room, FailureCause cause, const std::string& reason)> on_failed;
    // Optional: the room's Success status for decode rank `key` if it may ride the
    // room's last batch to that rank now (nullopt: it goes over the control channel
    // after the acknowledgement). Asked only when that batch carries every byte still due
    // to that rank and the engine carries notes.
    std::function<std::optional<proto::TransferStatus>(uint64_t room, const std::string& key)>
        status_note;
  };

  // Every reference outlives the pipeline.
  TransferPipeline(engine::TransferEngine& engine, PipelineOptions options,
                   FailedPeerTracker& failed_peers, TransferMetrics& metrics,
                   const StepCounter& steps, Hooks hooks);
  ~TransferPipeline();
  TransferPipeline(const TransferPipeline&) = delete;
  TransferPipeline& operator=(const TransferPipeline&) = delete;

  // The room is bootstrapped: its non-dummy destinations (possibly none).
  void start_room(uint64_t room, std::vector<TransferDestination> destinations);
  // One chunk of a started room, in the order the engine sent them. `wake` false: the
  // caller calls run_here() next (which wakes the dispatcher if it cannot run the pass).
  void add_chunk(uint64_t room, TransferChunk chunk, bool wake = true);
  // The room ended elsewhere (failed, aborted): drop its work; nothing is reported.
  void cancel_room(uint64_t room);
  // A decode restarted or was declared dead: its session is not used again.
  void reset_peer(const std::string& engine_endpoint);
  // A decode registered: open its session now, so the first room does not wait for the
  // connection (a failure here costs nothing; the first batch tries again).
  void prepare_peer(const std::string& engine_endpoint);
  // The forward marked more layers ready (StepCounter advanced).
  void steps_advanced();
  // Runs one pass on this thread if none is running (else returns at once: the running
  // one or the dispatcher's next takes the work). REQUIRES: none of the hooks' locks held
  // (the pass calls status_note, then the other hooks). Not after stop().
  void run_here();
  // Joins the threads; batches still in flight finish into the void. Idempotent.
  void stop();

 private:
  // What other threads hand over, applied in order (a plain struct: a variant of these
  // trips GCC 12's -Wmaybe-uninitialized).
  struct Command {
    enum class Kind : uint8_t { kStartRoom, kAddChunk, kCancelRoom, kResetPeer, kPreparePeer };
    Kind kind = Kind::kStartRoom;
    uint64_t room = 0;
    std::vector<TransferDestination> destinations;  // kStartRoom
    TransferChunk chunk;                            // kAddChunk
    std::string engine_endpoint;                    // kResetPeer, kPreparePeer
  };
  struct Completion {
    uint64_t batch_id;
    Status status;
  };
  struct Opened {
    std::string endpoint;
    Result<engine::SessionId> session;
  };

  // A chunk being planned; layerwise ones advance group by group.
  struct Job {
    TransferChunk chunk;
    std::vector<plan::ResolvedIndices> pages;  // per destination, once resolved
    std::vector<plan::LayerGroup> groups;      // layerwise only
    size_t next_group = 0;
    bool resolved = false;
  };
  // What of one room this pipeline still has to move (room_state.h lists the room names).
  struct RoomTransfer {
    uint64_t id = 0;
    uint64_t serial = 0;
    std::vector<TransferDestination> destinations;
    std::deque<Job> jobs;
    bool last_chunk_added = false;
    bool queued = false;                     // in ready_
    std::vector<uint64_t> dest_outstanding;  // per destination: planned, not acknowledged
    std::vector<std::string> delivered;      // destinations whose status rode a batch
    // Per destination: when its status first rode a submitted batch (max: never). A
    // submission after that one may find the decode already has it (a lost ACK).
    std::vector<TimePoint> status_sent_at;
    // Stage timings and size, observed when the room finishes (TransferMetrics).
    std::chrono::nanoseconds queue_wait{0}, planning{0};
    TimePoint first_submit = TimePoint::max();  // of the batches acknowledged
    TimePoint last_ack{};
    uint64_t planned_bytes = 0, planned_blocks = 0;
  };

  // What a pass reports through the hooks once its locks are released.
  struct Reports {
    std::vector<TransferredRoom> finished;
    std::vector<std::tuple<uint64_t, FailureCause, std::string>> failed;
  };

  void push(Command command, bool wake = true) PDKV_EXCLUDES(mu_);
  void run();
  // One pass (see the file comment); the earliest timer it left, if any.
  std::optional<TimePoint> pass(Reports& reports) PDKV_REQUIRES(pass_mu_);
  void report(Reports& reports) PDKV_EXCLUDES(pass_mu_, mu_);
  void apply(Command& command) PDKV_REQUIRES(pass_mu_);
  void on_completion(Completion& completion) PDKV_REQUIRES(pass_mu_);
  // Counts the batch's bytes acknowledged (and `noted`'s statuses delivered) and finishes
  // the rooms it completes. `noted` is the batch's own or, for a retry the decode
  // answered AlreadyCompleted, the room whose status rode an earlier attempt.
  void acknowledge(const WriteBatch& batch, const std::vector<RoomKey>& noted)
      PDKV_REQUIRES(pass_mu_);
  void on_opened(Opened& opened) PDKV_REQUIRES(pass_mu_);
  void plan_ready_rooms() PDKV_REQUIRES(pass_mu_);
  // Plans what of the room can go now; false if its links are too full to take more.
  bool plan_room(uint64_t room, RoomTransfer& r) PDKV_REQUIRES(pass_mu_);
  // Plans what of the job can go now; `wait_for` gets the layer step it still waits for.
  Status plan_job(RoomTransfer& r, Job& job, std::optional<int64_t>* wait_for)
      PDKV_REQUIRES(pass_mu_);
  // Which blocks of a job one planning step covers.
  struct BlockSpec {
    bool kv = false;
    int64_t begin_layer = 0, end_layer = 0;
    bool state = false;
    std::optional<int64_t> state_begin, state_end;  // unset: every state buffer
    bool aux = false;
  };
  Status plan_blocks(RoomTransfer& r, size_t dest, const Job& job, const BlockSpec& spec)
      PDKV_REQUIRES(pass_mu_);
  void submit_ready_links(TimePoint now, std::optional<TimePoint>* wake_at) PDKV_REQUIRES(pass_mu_);
  void submit_link(PeerLink& link, TimePoint now, std::optional<TimePoint>* wake_at)
      PDKV_REQUIRES(pass_mu_);
  // Starts opening the link's session; `at` is the attempt's start (a failure's age).
  void open_link(PeerLink& link, TimePoint at) PDKV_REQUIRES(pass_mu_);
  // Puts the Success statuses of the rooms `batch` completes into its note (status_note.h).
  void attach_statuses(WriteBatch& batch) PDKV_REQUIRES(pass_mu_);
  void handle_batch_failure(PeerLink& link, WriteBatch batch, const Status& status)
      PDKV_REQUIRES(pass_mu_);
  void give_up_link(PeerLink& link, const Status& why) PDKV_REQUIRES(pass_mu_);
  void fail(uint64_t room, FailureCause cause, const std::string& reason) PDKV_REQUIRES(pass_mu_);
  // Ends the room if nothing is left of it (r is gone then).
  void maybe_finished(uint64_t room, RoomTransfer& r) PDKV_REQUIRES(pass_mu_);
  // The room `key` names if it is still the same room; nullptr once it ended.
  RoomTransfer* find_room(const RoomKey& key) PDKV_REQUIRES(pass_mu_);
  // How a failure reason names the decode behind `engine_endpoint`: its control endpoint.
  static std::string decode_name(const RoomTransfer& r, const std::string& engine_endpoint);
  // The index of the destination behind `engine_endpoint`; destinations.size() if none.
  static size_t dest_index(const RoomTransfer& r, const std::string& engine_endpoint);
  void erase_room(uint64_t room) PDKV_REQUIRES(pass_mu_);
  bool alive(const RoomKey& key) const PDKV_REQUIRES(pass_mu_);
  PeerLink& link_for(const std::string& endpoint) PDKV_REQUIRES(pass_mu_);

  engine::TransferEngine& engine_;
  const PipelineOptions options_;
  FailedPeerTracker& failed_peers_;
  TransferMetrics& metrics_;
  const StepCounter& steps_;
  const Hooks hooks_;

  // Handed over by other threads.
  mutable Mutex mu_;
  CondVar wake_;
  std::vector<Command> commands_ PDKV_GUARDED_BY(mu_);
  std::vector<Completion> completions_ PDKV_GUARDED_BY(mu_);
  std::vector<Opened> opened_ PDKV_GUARDED_BY(mu_);
  bool steps_advanced_ PDKV_GUARDED_BY(mu_) = false;
  bool stopping_ PDKV_GUARDED_BY(mu_) = false;
  bool rerun_ PDKV_GUARDED_BY(mu_) = false;  // a caller ran a pass: timers may have changed

  // Held by whoever runs a pass; guards the state below (lock order: pass_mu_, then mu_).
  Mutex pass_mu_;
  // State of the passes: read and written only with pass_mu_ held (the helpers above
  // that touch it are marked PDKV_REQUIRES(pass_mu_)).
  std::unordered_map<uint64_t, RoomTransfer> rooms_ PDKV_GUARDED_BY(pass_mu_);
  // Rooms with a chunk to plan, in arrival order.
  std::deque<uint64_t> ready_ PDKV_GUARDED_BY(pass_mu_);
  // Layerwise: step needed -> room.
  std::multimap<int64_t, uint64_t> waiting_steps_ PDKV_GUARDED_BY(pass_mu_);
  std::unordered_map<std::string, std::unique_ptr<PeerLink>> links_ PDKV_GUARDED_BY(pass_mu_);
  std::unordered_map<uint64_t, WriteBatch> inflight_ PDKV_GUARDED_BY(pass_mu_);
  uint64_t next_serial_ PDKV_GUARDED_BY(pass_mu_) = 1;
  uint64_t next_batch_id_ PDKV_GUARDED_BY(pass_mu_) = 1;
  std::vector<TransferredRoom> finished_ PDKV_GUARDED_BY(pass_mu_);  // this pass
  std::vector<std::tuple<uint64_t, FailureCause, std::string>> failed_
      PDKV_GUARDED_BY(pass_mu_);  // this pass
  std::vector<plan::Block> scratch_ PDKV_GUARDED_BY(pass_mu_);
  // attach_statuses' scratch.
  std::vector<std::pair<RoomKey, uint64_t>> room_bytes_ PDKV_GUARDED_BY(pass_mu_);
  // Immutable after construction: the engine carries batch notes (engine/batch_note.h).
  const bool notes_ = false;

  // Set in the constructor, stopped in stop(); passes open and close sessions on it
  // (it has its own lock).
  std::unique_ptr<SessionConnector> connector_;
  std::thread dispatcher_;
};

}  // namespace pdkv::kv
