// PeerLink: the KV writes bound for one decode engine endpoint, waiting or in flight.
//
// The prefill's transfer pipeline plans each chunk of each room into a WritePiece (its
// blocks to one decode rank) and appends it here. next_batch() cuts engine batches from
// the front: pieces of several rooms that are ready together travel in one batch (one
// header, one acknowledgement), and a piece larger than a batch is cut across several,
// so a big room is pipelined and a small one never waits for a big one's whole transfer.
// Batches that failed transiently come back through requeue() and go out again first.
//
// Accounting is in bytes: a room is done when every byte planned for it was acknowledged,
// however its pieces were cut.
//
// Thread safety: none; owned by the pipeline's dispatcher thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "engine/transfer_engine.h"
#include "engine/write_block.h"

namespace pdkv::kv {

// A room's identity inside the pipeline: the id plus a serial, so a piece of a room that
// ended never counts for a later room that reused the id.
struct RoomKey {
  uint64_t room = 0;
  uint64_t serial = 0;
  bool operator==(const RoomKey&) const = default;
};

struct WritePiece {
  RoomKey key;
  std::shared_ptr<const std::vector<engine::WriteBlock>> blocks;
  size_t begin = 0;  // [begin, end) of *blocks not sent yet
  size_t end = 0;
  uint64_t bytes = 0;  // of [begin, end)
  // Where the model's device stream made these sources valid (null: the caller had
  // synchronised); the engine's copies wait for it on the device.
  std::shared_ptr<const engine::ReadyEvent> ready;
};

struct BatchSegment {
  RoomKey key;
  size_t begin = 0;  // into WriteBatch::blocks
  size_t end = 0;
  uint64_t bytes = 0;
  std::shared_ptr<const engine::ReadyEvent> ready;  // the pieces' (WritePiece::ready)
};

struct WriteBatch {
  uint64_t id = 0;
  std::string endpoint;
  std::vector<engine::WriteBlock> blocks;
  std::vector<BatchSegment> segments;
  uint64_t bytes = 0;
  int attempt = 0;            // connection attempts used (transient failures)
  bool single_room = false;   // already split per room after a rejection
  TimePoint not_before{};     // retry backoff
  engine::SessionId session;  // what it was last submitted on
  TimePoint submitted_at{};   // last submission (stage wire)
  // The Success statuses riding this batch (status_note.h) and the rooms they are for;
  // built when the batch is first submitted, kept for its retries.
  std::string note;
  std::vector<RoomKey> noted;

  // The distinct ready points of its segments, for the engine's SourceReady::marks.
  engine::ReadyEvents ready_points() const;
};

// The part of `batch` whose segments `keep` accepts, as a batch of its own (blocks
// compacted, segments renumbered, bytes summed; id, attempt, session and flags copied;
// the note is not: its rooms changed, so it is built again when the part is submitted).
WriteBatch select_segments(const WriteBatch& batch,
                           const std::function<bool(const RoomKey&)>& keep);

class PeerLink {
 public:
  explicit PeerLink(std::string endpoint) : endpoint_(std::move(endpoint)) {}

  const std::string& endpoint() const { return endpoint_; }

  void add(WritePiece piece);
  // Puts a failed batch back; it goes out before new pieces once not_before passed.
  void requeue(WriteBatch batch);

  // The next batch to submit: a requeued one whose backoff passed, else one cut from the
  // pending pieces (at most max_bytes and max_blocks, at least one block). Segments of
  // rooms `alive` rejects are dropped. nullopt if nothing can go now; `wake_at` then
  // gets the earliest backoff still running, if any.
  std::optional<WriteBatch> next_batch(uint64_t max_bytes, size_t max_blocks, TimePoint now,
                                       const std::function<bool(const RoomKey&)>& alive,
                                       std::optional<TimePoint>* wake_at);

  // Removes every waiting piece and requeued batch, returning the rooms they belonged to
  // (each once): the link's peer is given up.
  std::vector<RoomKey> take_all_rooms();

  bool has_work() const { return !pending_.empty() || !requeued_.empty(); }
  uint64_t pending_bytes() const { return pending_bytes_; }

  // Session state, managed by the pipeline.
  std::optional<engine::SessionId> session;
  bool opening = false;
  TimePoint opening_since{};  // when the open in progress began (a failure's attempt time)
  int connect_failures = 0;
  TimePoint reconnect_at{};
  uint64_t inflight_bytes = 0;

 private:
  std::string endpoint_;
  std::deque<WritePiece> pending_;
  uint64_t pending_bytes_ = 0;
  std::deque<WriteBatch> requeued_;
};

}  // namespace pdkv::kv
