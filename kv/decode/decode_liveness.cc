// DecodeManager's liveness: the timer (deadlines, pings, resends), prefill ranks that
// stop answering, restart, close their connection or refuse ours, and route changes.
#include <utility>

#include "common/logging.h"
#include "kv/decode/decode_manager.h"
#include "kv/runtime/manager_common.h"
#include "kv/runtime/manager_timer.h"

namespace pdkv::kv {

bool DecodeManager::knows_prefill(const std::string& endpoint) const {
  MutexLock lock(mu_);
  return prefills_.count(endpoint) != 0;
}

void DecodeManager::heard_from(const std::string& endpoint) {
  MutexLock lock(mu_);
  auto it = prefills_.find(endpoint);
  if (it == prefills_.end()) return;
  it->second.liveness.heard();
}

void DecodeManager::on_pong(const proto::Pong& pong) {
  std::vector<uint64_t> rooms;
  const std::string& endpoint = pong.sender.control_endpoint;
  {
    MutexLock lock(mu_);
    auto it = prefills_.find(endpoint);
    if (it == prefills_.end()) return;
    PrefillPeer& peer = it->second;
    if (!peer.liveness.answers(pong.seq)) {
      // Not an answer to any probe of ours: a stranger's Pong must not fail our rooms.
      PDKV_LOG_WARN_LIMITED(
          "decode rank {} drops a Pong claiming to be from {}: it answers no probe",
          identity_.engine_rank, endpoint);
      return;
    }
    peer.liveness.heard();
    if (peer.incarnation == 0 || peer.incarnation == pong.sender.incarnation) {
      peer.incarnation = pong.sender.incarnation;
      return;
    }
    // A new process at the same endpoint: it knows nothing of our rooms or buffers.
    peer.incarnation = pong.sender.incarnation;
    peer.registration_sent = false;
    peer.registration_acked = false;
    peer.refused = Status();
    for (const auto& [room, r] : rooms_) {
      for (const Target& t : r.targets) {
        if (t.endpoint == endpoint) rooms.push_back(room);
      }
    }
  }
  for (uint64_t room : rooms)
    fail_room(room, FailureCause::kPeerRestarted, "prefill " + endpoint + " restarted", false);
}

void DecodeManager::timer_loop() {
  run_manager_timer(
      runtime_, board_, config_.options.heartbeat_interval,
      {.overdue = [this](uint64_t room, FailureCause cause,
                         const std::string& reason) { fail_room(room, cause, reason, true); },
       .tick =
           [this] {
             resend_unacknowledged();
             fail_rooms_on_device_fault();
           },
       .heartbeat = [this] { heartbeat(); }});
}

void DecodeManager::heartbeat() {
  const auto bound = config_.options.liveness_bound();
  std::vector<std::pair<uint64_t, std::string>> lost;
  std::vector<std::string> forget;
  Outbox out;
  {
    MutexLock lock(mu_);
    // Ranks forgotten one heartbeat ago: what was sent them since (their rooms' Aborts)
    // had that long to leave; unless a room registered with them again, drop their sockets.
    for (const std::string& endpoint : forget_later_) {
      if (!prefills_.count(endpoint)) forget.push_back(endpoint);
    }
    forget_later_.clear();
    for (auto it = prefills_.begin(); it != prefills_.end();) {
      PrefillPeer& peer = it->second;
      if (!peer.liveness.dead(bound, config_.options.heartbeat_max_failures)) {
        out.add(it->first, probe(peer.liveness));
        ++it;
        continue;
      }
      for (const auto& [room, r] : rooms_) {
        for (const Target& t : r.targets) {
          if (t.endpoint == it->first) {
            lost.emplace_back(room, it->first);
            break;
          }
        }
      }
      // Forget it: a later room looks it up again and registers anew.
      instances_.erase(peer.bootstrap_addr);
      forget_later_.insert(it->first);
      it = prefills_.erase(it);
    }
  }
  for (const std::string& endpoint : forget) channel_->forget(endpoint);
  flush(out);
  // Told all the same: silence may be a partition, not a death, and a prefill that is
  // alive would otherwise hold the room (and its pages) until its own timeout. Sends
  // never block, so telling a dead peer costs nothing.
  for (const auto& [room, endpoint] : lost) {
    fail_room(room, FailureCause::kPeerDead,
              "prefill " + endpoint + " stopped answering for more than " + format_seconds(bound),
              true);
  }
}

void DecodeManager::on_peer_gone(const std::string& endpoint) {
  std::vector<uint64_t> lost;
  {
    MutexLock lock(mu_);
    auto it = prefills_.find(endpoint);
    if (it == prefills_.end()) return;
    for (const auto& [room, r] : rooms_) {
      for (const Target& t : r.targets) {
        if (t.endpoint == endpoint) {
          lost.push_back(room);
          break;
        }
      }
    }
    // Forget it, as the heartbeat does: a later room looks it up again and registers anew.
    instances_.erase(it->second.bootstrap_addr);
    forget_later_.insert(endpoint);
    prefills_.erase(it);
  }
  PDKV_LOG_WARN(
      "prefill {} is gone (its connection closed and reconnecting is refused): failing "
      "its {} room(s)",
      endpoint, lost.size());
  for (uint64_t room : lost) {
    fail_room(room, FailureCause::kPeerDead,
              "prefill " + endpoint + " is gone: its connection closed and it refuses new ones",
              false);
  }
}

void DecodeManager::on_peer_refused(const std::string& endpoint) {
  std::vector<uint64_t> refused;
  {
    MutexLock lock(mu_);
    for (const auto& [room, r] : rooms_) {
      for (const Target& t : r.targets) {
        if (t.endpoint == endpoint) {
          refused.push_back(room);
          break;
        }
      }
    }
  }
  for (uint64_t room : refused) {
    // Nothing of ours reaches it, so it cannot be told (tell_prefill false).
    fail_room(room, FailureCause::kUnauthenticated,
              "prefill " + endpoint +
                  " refused the control-plane handshake: the cluster secrets differ, or only one "
                  "side has PDKV_SECRET_FILE (docs/SECURITY.md)",
              false);
  }
}

void DecodeManager::on_route_change(const RouteChange& change) {
  if (runtime_.stopping() || !change.route_lost()) return;
  std::vector<uint64_t> bootstrapping;
  {
    MutexLock lock(mu_);
    ++routes_epoch_;
    // New rooms look the instance up again. The rank stays in prefills_: rooms handed to
    // it still need its liveness, and it is forgotten as usual once it stops answering.
    instances_.erase(change.bootstrap_addr);
    for (const auto& [room, r] : rooms_) {
      if (r.bootstrap_addr != change.bootstrap_addr) continue;
      for (size_t i = 0; i < r.targets.size(); ++i) {
        if (r.targets[i].endpoint != change.old_endpoint) continue;
        // Failed only while its pre-allocation has not been handed to this rank (its
        // registration unanswered, send_metadata() not called yet, or a send to retry):
        // nothing of the room is at the rank, and it cannot start without it. Once
        // handed over, the rank holds the room's pages and write grant and may be
        // writing; a route lost to a lapsed lease (the rank cut off from etcd, not from
        // us) does not stop a live rank from finishing, so the rank's own status or
        // Abort, or liveness, ends such a room. The board cannot tell these apart: it
        // shows WaitingForInput from resolution on.
        const bool handed_over = i < r.pre_sent.size() && r.pre_sent[i];
        if (!handed_over) bootstrapping.push_back(room);
        break;
      }
    }
  }
  if (bootstrapping.empty()) {
    PDKV_LOG_INFO("prefill rank {} of instance {} ({}) left the route registry: {}",
                  change.engine_rank, change.bootstrap_addr, change.old_endpoint, change.detail);
  } else {
    PDKV_LOG_WARN(
        "prefill rank {} of instance {} ({}) left the route registry: {}; failing {} "
        "bootstrapping room(s)",
        change.engine_rank, change.bootstrap_addr, change.old_endpoint, change.detail,
        bootstrapping.size());
  }
  for (uint64_t room : bootstrapping) {
    fail_room(room, FailureCause::kBootstrapFailed,
              "prefill rank " + std::to_string(change.engine_rank) + " of instance " +
                  change.bootstrap_addr + " (" + change.old_endpoint +
                  ") left the route registry while room " + std::to_string(room) +
                  " was bootstrapping: " + change.detail,
              true, FailureStage::kBootstrap);
  }
}

}  // namespace pdkv::kv
