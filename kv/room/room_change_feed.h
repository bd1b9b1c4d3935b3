// RoomChangeFeed: which rooms' visible status changed since the caller last asked, so a
// serving engine's scheduler, which checks its transfers every step, can poll the few
// that moved instead of every room it holds (at 1024 rooms in flight, a poll of each
// per step was a large part of a room's CPU).
//
// The feed records nothing until its first take() (a manager nobody asks keeps no list),
// and keeps at most `capacity` rooms between two calls: beyond that it forgets them and
// the next take() says so. Either way the caller then polls every room once, which is
// always correct; a list, when given, names every room whose status changed (each once,
// in the order of their first change since the last call), possibly with rooms that
// changed and changed back, never missing one.
//
// Thread safety: every method may be called from any thread; note() takes only the
// feed's own lock, so callers may hold theirs (it is the innermost lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_set>
#include <vector>

#include "common/mutex.h"

namespace pdkv::kv {

class RoomChangeFeed {
 public:
  // 65,536 rooms (a few hundred KiB) is far above the rooms a rank holds at once.
  static constexpr size_t kDefaultCapacity = 65536;
  explicit RoomChangeFeed(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // `room`'s status changed (as poll() shows it).
  void note(uint64_t room);

  // The rooms noted since the last call; nullopt on the first call (the feed starts now)
  // and when more than `capacity` rooms changed in between: poll every room then.
  std::optional<std::vector<uint64_t>> take();

 private:
  const size_t capacity_;
  Mutex mu_;
  bool recording_ PDKV_GUARDED_BY(mu_) = false;
  bool overflowed_ PDKV_GUARDED_BY(mu_) = false;
  std::vector<uint64_t> rooms_ PDKV_GUARDED_BY(mu_);
  std::unordered_set<uint64_t> listed_ PDKV_GUARDED_BY(mu_);
};

}  // namespace pdkv::kv
