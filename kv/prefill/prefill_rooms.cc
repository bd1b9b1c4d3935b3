// PrefillManager's room bookkeeping: a room bootstrapped once every decode rank
// pre-allocated, handed to the pipeline, failed or dropped; the statuses it sends, and
// those the channel refused, sent again.
#include <iterator>
#include <utility>

#include "common/logging.h"
#include "kv/prefill/prefill_manager.h"
#include "kv/runtime/manager_common.h"

namespace pdkv::kv {

void PrefillManager::maybe_bootstrap(uint64_t room, PrefillRoom& r) {
  if (!r.sender_open || r.required_destinations == 0 ||
      r.destinations.size() < r.required_destinations) {
    return;
  }
  // Once only: bootstrap moves the room past Bootstrapping for good. A room that failed
  // meanwhile, or left the board (it ended), is not started either.
  if (board_.state(room) != RoomState::kBootstrapping) return;
  std::vector<TransferDestination> targets;
  for (const auto& [key, dest] : r.destinations) {
    if (dest->is_dummy()) continue;
    auto peer = decodes_.find(key);
    if (peer == decodes_.end()) continue;
    std::shared_ptr<TransferChecksum> checksum;
    if (config_.options.verify_checksum) {
      checksum = std::make_shared<TransferChecksum>();
      r.checksums[key] = checksum;
    }
    targets.push_back(
        TransferDestination{key, peer->second.registration.decode.engine_endpoint, dest, checksum});
  }
  pipeline_->start_room(room, std::move(targets));
  board_.advance(room, RoomState::kWaitingForInput);
  board_.set_deadline(room, now() + config_.options.waiting_timeout, FailureCause::kWaitingTimeout,
                      "waiting timeout: the transfer did not finish within " +
                          format_seconds(config_.options.waiting_timeout) + " of bootstrap");
  RoomState state = RoomState::kWaitingForInput;
  for (TransferChunk& chunk : r.waiting_chunks) {
    hand_to_pipeline(room, state, std::move(chunk));
    state = RoomState::kTransferring;
  }
  r.waiting_chunks.clear();
}

void PrefillManager::hand_to_pipeline(uint64_t room, RoomState state, TransferChunk chunk,
                                      bool wake) {
  if (state != RoomState::kTransferring) board_.advance(room, RoomState::kTransferring);
  pipeline_->add_chunk(room, std::move(chunk), wake);
}

Result<PrefillManager::PrefillRoom*> PrefillManager::room_for_peer_message(
    uint64_t room, const std::string& decode, uint64_t bytes) {
  auto it = rooms_.find(room);
  if (it != rooms_.end() && it->second.sender_open) return &it->second;
  PDKV_RETURN_IF_ERROR(pending_.charge(room, decode, bytes));
  return &rooms_[room];
}

void PrefillManager::drop_room(uint64_t room) {
  pending_.release(room);
  rooms_.erase(room);
  awaiting_metadata_.erase(room);
  metadata_.close(room);
  board_.erase(room);
}

void PrefillManager::fail_room(uint64_t room, FailureCause cause, const std::string& reason,
                               std::optional<FailureStage> stage) {
  Outbox out;
  bool known = board_.fail(room, cause, reason, stage);
  // The first failure is the one kept, told and counted; a room without a KVSender yet
  // (no board entry) fails before it was bootstrapped.
  RoomFailure failure{cause, stage.value_or(FailureStage::kBootstrap), reason};
  if (auto kept = board_.get(room); kept && kept->state == RoomState::kFailed) {
    failure = RoomFailure{kept->failure_cause, kept->failure_stage, kept->failure_reason};
  }
  {
    MutexLock lock(mu_);
    auto it = rooms_.find(room);
    if (it == rooms_.end() && !known) return;
    if (it != rooms_.end()) {
      proto::TransferStatus status = failed_status(room, failure);
      for (const auto& [key, dest] : it->second.destinations) {
        if (dest->is_dummy()) continue;
        status.ticket = dest->pre_allocation().ticket;
        out.add(key, status);
      }
      // Whether or not the pipeline holds the room (bootstrapped): for a room it does not
      // hold, cancelling finds nothing to drop.
      if (pipeline_) pipeline_->cancel_room(room);
    }
    drop_room(room);
  }
  metrics_.room_failed(failure.cause);
  ended_.record(room, std::move(failure), now() + config_.options.bootstrap_timeout);
  if (known) {
    PDKV_LOG_WARN("room {} failed: {}", room, reason);
  } else {
    // No KVSender here: a room only a decode's pre-allocation opened, as many as a peer
    // cares to send (bounded by the pending-room caps, not by this process's requests).
    PDKV_LOG_WARN_LIMITED("room {} (not opened here yet) failed: {}", room, reason);
  }
  flush(out);
}

proto::TransferStatus PrefillManager::status_of(uint64_t room, proto::TransferState state) const {
  proto::TransferStatus status;
  status.room = room;
  status.state = state;
  status.prefill_engine_rank = identity_.engine_rank;
  status.prefill_attn_tp_rank = identity_.attn_tp_rank;
  return status;
}

proto::TransferStatus PrefillManager::failed_status(uint64_t room,
                                                    const RoomFailure& failure) const {
  proto::TransferStatus status = status_of(room, proto::TransferState::kFailed);
  status.failure_reason = failure.reason;
  status.failure_cause = static_cast<uint8_t>(failure.cause);
  status.failure_stage = static_cast<uint8_t>(failure.stage);
  return status;
}

void PrefillManager::flush(Outbox& out) {
  if (!channel_ || out.empty()) return;  // start() failed before the channel existed
  std::vector<Outbox::Unsent> unsent = out.flush(*channel_);
  if (unsent.empty() || runtime_.stopping()) return;
  // A peer that stops reading its queue (a stranger's flood whose answers pile up) makes
  // every flush end here: rate-limited, or it would write a line per flush.
  PDKV_LOG_WARN_LIMITED("{} control message(s) to {} not sent, will retry: {}", unsent.size(),
                        unsent.front().endpoint, unsent.front().why.to_string());
  MutexLock lock(outbox_mu_);
  for (Outbox::Unsent& u : unsent) {
    if (unsent_statuses_.size() >= kMaxUnsentStatuses) {
      PDKV_LOG_ERROR_LIMITED(
          "a control message to {} dropped: {} messages already wait for a retry",
          unsent_statuses_.front().endpoint, unsent_statuses_.size());
      unsent_statuses_.pop_front();
    }
    unsent_statuses_.push_back(
        UnsentStatus{std::move(u.endpoint), std::move(u.message), now() + kStatusRetryWindow});
  }
}

void PrefillManager::resend_statuses() {
  std::deque<UnsentStatus> pending;
  {
    MutexLock lock(outbox_mu_);
    if (unsent_statuses_.empty()) return;
    pending.swap(unsent_statuses_);
  }
  std::set<std::string> unreachable;  // keep per-peer order: stop at its first refusal
  std::deque<UnsentStatus> still_unsent;
  for (UnsentStatus& u : pending) {
    if (!unreachable.count(u.endpoint) && channel_->send(u.endpoint, u.status).ok()) continue;
    unreachable.insert(u.endpoint);
    if (now() < u.give_up) {
      still_unsent.push_back(std::move(u));
    } else {
      PDKV_LOG_ERROR("a control message to {} given up after {} ms of retries", u.endpoint,
                     kStatusRetryWindow.count());
    }
  }
  MutexLock lock(outbox_mu_);
  // Ahead of any queued meanwhile, in their original order.
  unsent_statuses_.insert(unsent_statuses_.begin(), std::make_move_iterator(still_unsent.begin()),
                          std::make_move_iterator(still_unsent.end()));
}

}  // namespace pdkv::kv
