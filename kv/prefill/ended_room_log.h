// Rooms a prefill rank failed recently, with their failures (cause, stage, reason), so that a
// message arriving after the room ended (a decode's pre-allocation that crossed the prefill's abort
// on the wire) is answered with that reason at once instead of opening a room nobody will serve,
// which the decode would only notice at its waiting timeout.
//
// Bounded twice: entries expire (the bootstrap timeout: no later pre-allocation can be
// valid) and at most `capacity` are kept, oldest dropped first. Not a room table: it
// holds no pages or plans, and active_rooms() does not count it.
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "common/mutex.h"
#include "kv/room/failure_cause.h"

namespace pdkv::kv {

class EndedRoomLog {
 public:
  explicit EndedRoomLog(size_t capacity = 1 << 16) : capacity_(capacity) {}

  void record(uint64_t room, RoomFailure failure, TimePoint expiry);
  // How `room` failed, if it did and the entry has not expired at `at`.
  std::optional<RoomFailure> find(uint64_t room, TimePoint at) const;
  // Drops the entries expired at `at`.
  void purge(TimePoint at);
  size_t size() const;

 private:
  struct Entry {
    RoomFailure failure;
    TimePoint expiry;
  };
  void drop_front() PDKV_REQUIRES(mu_);

  const size_t capacity_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Entry> entries_ PDKV_GUARDED_BY(mu_);
  std::deque<uint64_t> order_ PDKV_GUARDED_BY(mu_);  // insertion order, for eviction
};

}  // namespace pdkv::kv
