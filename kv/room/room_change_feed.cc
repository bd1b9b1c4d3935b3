#include "kv/room/room_change_feed.h"

#include <utility>

namespace pdkv::kv {

void RoomChangeFeed::note(uint64_t room) {
  MutexLock lock(mu_);
  if (!recording_ || overflowed_) return;
  if (!listed_.insert(room).second) return;
  if (rooms_.size() >= capacity_) {
    overflowed_ = true;  // forget them all: the next take() asks for a full poll
    rooms_ = {};
    listed_ = {};
    return;
  }
  rooms_.push_back(room);
}

std::optional<std::vector<uint64_t>> RoomChangeFeed::take() {
  MutexLock lock(mu_);
  const bool complete = recording_ && !overflowed_;
  recording_ = true;
  overflowed_ = false;
  std::vector<uint64_t> rooms;
  rooms.swap(rooms_);
  listed_.clear();
  if (!complete) return std::nullopt;
  return rooms;
}

}  // namespace pdkv::kv
