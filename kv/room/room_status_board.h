// RoomStatusBoard: the state, failure reason and deadline of every room a manager
// holds, with the update rule of room_state.h.
//
// Deadlines replace the reference's timeouts, which never fired (one's start time was
// never set, the other ran only in a state never entered): a room carries at
// most one deadline at a time (bootstrap timeout until it is bootstrapped, then the
// waiting timeout until it ends); expire_overdue() fails every room past its deadline
// with the cause and reason given when the deadline was set. The failure kept (cause,
// stage, reason) is the first one: later failures are usually consequences of the first (a peer
// that died makes every later send fail too), and the first is what an operator needs.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "kv/room/failure_cause.h"
#include "kv/room/room_change_feed.h"
#include "kv/room/room_state.h"

namespace pdkv::kv {

struct RoomStatus {
  RoomState state = RoomState::kBootstrapping;
  // Meaningful only when Failed: why (typed, for branching and metrics), where, and the
  // human message (empty unless Failed).
  FailureCause failure_cause = FailureCause::kInternal;
  FailureStage failure_stage = FailureStage::kBootstrap;
  std::string failure_reason;
};

// A room's status as its KVSender / KVReceiver sees it. The board writes through it on
// every change, and it outlives the board's entry: once a room ended and left every
// table, its handle still answers with the final state (poll() never goes backwards).
class RoomHandle {
 public:
  RoomStatus status() const {
    MutexLock lock(mu_);
    return visible();
  }

  // Blocks until status() is terminal or `deadline` passes, then returns status(): a
  // caller that has nothing else to do until the room ends (a decode step waiting for
  // its KV) wakes when it ends instead of polling on a timer.
  RoomStatus wait_terminal(TimePoint deadline) const {
    MutexLock lock(mu_);
    changed_.wait_until(mu_, deadline,
                        [&]() PDKV_REQUIRES(mu_) { return is_terminal(visible().state); });
    return visible();
  }

  // Fencing (engine/write_grant.h): between the revocation of a room's write grant and
  // the moment the writes admitted under it before have landed, the room's end is not
  // shown (status() reports the state before it), because an engine frees or reuses a
  // room's pages as soon as it sees the room end. Balanced calls; from any thread.
  void hold_terminal() {
    MutexLock lock(mu_);
    const RoomState before = visible().state;
    ++holds_;
    note_if_changed(before);
  }
  void release_terminal() {
    MutexLock lock(mu_);
    const RoomState before = visible().state;
    if (holds_ > 0) --holds_;
    if (holds_ == 0) changed_.notify_all();
    note_if_changed(before);
  }

 private:
  friend class RoomStatusBoard;
  void set(const RoomStatus& s) {
    MutexLock lock(mu_);
    const RoomState before = visible().state;
    status_ = s;
    if (!is_terminal(s.state)) before_terminal_ = s;
    changed_.notify_all();
    note_if_changed(before);
  }
  // Every later change of what status() shows is noted on `feed` as `room`.
  void watch(std::shared_ptr<RoomChangeFeed> feed, uint64_t room) {
    MutexLock lock(mu_);
    feed_ = std::move(feed);
    room_ = room;
  }
  void note_if_changed(RoomState before) const PDKV_REQUIRES(mu_) {
    if (feed_ && visible().state != before) feed_->note(room_);
  }
  RoomStatus visible() const PDKV_REQUIRES(mu_) {
    if (holds_ > 0 && is_terminal(status_.state)) return before_terminal_;
    return status_;
  }
  mutable Mutex mu_;
  mutable CondVar changed_;
  RoomStatus status_ PDKV_GUARDED_BY(mu_);
  RoomStatus before_terminal_ PDKV_GUARDED_BY(mu_);
  int holds_ PDKV_GUARDED_BY(mu_) = 0;
  std::shared_ptr<RoomChangeFeed> feed_ PDKV_GUARDED_BY(mu_);
  uint64_t room_ PDKV_GUARDED_BY(mu_) = 0;
};

class RoomStatusBoard {
 public:
  RoomStatusBoard() = default;
  RoomStatusBoard(const RoomStatusBoard&) = delete;
  RoomStatusBoard& operator=(const RoomStatusBoard&) = delete;

  // Adds `room` in Bootstrapping (or keeps an existing entry) and arms its deadline.
  // Returns the room's handle (the same one for every open of the same entry).
  std::shared_ptr<const RoomHandle> open(uint64_t room, TimePoint deadline,
                                         FailureCause expiry_cause, std::string expiry_reason);

  // Applies merge_room_state(); an unknown room is ignored (a late message for a room
  // that already ended must not recreate it). Returns the resulting state, or nullopt
  // for an unknown room.
  std::optional<RoomState> advance(uint64_t room, RoomState state);

  // Marks a known room Failed, keeping the first failure. `stage` unset = the stage of
  // the room's current state (stage_of()). Returns false if unknown.
  bool fail(uint64_t room, FailureCause cause, const std::string& reason,
            std::optional<FailureStage> stage = std::nullopt);

  // Replaces the deadline of a room that is not terminal.
  void set_deadline(uint64_t room, TimePoint deadline, FailureCause expiry_cause,
                    std::string expiry_reason);

  std::optional<RoomStatus> get(uint64_t room) const;
  // The room's state alone, or nullopt if unknown: get() without copying the failure's
  // reason, for paths that ask on every chunk.
  std::optional<RoomState> state(uint64_t room) const;
  // The room's handle (to hold its end while its writes drain), or nullptr if unknown.
  std::shared_ptr<RoomHandle> handle(uint64_t room) const;

  // Fails every non-terminal room whose deadline is before `now` and returns them.
  std::vector<uint64_t> expire_overdue(TimePoint now);

  // Earliest armed deadline, for a timer thread's sleep; nullopt if none.
  std::optional<TimePoint> next_deadline() const;

  void erase(uint64_t room);
  size_t size() const;

  // Rooms whose handle's status changed since the last call (RoomChangeFeed::take()).
  std::optional<std::vector<uint64_t>> changed_rooms() { return feed_->take(); }

  // Blocks until the room's state differs from `seen`, the room disappears, or
  // `deadline` passes. Returns the current status (nullopt if the room is gone).
  std::optional<RoomStatus> wait_for_change(uint64_t room, RoomState seen, TimePoint deadline);

 private:
  struct Entry {
    RoomStatus status;
    std::shared_ptr<RoomHandle> handle = std::make_shared<RoomHandle>();
    std::optional<TimePoint> deadline;
    FailureCause expiry_cause = FailureCause::kBootstrapTimeout;
    std::string expiry_reason;
  };
  // The room's entry, or nullptr if unknown.
  const Entry* find(uint64_t room) const PDKV_REQUIRES(mu_);

  mutable Mutex mu_;
  CondVar changed_;
  std::unordered_map<uint64_t, Entry> rooms_ PDKV_GUARDED_BY(mu_);
  const std::shared_ptr<RoomChangeFeed> feed_ = std::make_shared<RoomChangeFeed>();
  // No armed deadline is earlier (deadlines cleared since may leave it early, which only
  // costs a scan): expire_overdue() scans the rooms only from then on.
  TimePoint scan_from_ PDKV_GUARDED_BY(mu_) = TimePoint::max();
};

}  // namespace pdkv::kv
