// DecodeManager's incoming control messages: statuses (over ZeroMQ or riding a batch
// note), each checked against the room's targets and ticket, and prefill Aborts.
#include <algorithm>
#include <variant>

#include "common/logging.h"
#include "kv/decode/decode_manager.h"
#include "kv/pipeline/status_note.h"
#include "kv/runtime/manager_common.h"

namespace pdkv::kv {

void DecodeManager::on_message(proto::Message message) {
  if (runtime_.stopping()) return;
  if (const proto::RankIdentity* sender = sender_of(message)) heard_from(sender->control_endpoint);
  if (auto* status = std::get_if<proto::TransferStatus>(&message)) {
    on_status(*status);
  } else if (auto* result = std::get_if<proto::RegistrationResult>(&message)) {
    on_registration_result(*result);
  } else if (auto* pong = std::get_if<proto::Pong>(&message)) {
    on_pong(*pong);
  } else if (auto* abort = std::get_if<proto::Abort>(&message)) {
    on_abort(*abort);
  } else if (auto* ping = std::get_if<proto::Ping>(&message)) {
    // The prefill probes us too (its liveness check of this rank): answer at once, but
    // only a prefill this rank talks to: a Ping names its own reply address, and answering
    // strangers would open a socket per forged name.
    if (!knows_prefill(ping->sender.control_endpoint)) {
      PDKV_LOG_WARN_LIMITED("decode rank {} ignores a Ping from {}, a prefill it does not use",
                            identity_.engine_rank, ping->sender.control_endpoint);
      return;
    }
    answer_ping(*ping);
  } else {
    PDKV_LOG_WARN_LIMITED("decode rank {} ignores an unexpected message type",
                          identity_.engine_rank);
  }
}

void DecodeManager::on_note(std::span<const uint8_t> note) {
  if (runtime_.stopping()) return;
  // Peer input like any control message: each record decoded and checked, then the same
  // checks as a status from ZeroMQ (the room, a target prefill rank, the room's ticket).
  Status read = for_each_status(note, [this](const proto::TransferStatus& status) {
    metrics_.status_in_band();
    on_status(status);
  });
  if (!read.ok()) {
    PDKV_LOG_WARN_LIMITED("decode rank {} drops the rest of a batch note: {}",
                          identity_.engine_rank, read.to_string());
  }
}

Status DecodeManager::check_status_checksum(const proto::TransferStatus& status) const {
  if (!status.checksum_crc32c) {
    return data_loss(
        "PDKV_VERIFY_CHECKSUM is on here but the prefill sent no checksum; turn it on on the "
        "prefill too");
  }
  return verify_transfer_checksum(*status.checksum_crc32c, status.checksum_ranges, registered_,
                                  engine_->device_regions());
}

const DecodeManager::Target* DecodeManager::status_sender(const proto::TransferStatus& status,
                                                          const DecodeRoom& r) const {
  const auto tp = static_cast<int64_t>(status.prefill_attn_tp_rank);
  const Target* from = nullptr;
  for (const Target& t : r.targets) {
    if (t.route.prefill_tp_rank == tp) from = &t;
  }
  if (from == nullptr) {
    PDKV_LOG_WARN_LIMITED("room {}: status from prefill rank {}, which is not one of its targets",
                          status.room, tp);
    return nullptr;
  }
  if (status.ticket != r.ticket) {
    // Only a rank this room's pre-allocation reached knows the ticket: anyone else
    // (a stranger who guessed or learned the room id, a restarted rank) is dropped.
    PDKV_LOG_WARN_LIMITED(
        "decode rank {} drops a status of room {} claiming prefill rank {}: wrong ticket",
        identity_.engine_rank, status.room, tp);
    return nullptr;
  }
  return from;
}

void DecodeManager::on_status(const proto::TransferStatus& status) {
  const uint64_t room = status.room;
  const auto tp = static_cast<int64_t>(status.prefill_attn_tp_rank);
  std::string failure;
  FailureCause cause = FailureCause::kInternal;
  std::optional<FailureStage> stage;
  const bool verify =
      config_.options.verify_checksum && status.state == proto::TransferState::kSuccess;
  // A status asks for work (a re-read of every region it names) only once it is known to
  // come from one of the room's own prefill ranks: the room, target and ticket are checked
  // first, then the regions against what the room granted, before a byte is read.
  std::shared_ptr<const GrantedDestination> granted;
  {
    MutexLock lock(mu_);
    auto it = rooms_.find(room);
    if (it == rooms_.end()) return;  // ended already; a late message changes nothing
    if (status_sender(status, it->second) == nullptr) return;
    granted = it->second.granted;
  }
  // Re-reading the bytes can take a while for a big room: done outside mu_, on the bytes
  // as they are now (the room's data all arrived before its status).
  Status checksum;
  if (verify) {
    Status inside = granted ? check_ranges_granted(status.checksum_ranges, *granted)
                            : failed_precondition("the room granted nothing yet");
    if (!inside.ok()) {
      // Dropped, not failed: the room and its prefill's liveness stay as they were.
      PDKV_LOG_WARN_LIMITED("decode rank {} drops a status of room {} from prefill rank {}: {}",
                            identity_.engine_rank, room, tp, inside.message());
      return;
    }
    checksum = check_status_checksum(status);
  }
  {
    MutexLock lock(mu_);
    // Again: the room may have ended (or ended and reopened under the same id with a new
    // ticket) while its bytes were re-read.
    auto it = rooms_.find(room);
    if (it == rooms_.end()) return;
    DecodeRoom& r = it->second;
    const Target* from = status_sender(status, r);
    if (from == nullptr) return;
    auto peer = prefills_.find(from->endpoint);
    if (peer != prefills_.end()) {
      peer->second.liveness.heard();
    }
    if (status.state == proto::TransferState::kFailed) {
      // The prefill's cause and stage, as seen from here (its abort is ours "by peer").
      cause = as_seen_by_peer(
          failure_cause_from_wire(status.failure_cause).value_or(FailureCause::kInternal));
      stage = failure_stage_from_wire(status.failure_stage);
      failure = "prefill rank " + std::to_string(tp) + " (" + from->endpoint +
                ") failed the room: " +
                (status.failure_reason.empty() ? "unknown reason" : status.failure_reason);
    } else if (!checksum.ok()) {
      cause = FailureCause::kChecksumMismatch;
      stage = FailureStage::kCompletion;
      failure = "the KV from prefill rank " + std::to_string(tp) + " (" + from->endpoint +
                ") failed its end-to-end check: " + checksum.to_string();
    } else {
      if (from->route.kind != proto::PreAllocKind::kTransfer) return;
      r.responders.insert(tp);
      if (r.token == -1 && status.bootstrap_token != -1) r.token = status.bootstrap_token;
      if (r.ids.empty() && !status.spec_candidate_ids.empty()) r.ids = status.spec_candidate_ids;
      if (r.responders.size() < r.required_responses) return;
      {
        MutexLock meta_lock(r.metadata->mu_);
        r.metadata->token_ = r.token;
        r.metadata->ids_ = r.ids;
      }
      metrics_.observe(RoomStage::kEndToEnd, now() - r.opened);
      metrics_.room_succeeded();
      revoke_grant(room, r, engine::GrantEnd::kCompleted);
      board_.advance(room, RoomState::kSuccess);
      drop_room(room);
      return;
    }
  }
  fail_room(room, cause, failure, true, stage);
}

void DecodeManager::on_abort(const proto::Abort& abort) {
  {
    // Only a prefill rank this room was resolved to may end it: anyone else's Abort (a
    // stranger's, or another instance's naming a room it does not serve) is dropped.
    MutexLock lock(mu_);
    auto it = rooms_.find(abort.room);
    const bool from_target =
        it != rooms_.end() && abort.ticket == it->second.ticket &&
        std::any_of(it->second.targets.begin(), it->second.targets.end(),
                    [&](const Target& t) { return t.endpoint == abort.sender.control_endpoint; });
    if (!from_target) {
      PDKV_LOG_WARN_LIMITED(
          "decode rank {} drops an Abort of room {} from {}: not its prefill (or wrong ticket)",
          identity_.engine_rank, abort.room, abort.sender.control_endpoint);
      return;
    }
  }
  // A cause this build does not know still is the prefill giving up on the room.
  const FailureCause cause =
      as_seen_by_peer(failure_cause_from_wire(abort.cause).value_or(FailureCause::kAbortedByPeer));
  fail_room(abort.room, cause,
            "aborted by prefill " + abort.sender.control_endpoint +
                (abort.reason.empty() ? "" : ": " + abort.reason),
            true);
}

}  // namespace pdkv::kv
