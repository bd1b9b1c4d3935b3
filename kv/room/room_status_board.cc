#include "kv/room/room_status_board.h"

#include <algorithm>

namespace pdkv::kv {

std::shared_ptr<const RoomHandle> RoomStatusBoard::open(uint64_t room, TimePoint deadline,
                                                        FailureCause expiry_cause,
                                                        std::string expiry_reason) {
  MutexLock lock(mu_);
  auto [it, inserted] = rooms_.try_emplace(room);
  if (!is_terminal(it->second.status.state)) {
    it->second.deadline = deadline;
    it->second.expiry_cause = expiry_cause;
    it->second.expiry_reason = std::move(expiry_reason);
    scan_from_ = std::min(scan_from_, deadline);
  }
  if (inserted) {
    it->second.handle->watch(feed_, room);
    it->second.handle->set(it->second.status);
    changed_.notify_all();
  }
  return it->second.handle;
}

std::optional<RoomState> RoomStatusBoard::advance(uint64_t room, RoomState state) {
  MutexLock lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end()) return std::nullopt;
  RoomStatus& status = it->second.status;
  RoomState merged = merge_room_state(status.state, state);
  if (merged != status.state) {
    status.state = merged;
    it->second.handle->set(status);
    if (is_terminal(merged)) it->second.deadline.reset();
    changed_.notify_all();
  }
  return merged;
}

bool RoomStatusBoard::fail(uint64_t room, FailureCause cause, const std::string& reason,
                           std::optional<FailureStage> stage) {
  MutexLock lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end()) return false;
  RoomStatus& status = it->second.status;
  if (status.state == RoomState::kSuccess) return true;  // terminal; nothing to fail
  if (status.state != RoomState::kFailed) {
    status.failure_stage = stage.value_or(stage_of(status.state));
    status.state = RoomState::kFailed;
    status.failure_cause = cause;
    status.failure_reason = reason;
    it->second.handle->set(status);
    it->second.deadline.reset();
    changed_.notify_all();
  }
  return true;
}

void RoomStatusBoard::set_deadline(uint64_t room, TimePoint deadline, FailureCause expiry_cause,
                                   std::string expiry_reason) {
  MutexLock lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end() || is_terminal(it->second.status.state)) return;
  it->second.deadline = deadline;
  it->second.expiry_cause = expiry_cause;
  it->second.expiry_reason = std::move(expiry_reason);
  scan_from_ = std::min(scan_from_, deadline);
}

const RoomStatusBoard::Entry* RoomStatusBoard::find(uint64_t room) const {
  auto it = rooms_.find(room);
  return it == rooms_.end() ? nullptr : &it->second;
}

std::shared_ptr<RoomHandle> RoomStatusBoard::handle(uint64_t room) const {
  MutexLock lock(mu_);
  const Entry* entry = find(room);
  return entry ? entry->handle : nullptr;
}

std::optional<RoomStatus> RoomStatusBoard::get(uint64_t room) const {
  MutexLock lock(mu_);
  if (const Entry* entry = find(room)) return entry->status;
  return std::nullopt;
}

std::optional<RoomState> RoomStatusBoard::state(uint64_t room) const {
  MutexLock lock(mu_);
  if (const Entry* entry = find(room)) return entry->status.state;
  return std::nullopt;
}

std::vector<uint64_t> RoomStatusBoard::expire_overdue(TimePoint now) {
  std::vector<uint64_t> expired;
  MutexLock lock(mu_);
  // The timer asks every tick; with a thousand rooms in flight a scan per tick cost more
  // than a room's own control messages. No deadline is before scan_from_, so until then
  // nothing can be overdue; the scan below sets it to the earliest deadline it leaves.
  if (now < scan_from_) return expired;
  scan_from_ = TimePoint::max();
  for (auto& [room, entry] : rooms_) {
    if (entry.deadline && !is_terminal(entry.status.state) && *entry.deadline > now) {
      scan_from_ = std::min(scan_from_, *entry.deadline);
    }
    if (!entry.deadline || *entry.deadline > now || is_terminal(entry.status.state)) continue;
    entry.status.failure_stage = stage_of(entry.status.state);
    entry.status.state = RoomState::kFailed;
    entry.status.failure_cause = entry.expiry_cause;
    entry.status.failure_reason = entry.expiry_reason;
    entry.handle->set(entry.status);
    entry.deadline.reset();
    expired.push_back(room);
  }
  if (!expired.empty()) changed_.notify_all();
  return expired;
}

std::optional<TimePoint> RoomStatusBoard::next_deadline() const {
  MutexLock lock(mu_);
  std::optional<TimePoint> earliest;
  for (const auto& [room, entry] : rooms_) {
    if (entry.deadline && (!earliest || *entry.deadline < *earliest)) earliest = entry.deadline;
  }
  return earliest;
}

void RoomStatusBoard::erase(uint64_t room) {
  MutexLock lock(mu_);
  if (rooms_.erase(room) > 0) changed_.notify_all();
}

size_t RoomStatusBoard::size() const {
  MutexLock lock(mu_);
  return rooms_.size();
}

std::optional<RoomStatus> RoomStatusBoard::wait_for_change(uint64_t room, RoomState seen,
                                                           TimePoint deadline) {
  MutexLock lock(mu_);
  changed_.wait_until(mu_, deadline, [&]() PDKV_REQUIRES(mu_) {
    auto it = rooms_.find(room);
    return it == rooms_.end() || it->second.status.state != seen;
  });
  auto it = rooms_.find(room);
  if (it == rooms_.end()) return std::nullopt;
  return it->second.status;
}

}  // namespace pdkv::kv
