#include "kv/prefill/ended_room_log.h"

namespace pdkv::kv {

void EndedRoomLog::record(uint64_t room, RoomFailure failure, TimePoint expiry) {
  if (capacity_ == 0) return;
  MutexLock lock(mu_);
  auto [it, inserted] = entries_.try_emplace(room, Entry{std::move(failure), expiry});
  if (!inserted) return;  // the first failure is the one that ended it
  order_.push_back(room);
  while (entries_.size() > capacity_) drop_front();
}

std::optional<RoomFailure> EndedRoomLog::find(uint64_t room, TimePoint at) const {
  MutexLock lock(mu_);
  auto it = entries_.find(room);
  if (it == entries_.end() || it->second.expiry <= at) return std::nullopt;
  return it->second.failure;
}

void EndedRoomLog::purge(TimePoint at) {
  MutexLock lock(mu_);
  // Expiries grow with insertion order (one fixed TTL), so expired entries are in front.
  while (!order_.empty()) {
    auto it = entries_.find(order_.front());
    if (it != entries_.end() && it->second.expiry > at) break;
    drop_front();
  }
}

size_t EndedRoomLog::size() const {
  MutexLock lock(mu_);
  return entries_.size();
}

void EndedRoomLog::drop_front() {
  entries_.erase(order_.front());
  order_.pop_front();
}

}  // namespace pdkv::kv
