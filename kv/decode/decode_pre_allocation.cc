// DecodeManager's pre-allocation protocol: a prefill rank's answer to our registration,
// the pre-allocations each target is ready for, and what the channel refused, sent again.
#include <algorithm>
#include <utility>
#include <variant>

#include "common/logging.h"
#include "kv/decode/decode_manager.h"

namespace pdkv::kv {

void DecodeManager::on_registration_result(const proto::RegistrationResult& result) {
  if (result.decode_incarnation != identity_.incarnation) return;  // for an earlier us
  std::vector<uint64_t> rooms;
  const std::string& endpoint = result.prefill.control_endpoint;
  Outbox out;
  {
    MutexLock lock(mu_);
    PrefillPeer& peer = prefills_[endpoint];
    peer.incarnation = result.prefill.incarnation;
    peer.liveness.heard();
    peer.registration_acked = true;
    if (result.accepted) {
      peer.challenge = result.challenge;
      // Rooms that were waiting for this answer to send their pre-allocations.
      send_unsent_pre_allocations(&endpoint, nullptr, out);
    }
  }
  if (result.accepted) {
    flush(out);
    return;
  }
  {
    MutexLock lock(mu_);
    PrefillPeer& peer = prefills_[endpoint];
    peer.refused = failed_precondition(result.reason);
    for (const auto& [room, r] : rooms_) {
      for (const Target& t : r.targets) {
        if (t.endpoint == endpoint) rooms.push_back(room);
      }
    }
  }
  for (uint64_t room : rooms) {
    // Registering is part of bootstrapping, though the room shows WaitingForInput here
    // from the moment its route was resolved.
    fail_room(room, FailureCause::kLayoutMismatch,
              "prefill " + endpoint + " refused this decode's buffers: " + result.reason, true,
              FailureStage::kBootstrap);
  }
}

bool DecodeManager::ready_for_pre_allocation(const std::string& endpoint) const {
  auto peer = prefills_.find(endpoint);
  return peer != prefills_.end() && peer->second.registration_acked && peer->second.refused.ok();
}

void DecodeManager::send_pre_allocations(uint64_t room, DecodeRoom& r, Outbox& out,
                                         const std::set<std::string>* skip) {
  const PreAllocationRequest& req = *r.pending;
  if (r.pre_sent.size() != r.targets.size()) r.pre_sent.assign(r.targets.size(), false);
  bool all_sent = true;
  for (size_t i = 0; i < r.targets.size(); ++i) {
    if (r.pre_sent[i]) continue;
    const Target& t = r.targets[i];
    if (!ready_for_pre_allocation(t.endpoint) || (skip && skip->count(t.endpoint))) {
      all_sent = false;
      continue;
    }
    proto::PreAllocation pre;
    pre.room = room;
    pre.decode = identity_;
    pre.kind = t.route.kind;
    if (t.route.kind == proto::PreAllocKind::kTransfer) pre.write_grant = r.grant;
    pre.ticket = r.ticket;
    const PrefillPeer& peer = prefills_.at(t.endpoint);
    pre.registration_challenge = peer.challenge;
    pre.required_dst_info_num = t.route.required_dst_info_num;
    pre.decode_prefix_len = req.decode_prefix_len;
    if (t.route.kind == proto::PreAllocKind::kTransfer) {
      pre.dst_kv_pages = req.kv_pages;
      pre.aux_index = req.aux_index;
      // The lists go to the decode rank's state sources, and to every rank it takes KV
      // from when KV layers take their pages from a group's list.
      if (t.route.send_state || config_.args.has_group_kv_layers()) {
        pre.state_slots = req.state_slots;
        pre.state_slot_group_ends = req.state_group_ends;
        pre.copy_state_buffers = t.route.send_state;
      }
      // The prefill holds our registration's list (the challenge names that registration),
      // so the usual pre-allocation names it instead of repeating it.
      const bool registered =
          peer.registered_fragments == t.route.fragments ||
          (peer.registered_fragments && *peer.registered_fragments == *t.route.fragments);
      if (registered) {
        pre.fragments_from_registration = true;
      } else {
        pre.fragments = *t.route.fragments;
      }
      if (req.ownership) {
        proto::PageOwnership own;
        own.indices_are_local = true;
        own.page_transfer_mask.reserve(req.ownership->page_transfer_mask.size());
        for (uint8_t bit : req.ownership->page_transfer_mask)
          own.page_transfer_mask.push_back(bit != 0);
        own.page_local_indices = req.ownership->page_local_indices;
        pre.dst_l1_5 = std::move(own);
      }
    }
    // Counted as sent now; flush() takes it back if the channel refuses it.
    out.add(t.endpoint, std::move(pre));
    r.pre_sent[i] = true;
  }
  if (!all_sent) {
    unsent_pre_allocations_.insert(room);
    return;
  }
  unsent_pre_allocations_.erase(room);
}

void DecodeManager::resend_unacknowledged() {
  Outbox out;
  {
    MutexLock lock(mu_);
    for (auto& [endpoint, peer] : prefills_) {
      if (!peer.registration_sent || peer.registration_acked ||
          now() - peer.registration_sent_at < kRegistrationRetry) {
        continue;
      }
      peer.registration_sent_at = now();
      out.add(endpoint, registration(peer.registered_fragments));
    }
    send_unsent_pre_allocations(nullptr, nullptr, out);
  }
  flush(out);
}

void DecodeManager::send_unsent_pre_allocations(const std::string* target,
                                                const std::set<std::string>* skip, Outbox& out) {
  std::vector<uint64_t> unsent(unsent_pre_allocations_.begin(), unsent_pre_allocations_.end());
  for (uint64_t room : unsent) {
    auto it = rooms_.find(room);
    if (it == rooms_.end() || !it->second.pending) {
      unsent_pre_allocations_.erase(room);
      continue;
    }
    const auto& targets = it->second.targets;
    if (target && std::none_of(targets.begin(), targets.end(),
                               [&](const Target& t) { return t.endpoint == *target; })) {
      continue;
    }
    send_pre_allocations(room, it->second, out, skip);
  }
}

void DecodeManager::flush(Outbox& out) {
  if (!channel_ || out.empty()) return;  // start() failed before the channel existed
  std::vector<Outbox::Unsent> unsent = out.flush(*channel_);
  if (unsent.empty()) return;
  // A peer that stops reading its queue (a stranger's flood whose answers pile up) makes
  // every flush end here: rate-limited, or it would write a line per flush.
  PDKV_LOG_WARN_LIMITED("{} control message(s) to {} not sent, will retry: {}", unsent.size(),
                        unsent.front().endpoint, unsent.front().why.to_string());
  // Pre-allocations go back to the timer's retry list; registrations are resent until
  // answered anyway; a lost ping is what liveness tolerates.
  MutexLock lock(mu_);
  for (const Outbox::Unsent& u : unsent) {
    const auto* pre = std::get_if<proto::PreAllocation>(&u.message);
    if (pre == nullptr) continue;
    auto it = rooms_.find(pre->room);
    if (it == rooms_.end()) continue;
    DecodeRoom& r = it->second;
    for (size_t i = 0; i < r.targets.size() && i < r.pre_sent.size(); ++i) {
      if (r.targets[i].endpoint == u.endpoint) r.pre_sent[i] = false;
    }
    unsent_pre_allocations_.insert(pre->room);
  }
}

}  // namespace pdkv::kv
