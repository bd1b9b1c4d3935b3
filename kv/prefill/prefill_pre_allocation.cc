// PrefillManager's pre-allocations and aborts from decodes: a decode proves itself by
// its challenge, and its pre-allocation becomes the room's DestinationPlan.
#include <utility>

#include "common/logging.h"
#include "kv/prefill/prefill_manager.h"

namespace pdkv::kv {

PrefillManager::DecodePeer* PrefillManager::proven_decode(const proto::PreAllocation& pre,
                                                          Proof& proof) {
  auto it = decodes_.find(pre.decode.control_endpoint);
  if (it == decodes_.end()) return nullptr;
  DecodePeer& peer = it->second;
  if (peer.registration.decode.incarnation == pre.decode.incarnation) {
    if (pre.registration_challenge != peer.challenge) return nullptr;
    proof.first = !peer.proven;
    peer.proven = true;
    return &peer;
  }
  if (!peer.successor ||
      peer.successor->registration.decode.incarnation != pre.decode.incarnation ||
      peer.successor->challenge != pre.registration_challenge) {
    return nullptr;
  }
  for (const auto& [room, r] : rooms_) {
    if (r.destinations.count(it->first)) proof.orphaned.push_back(room);
  }
  proof.first = true;
  proof.stale_engine_endpoint = peer.registration.decode.engine_endpoint;
  failed_peers_.clear(peer.successor->registration.decode.engine_endpoint);
  static_cast<DecodeRegistration&>(peer) = std::move(*peer.successor);
  peer.successor.reset();
  peer.liveness.heard();
  peer.proven = true;
  return &peer;
}

void PrefillManager::on_pre_allocation(proto::PreAllocation pre) {
  const std::string key = pre.decode.control_endpoint;
  const uint64_t room = pre.room;
  const uint64_t ticket = pre.ticket;
  Status refused;
  FailureCause refused_cause = FailureCause::kBadPreAllocation;
  {
    // Only a registered decode (this incarnation) is answered or may touch a room: a
    // pre-allocation naming anyone else is dropped, so a stranger can neither fail a room
    // with one nor make this rank send to an address it chose. (A real decode registers
    // first and pre-allocates only once the registration was answered.)
    Proof proof;
    std::string engine_endpoint;
    {
      MutexLock lock(mu_);
      DecodePeer* peer = proven_decode(pre, proof);
      if (peer == nullptr) {
        PDKV_LOG_WARN_LIMITED(
            "prefill rank {} drops a pre-allocation of room {} from {}: not a registered decode "
            "(not the incarnation that registered, or without its registration challenge)",
            identity_.engine_rank, room, key);
        return;
      }
      // It is up and wants KV: a breaker opened while it was unreachable (a cut link)
      // lets its next transfer through as a probe instead of refusing its new rooms.
      failed_peers_.end_cooldown(peer->registration.decode.engine_endpoint);
      // Its first proof (or a restart's): connect the data plane now, not at registration
      // (which anyone can send naming any engine address).
      if (proof.first && peer->layout_status.ok())
        engine_endpoint = peer->registration.decode.engine_endpoint;
    }
    if (proof.stale_engine_endpoint) pipeline_->reset_peer(*proof.stale_engine_endpoint);
    if (proof.first) channel_->connect(key);  // its statuses go there
    if (!engine_endpoint.empty()) pipeline_->prepare_peer(engine_endpoint);
    // The decode restarted at the same endpoint: rooms routed to its old buffers are lost.
    for (uint64_t lost : proof.orphaned) {
      fail_room(lost, FailureCause::kPeerRestarted, "decode " + key + " restarted");
    }
  }
  if (auto ended = ended_.find(room, now())) {
    // Crossed our failure on the wire: answer with it instead of opening a room.
    proto::TransferStatus status = failed_status(room, *ended);
    status.ticket = pre.ticket;
    Outbox out;
    out.add(key, std::move(status));
    flush(out);
    return;
  }
  {
    MutexLock lock(mu_);
    DecodePeer* peer = registered_decode(pre.decode);
    if (peer == nullptr) {
      return;  // gone or registered anew meanwhile: nothing to answer
    } else if (!peer->layout_status.ok()) {
      refused = peer->layout_status;
      refused_cause = FailureCause::kLayoutMismatch;
    } else {
      // heard_from() counted the message already (same registered sender).
      if (auto held_room = rooms_.find(room); held_room != rooms_.end()) {
        auto held = held_room->second.destinations.find(key);
        if (held != held_room->second.destinations.end() &&
            held->second->pre_allocation().ticket != ticket) {
          // A resend carries the room's ticket; a pre-allocation under another ticket is
          // not from the decode that opened the room (or from a room it reopened under the
          // same id while this one lives): the first one stays.
          PDKV_LOG_WARN_LIMITED(
              "prefill rank {} drops a second pre-allocation of room {} from {} under another "
              "ticket",
              identity_.engine_rank, room, key);
          return;
        }
      }
      const uint64_t own_cost = pre_allocation_cost(pre);
      const uint64_t shared_cost = pre_allocation_cost(pre, /*fragments_shared=*/true);
      PlanSharing share = peer->last_plan_parts;
      share.registered_fragments = peer->fragments;
      auto plan = DestinationPlan::create(config_.args, peer->registration, std::move(pre), share);
      // The registration's list or an earlier room's is held once, not by this room.
      const bool shared = plan.ok() && (plan->fragments() == share.fragments ||
                                        plan->fragments() == share.registered_fragments);
      Result<PrefillRoom*> pending =
          plan.ok() ? room_for_peer_message(room, key, shared ? shared_cost : own_cost)
                    : Result<PrefillRoom*>(plan.status());
      if (!plan.ok()) {
        refused = plan.status();
        if (refused.code() == StatusCode::kOutOfRange) refused_cause = FailureCause::kOutOfRange;
      } else if (!pending.ok()) {
        refused = pending.status();
      } else {
        PrefillRoom& r = **pending;
        if (r.destinations.empty() && !r.sender_open) {
          r.first_seen = now();
          note_orphan_deadline(r.first_seen);
        }
        r.required_destinations = plan->pre_allocation().required_dst_info_num;
        peer->last_plan_parts = plan->shared_parts();
        r.destinations[key] = std::make_shared<const DestinationPlan>(std::move(plan).value());
        maybe_bootstrap(room, r);
      }
    }
  }
  if (refused.ok()) return;
  const std::string reason = "pre-allocation of room " + std::to_string(room) + " from " + key +
                             " refused: " + refused.message();
  PDKV_LOG_ERROR_LIMITED("{}", reason);  // one per message a peer sends
  bool known;
  {
    MutexLock lock(mu_);
    known = rooms_.count(room) > 0;
  }
  if (known) {
    fail_room(room, refused_cause, reason);
  }
  // The sender of the bad pre-allocation is not a destination yet: tell it directly.
  proto::TransferStatus status =
      failed_status(room, RoomFailure{refused_cause, FailureStage::kBootstrap, reason});
  status.ticket = ticket;
  Outbox out;
  out.add(key, std::move(status));
  flush(out);
}

void PrefillManager::on_abort(const proto::Abort& abort) {
  std::string reason = "aborted by decode " + abort.sender.control_endpoint +
                       (abort.reason.empty() ? "" : ": " + abort.reason);
  // The decode's cause as seen from here (its own abort is an abort by the peer); a cause
  // this build does not know still is the decode giving up on the room.
  const FailureCause cause =
      as_seen_by_peer(failure_cause_from_wire(abort.cause).value_or(FailureCause::kAbortedByPeer));
  {
    MutexLock lock(mu_);
    // Only a registered decode (this incarnation) may abort, and only a room it
    // pre-allocated once the room has its destinations: anyone else's Abort is dropped.
    // A decode whose pre-allocation is here must name that pre-allocation's ticket.
    DecodePeer* peer = registered_decode(abort.sender);
    auto known = rooms_.find(abort.room);
    bool of_room = true;
    if (known != rooms_.end() && !known->second.destinations.empty()) {
      auto dest = known->second.destinations.find(abort.sender.control_endpoint);
      of_room = dest != known->second.destinations.end() &&
                dest->second->pre_allocation().ticket == abort.ticket;
    }
    if (peer == nullptr || !of_room) {
      PDKV_LOG_WARN_LIMITED(
          "prefill rank {} drops an Abort of room {} from {}: not a decode of that room",
          identity_.engine_rank, abort.room, abort.sender.control_endpoint);
      return;
    }
    if (ended_.find(abort.room, now())) return;  // ended here already (e.g. our own abort)
    if (!board_.state(abort.room)) {
      // No KVSender yet: keep the abort (like an early pre-allocation, dropped after the
      // bootstrap timeout if no sender ever opens) so the sender fails when it opens.
      Result<PrefillRoom*> pending =
          room_for_peer_message(abort.room, abort.sender.control_endpoint, 0);
      if (!pending.ok()) {
        PDKV_LOG_WARN_LIMITED("prefill rank {} drops an Abort of room {}: {}",
                              identity_.engine_rank, abort.room, pending.status().message());
        return;
      }
      PrefillRoom& r = **pending;
      if (r.first_seen == TimePoint{}) {
        r.first_seen = now();
        note_orphan_deadline(r.first_seen);
      }
      if (!r.aborted_early) {
        r.aborted_early = RoomFailure{cause, FailureStage::kBootstrap, std::move(reason)};
      }
      return;
    }
  }
  fail_room(abort.room, cause, reason);
}

}  // namespace pdkv::kv
