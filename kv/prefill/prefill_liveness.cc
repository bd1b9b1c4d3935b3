// PrefillManager's liveness: the timer (deadlines, first-token waits, resends, pings),
// decodes that stop answering or whose process is gone, and the route refresh.
#include <algorithm>
#include <utility>

#include "common/logging.h"
#include "kv/prefill/prefill_manager.h"
#include "kv/runtime/manager_common.h"
#include "kv/runtime/manager_timer.h"

namespace pdkv::kv {

void PrefillManager::on_ping(const proto::Ping& ping) {
  // heard_from() already counted it; answering must not wait for anything. Only registered
  // decodes get an answer: a Ping names its own reply address, and answering strangers
  // would open a socket per forged name (a registered but unproven one is answered on a
  // one-off socket, send_to_decode()).
  bool proven = false;
  {
    MutexLock lock(mu_);
    auto peer = decodes_.find(ping.sender.control_endpoint);
    if (peer == decodes_.end()) {
      PDKV_LOG_WARN_LIMITED("prefill rank {} ignores a Ping from {}, which never registered",
                            identity_.engine_rank, ping.sender.control_endpoint);
      return;
    }
    proven = peer->second.proven;
  }
  if (!proven) {
    send_to_decode(ping.sender.control_endpoint, false, pong_to(ping));
    return;
  }
  answer_ping(ping);
}

void PrefillManager::on_peer_gone(const std::string& endpoint) {
  std::vector<uint64_t> lost;
  std::string engine_endpoint;
  {
    MutexLock lock(mu_);
    auto peer = decodes_.find(endpoint);
    if (peer == decodes_.end()) return;
    engine_endpoint = peer->second.registration.decode.engine_endpoint;
    for (const auto& [room, r] : rooms_) {
      if (r.destinations.count(endpoint)) lost.push_back(room);
    }
  }
  PDKV_LOG_WARN(
      "decode {} is gone (its connection closed and reconnecting is refused): failing "
      "its {} room(s)",
      endpoint, lost.size());
  pipeline_->reset_peer(engine_endpoint);
  for (uint64_t room : lost) {
    fail_room(room, FailureCause::kPeerDead,
              "decode " + endpoint + " is gone: its connection closed and it refuses new ones");
  }
}

void PrefillManager::timer_loop() {
  run_manager_timer(
      runtime_, board_, config_.options.heartbeat_interval,
      {.overdue = [this](uint64_t room, FailureCause cause,
                         const std::string& reason) { fail_room(room, cause, reason); },
       .tick =
           [this] {
             ended_.purge(now());
             resend_statuses();
             expire_metadata_waits();
             fail_orphan_rooms();
             fail_rooms_on_device_fault();
           },
       .heartbeat = [this] { check_liveness(); }});
}

void PrefillManager::fail_orphan_rooms() {
  std::vector<uint64_t> orphans;
  {
    MutexLock lock(mu_);
    for (const auto& [room, r] : rooms_) {
      if (!r.sender_open && now() - r.first_seen > config_.options.bootstrap_timeout) {
        orphans.push_back(room);
      }
    }
  }
  for (uint64_t room : orphans) {
    fail_room(room, FailureCause::kBootstrapTimeout,
              "bootstrap timeout: this prefill rank never received the request of room " +
                  std::to_string(room) + " within " +
                  format_seconds(config_.options.bootstrap_timeout));
  }
}

void PrefillManager::bootstrap_refresh_loop() {
  constexpr std::chrono::milliseconds kSecond{1000};
  const auto period = config_.options.bootstrap_refresh;
  bool reachable = true;
  while (runtime_.sleep_for(period)) {
    // Bounded so that shutdown, which joins this thread, waits at most a second.
    const auto deadline = now() + std::min<std::chrono::milliseconds>(period, kSecond);
    Status registered =
        directory_->register_prefill_rank(config_.bootstrap_addr, rank_info_, deadline);
    if (registered.ok() != reachable) {  // log the transitions, not every attempt
      reachable = registered.ok();
      if (reachable) {
        PDKV_LOG_INFO("prefill rank {} registered again with the bootstrap server at {}",
                      identity_.engine_rank, config_.bootstrap_addr);
      } else {
        PDKV_LOG_WARN("prefill rank {} cannot refresh its registration at {}: {}",
                      identity_.engine_rank, config_.bootstrap_addr, registered.to_string());
      }
    }
  }
}

void PrefillManager::check_liveness() {
  const auto bound = config_.options.liveness_bound();
  std::vector<std::pair<uint64_t, std::string>> lost;
  std::vector<std::pair<std::string, std::string>> forgotten;  // control, engine endpoint
  Outbox out;
  {
    MutexLock lock(mu_);
    std::set<std::string> in_use;
    for (const auto& [room, r] : rooms_) {
      for (const auto& [key, dest] : r.destinations) in_use.insert(key);
    }
    // Registered, holding no room, silent for long: gone (or a stranger that left).
    const TimePoint idle_since = now() - config_.options.idle_peer_forget();
    for (auto it = decodes_.begin(); it != decodes_.end();) {
      if (in_use.count(it->first) || it->second.liveness.last_heard > idle_since) {
        ++it;
        continue;
      }
      forgotten.emplace_back(it->first, it->second.registration.decode.engine_endpoint);
      it = decodes_.erase(it);
    }
    std::set<std::string> dead;
    for (const std::string& key : in_use) {
      auto peer = decodes_.find(key);
      if (peer == decodes_.end()) continue;
      DecodePeer& p = peer->second;
      if (p.liveness.dead(bound, config_.options.heartbeat_max_failures)) {
        dead.insert(key);
        continue;
      }
      out.add(key, probe(p.liveness));
    }
    for (const auto& [room, r] : rooms_) {
      for (const auto& [key, dest] : r.destinations) {
        if (dead.count(key)) {
          lost.emplace_back(room, key);
          break;
        }
      }
    }
  }
  flush(out);
  for (const auto& [control, engine_endpoint] : forgotten) {
    // Registrations from made-up endpoints end here, one line each: limited.
    PDKV_LOG_LIMITED(info, "prefill rank {} forgets decode {}: no room and silent for {}",
                     identity_.engine_rank, control,
                     format_seconds(config_.options.idle_peer_forget()));
    pipeline_->reset_peer(engine_endpoint);
    channel_->forget(control);
  }
  for (const auto& [room, key] : lost) {
    fail_room(room, FailureCause::kPeerDead,
              "decode " + key + " stopped answering for more than " + format_seconds(bound));
  }
}

}  // namespace pdkv::kv
