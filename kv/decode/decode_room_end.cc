// DecodeManager: how a room ends. Its write grant is revoked first (fencing), then it
// fails or leaves the tables, and its prefill ranks are told.
#include <utility>

#include "common/logging.h"
#include "kv/decode/decode_manager.h"

namespace pdkv::kv {

void DecodeManager::revoke_grant(uint64_t room, DecodeRoom& r, engine::GrantEnd end) {
  if (r.grant == 0) return;
  const uint64_t grant = std::exchange(r.grant, 0);
  std::shared_ptr<RoomHandle> handle = board_.handle(room);
  if (handle) handle->hold_terminal();
  // Runs at once when nothing admitted under the grant is still landing (the usual case:
  // a Success status comes after every batch was acknowledged), else on the receiver
  // thread that finishes the last such write.
  Status st = engine_->revoke_writes(
      grant,
      [handle] {
        if (handle) handle->release_terminal();
      },
      end);
  if (!st.ok()) {
    if (handle) handle->release_terminal();
    PDKV_LOG_WARN("room {}: revoking its write grant: {}", room, st.to_string());
  }
}

void DecodeManager::drop_room(uint64_t room) {
  if (auto it = rooms_.find(room); it != rooms_.end()) revoke_grant(room, it->second);
  rooms_.erase(room);
  unsent_pre_allocations_.erase(room);
  board_.erase(room);
}

void DecodeManager::fail_room(uint64_t room, FailureCause cause, const std::string& reason,
                              bool tell_prefill, std::optional<FailureStage> stage) {
  {
    // Fence first: no write of this room is admitted from here on, and its end stays
    // hidden until what was admitted before has landed (the engine may reuse the pages
    // the moment it sees Failed).
    MutexLock lock(mu_);
    if (auto it = rooms_.find(room); it != rooms_.end()) revoke_grant(room, it->second);
  }
  bool known = board_.fail(room, cause, reason, stage);
  // What the board kept (the first failure) is what the prefill is told and counted.
  FailureCause kept = cause;
  if (auto status = board_.get(room); status && status->state == RoomState::kFailed) {
    kept = status->failure_cause;
  }
  std::vector<std::string> notify;
  uint64_t ticket = 0;
  {
    MutexLock lock(mu_);
    auto it = rooms_.find(room);
    if (it == rooms_.end() && !known) return;
    if (it != rooms_.end() && it->second.abort_after_resolve) {
      drop_room(room);  // failed already; its resolution failed too, so nobody to tell
      return;
    }
    if (it != rooms_.end() && tell_prefill) {
      DecodeRoom& r = it->second;
      if (r.resolved) {
        // Even without a pre-allocation: the prefill may hold the room's KVSender.
        for (const Target& t : r.targets) notify.push_back(t.endpoint);
        ticket = r.ticket;
      } else if (r.init_requested && cause == FailureCause::kAbortedLocally) {
        // The resolver is on it (bounded by the bootstrap deadline); it tells them.
        r.abort_after_resolve = reason;
        board_.erase(room);
        metrics_.room_failed(kept);
        PDKV_LOG_WARN("room {} failed: {}", room, reason);
        return;
      }
    }
    drop_room(room);
  }
  metrics_.room_failed(kept);
  PDKV_LOG_WARN("room {} failed: {}", room, reason);
  proto::Abort abort;
  abort.room = room;
  abort.sender = identity_;
  abort.reason = reason;
  abort.cause = static_cast<uint8_t>(kept);
  abort.ticket = ticket;
  Outbox out;
  for (const std::string& endpoint : notify) out.add(endpoint, abort);
  flush(out);
}

void DecodeManager::fail_rooms_on_device_fault() {
  const Status fault = device_fault_for_rooms();
  if (fault.ok()) return;
  std::vector<uint64_t> open;
  {
    MutexLock lock(mu_);
    for (const auto& [room, r] : rooms_) open.push_back(room);
  }
  for (uint64_t room : open) {
    fail_room(room, FailureCause::kDeviceFault,
              "this decode's device memory cannot be written any more: " + fault.message(), true);
  }
}

void DecodeManager::fail_open_rooms() {
  std::vector<uint64_t> open;
  {
    MutexLock lock(mu_);
    for (const auto& [room, r] : rooms_) open.push_back(room);
  }
  for (uint64_t room : open) {
    fail_room(room, FailureCause::kShutdown, "the decode manager shut down", true);
  }
}

}  // namespace pdkv::kv
