// PrefillManager's decode registrations: the control messages' entry, a decode's
// buffer registration checked against this rank's layout, and who counts as registered.
#include <utility>
#include <variant>

#include "common/logging.h"
#include "kv/decode/room_grant.h"
#include "kv/prefill/prefill_manager.h"
#include "kv/runtime/manager_common.h"

namespace pdkv::kv {

void PrefillManager::on_message(proto::Message message) {
  if (runtime_.stopping()) return;
  if (const proto::RankIdentity* sender = sender_of(message)) {
    heard_from(*sender);
  }
  if (auto* reg = std::get_if<proto::BufferRegistration>(&message)) {
    on_registration(std::move(*reg));
  } else if (auto* pre = std::get_if<proto::PreAllocation>(&message)) {
    on_pre_allocation(std::move(*pre));
  } else if (auto* abort = std::get_if<proto::Abort>(&message)) {
    on_abort(*abort);
  } else if (auto* ping = std::get_if<proto::Ping>(&message)) {
    on_ping(*ping);
  } else if (std::holds_alternative<proto::Pong>(message)) {
    // An answer to our probe: heard_from() counted it.
  } else {
    PDKV_LOG_WARN_LIMITED("prefill rank {} ignores an unexpected message type",
                          identity_.engine_rank);
  }
}

PrefillManager::DecodePeer* PrefillManager::registered_decode(const proto::RankIdentity& sender) {
  auto peer = decodes_.find(sender.control_endpoint);
  if (peer == decodes_.end() || peer->second.registration.decode.incarnation != sender.incarnation)
    return nullptr;
  return &peer->second;
}

void PrefillManager::heard_from(const proto::RankIdentity& sender) {
  MutexLock lock(mu_);
  if (DecodePeer* peer = registered_decode(sender)) peer->liveness.heard();
}

void PrefillManager::on_registration(proto::BufferRegistration reg) {
  const std::string key = reg.decode.control_endpoint;
  Status layout = check_layout_compatible(config_.args, reg.layout);
  FragmentList fragments;
  if (layout.ok()) {
    // Checked here, once, not for each room that names them.
    Result<FragmentList> checked = checked_fragment_list(config_.args, reg, reg.fragments);
    if (checked.ok()) {
      fragments = std::move(checked).value();
    } else {
      layout = checked.status().with_context("the registration's head fragments");
    }
  }
  std::vector<proto::Fragment>().swap(reg.fragments);  // kept once, as `fragments`
  const uint64_t incarnation = reg.decode.incarnation;
  Status over_cap;
  bool proven = false;  // answered on the decode's socket, not a one-off one
  uint64_t challenge = 0;
  {
    MutexLock lock(mu_);
    auto it = decodes_.find(key);
    if (it == decodes_.end() &&
        decodes_.size() >= static_cast<size_t>(config_.options.max_decode_peers)) {
      // Bounded: a flood of registrations from made-up endpoints cannot grow the table.
      over_cap = failed_precondition("this prefill rank already serves " +
                                     std::to_string(decodes_.size()) +
                                     " decode ranks (PDKV_MAX_DECODE_PEERS)");
    } else if (it == decodes_.end() || it->second.registration.decode.incarnation == incarnation) {
      // A new decode, or the registered one again (its answer was lost): same challenge.
      // A proven decode's registration stays as it was proven (a resend is identical; a
      // different one naming its endpoint and incarnation is not the decode's).
      DecodePeer& peer = decodes_[key];
      if (!peer.proven) {
        if (peer.challenge == 0) peer.challenge = random_secret_id();
        peer.registration = std::move(reg);
        peer.layout_status = layout;
        peer.fragments = std::move(fragments);
      }
      // It registers again after it lost us (a cut link, our silence): sends to its engine
      // may succeed again, so a breaker opened while it was away no longer refuses them.
      failed_peers_.clear(peer.registration.decode.engine_endpoint);
      peer.liveness.heard();
      challenge = peer.challenge;
      layout = peer.layout_status;
      proven = peer.proven;
    } else {
      // Another incarnation at a registered decode's endpoint. The answer goes to the
      // endpoint, so only a process receiving there learns the challenge that makes it
      // the decode (proven_decode()): a restarted decode does at once, a stranger that
      // merely names the endpoint never does, and the registered decode's rooms go on.
      std::optional<DecodeRegistration>& next = it->second.successor;
      if (!next || next->registration.decode.incarnation != incarnation) {
        next = DecodeRegistration{std::move(reg), layout, random_secret_id(), std::move(fragments)};
      }
      challenge = next->challenge;
    }
  }
  if (!over_cap.ok()) {
    PDKV_LOG_WARN_LIMITED("registration from decode {} refused: {}", key, over_cap.message());
    proto::RegistrationResult refusal;
    refusal.prefill = identity_;
    refusal.decode_incarnation = incarnation;
    refusal.reason = over_cap.message();
    send_to_decode(key, false, refusal);
    return;
  }
  proto::RegistrationResult result;
  result.prefill = identity_;
  result.decode_incarnation = incarnation;
  result.accepted = layout.ok();
  result.reason = layout.ok() ? "" : layout.message();
  if (result.accepted) result.challenge = challenge;
  if (!layout.ok())
    PDKV_LOG_ERROR_LIMITED("registration from decode {} refused: {}", key, layout.message());
  send_to_decode(key, proven, result);
}

void PrefillManager::send_to_decode(const std::string& endpoint, bool proven,
                                    const proto::Message& message) {
  if (!channel_) return;
  if (proven) {
    Outbox out;
    out.add(endpoint, message);
    flush(out);
    return;
  }
  // No socket is kept for a decode that has not proven it receives at its endpoint: a
  // flood of registrations (or their Pings) naming made-up endpoints must not pile up
  // sockets. A real decode whose answer was dropped by the one-off rate sends again.
  Status sent = channel_->send_once(endpoint, message);
  if (!sent.ok()) PDKV_LOG_DEBUG("answer to decode {} not sent: {}", endpoint, sent.to_string());
}

}  // namespace pdkv::kv
