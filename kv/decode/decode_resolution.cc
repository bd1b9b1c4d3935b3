// DecodeManager's route resolution (a resolver lane per prefill instance): a room's
// prefill instance from the route directory, its route and target ranks, and this rank's
// registration with each.
#include <algorithm>
#include <system_error>
#include <utility>

#include "kv/decode/decode_manager.h"
#include "kv/runtime/manager_common.h"

namespace pdkv::kv {

std::optional<std::string> DecodeManager::queue_for_resolution(uint64_t room,
                                                               const std::string& addr) {
  auto lane = lanes_.find(addr);
  if (lane == lanes_.end()) {
    if (lanes_.size() >= static_cast<size_t>(config_.options.max_resolving_instances)) {
      return "too many prefill instances are being resolved at once (" +
             std::to_string(lanes_.size()) + ", PDKV_MAX_RESOLVING_INSTANCES): room " +
             std::to_string(room) + " names yet another one, " + addr;
    }
    lane = lanes_.emplace(addr, ResolutionLane{}).first;
    lane->second.rooms.push_back(room);
    try {
      lane->second.worker = std::thread([this, addr] { lane_loop(addr); });
    } catch (const std::system_error& e) {
      // Out of threads (a pids limit, memory): this room fails, the decode goes on.
      lanes_.erase(lane);
      return "cannot start a resolver thread for prefill instance " + addr + ": " + e.what();
    }
    return std::nullopt;
  }
  lane->second.rooms.push_back(room);
  return std::nullopt;
}

std::vector<std::thread> DecodeManager::take_finished_lanes() {
  std::vector<std::thread> finished;
  MutexLock lock(mu_);
  finished.swap(finished_lanes_);
  return finished;
}

void DecodeManager::lane_loop(const std::string& addr) {
  while (true) {
    uint64_t room;
    {
      MutexLock lock(mu_);
      // shutdown() took (or takes) this thread's handle: leave the lane as it is.
      if (runtime_.stopping()) return;
      auto lane = lanes_.find(addr);
      if (lane->second.rooms.empty()) {
        // Done: hand this thread's handle over to be joined (init_room or shutdown), and
        // let the next room naming this instance start a new lane.
        finished_lanes_.push_back(std::move(lane->second.worker));
        lanes_.erase(lane);
        return;
      }
      room = lane->second.rooms.front();
      lane->second.rooms.pop_front();
    }
    Status resolved = resolve(room);
    if (!resolved.ok() && !runtime_.stopping()) fail_resolution(room, resolved);
  }
}

void DecodeManager::fail_resolution(uint64_t room, const Status& resolved) {
  std::string reason = resolved.message();
  if (resolved.code() == StatusCode::kDeadlineExceeded) {
    reason = "bootstrap timeout: the prefill ranks of room " + std::to_string(room) +
             " could not be resolved within " + format_seconds(config_.options.bootstrap_timeout) +
             " (" + reason + ")";
  }
  // instance_for() reports an instance this decode cannot receive from as
  // FailedPrecondition; anything else is the lookup itself (or the instance's breaker).
  FailureCause cause = FailureCause::kBootstrapFailed;
  if (resolved.code() == StatusCode::kDeadlineExceeded) cause = FailureCause::kBootstrapTimeout;
  if (resolved.code() == StatusCode::kFailedPrecondition) cause = FailureCause::kLayoutMismatch;
  fail_room(room, cause, reason, true);
}

namespace {

// An answer no retry changes: the room fails with it at once, and it says nothing about
// whether the instance is reachable (the breaker does not count it).
bool final_lookup_answer(StatusCode code) {
  return code == StatusCode::kFailedPrecondition || code == StatusCode::kInvalidArgument ||
         code == StatusCode::kOutOfRange || code == StatusCode::kUnauthenticated;
}

}  // namespace

Result<DecodeManager::Instance> DecodeManager::instance_for(const std::string& addr,
                                                            TimePoint deadline, uint64_t epoch) {
  {
    MutexLock lock(mu_);
    auto it = instances_.find(addr);
    if (it != instances_.end()) return it->second;
  }
  PDKV_ASSIGN_OR_RETURN(PrefillRankInfo info,
                        directory_->lookup_instance(addr, deadline, &stop_lookups_));
  // FailedPrecondition whatever the check said: the resolver names the cause after it,
  // and no retry helps until one side is restarted with another layout.
  Status compatible =
      check_instance_compatible(config_.args, info.layout, info.kv_item_lens.size())
          .with_context("prefill instance at " + addr + " cannot send to this decode");
  if (!compatible.ok()) return failed_precondition(compatible.message());
  Result<RoomRoute> planned = plan_route(config_.args, info);
  if (!planned.ok()) {
    return failed_precondition(
        planned.status().with_context("no route from prefill instance at " + addr).message());
  }
  RoomRoute route = std::move(planned).value();
  Instance inst{std::move(info), std::move(route), {}};
  MutexLock lock(mu_);
  // As for endpoints: an instance read before a route of it vanished is not cached.
  if (routes_epoch_ != epoch) return inst;
  return instances_.try_emplace(addr, std::move(inst)).first->second;
}

DecodeManager::PrefillPeer& DecodeManager::register_once(const Target& target,
                                                         const std::string& bootstrap_addr,
                                                         Outbox& out) {
  PrefillPeer& peer = prefills_[target.endpoint];
  if (!peer.registration_sent) {
    peer.bootstrap_addr = bootstrap_addr;
    peer.tp_rank = target.route.prefill_tp_rank;
    peer.liveness.heard();
    peer.registration_sent = true;
    peer.registration_sent_at = now();
    peer.registered_fragments = target.route.fragments;
    out.add(target.endpoint, registration(peer.registered_fragments));
  }
  return peer;
}

Result<DecodeManager::Resolution> DecodeManager::find_targets(uint64_t room,
                                                              const std::string& addr,
                                                              std::optional<int64_t> dp_rank,
                                                              TimePoint deadline, uint64_t epoch) {
  PDKV_ASSIGN_OR_RETURN(Instance inst, instance_for(addr, deadline, epoch));
  const int64_t dp_size = inst.info.dp_size;
  const int64_t group =
      dp_rank ? *dp_rank : static_cast<int64_t>(room % static_cast<uint64_t>(dp_size));
  if (group < 0 || group >= dp_size) {
    return invalid_argument("prefill_dp_rank " + std::to_string(group) + " outside [0, " +
                            std::to_string(dp_size) + ")");
  }
  std::vector<Target> targets;
  for (const RouteTarget& rt : inst.route.targets) {
    std::string endpoint;
    {
      MutexLock lock(mu_);
      auto cached = instances_.find(addr);
      if (cached != instances_.end()) {
        auto ep = cached->second.endpoints.find({group, rt.prefill_tp_rank});
        if (ep != cached->second.endpoints.end()) endpoint = ep->second;
      }
    }
    if (endpoint.empty()) {
      PDKV_ASSIGN_OR_RETURN(PrefillRankInfo rank,
                            directory_->lookup_prefill_rank(addr, group, rt.prefill_tp_rank,
                                                            deadline, &stop_lookups_));
      endpoint = rank.control_endpoint;
      MutexLock lock(mu_);
      auto cached = instances_.find(addr);
      // Not cached if a route vanished meanwhile: it may be this one (resolve() retries).
      if (cached != instances_.end() && routes_epoch_ == epoch)
        cached->second.endpoints[{group, rt.prefill_tp_rank}] = endpoint;
    }
    targets.push_back(Target{rt, endpoint});
  }
  return Resolution{std::move(inst), std::move(targets)};
}

Status DecodeManager::resolve(uint64_t room) {
  std::string addr;
  std::optional<int64_t> dp_rank;
  TimePoint deadline;
  uint64_t epoch = 0;
  {
    MutexLock lock(mu_);
    auto it = rooms_.find(room);
    if (it == rooms_.end()) return Status();  // ended meanwhile
    addr = it->second.bootstrap_addr;
    dp_rank = it->second.prefill_dp_rank;
    // A little before the room's own deadline on the board: the lookup's reason (etcd
    // unreachable, rank not registered, ...) then reaches the room instead of the board's
    // generic "not resolved in time", which stays as the backstop.
    const std::chrono::milliseconds margin = std::min<std::chrono::milliseconds>(
        config_.options.bootstrap_timeout / 10, std::chrono::milliseconds(250));
    deadline = it->second.opened + config_.options.bootstrap_timeout - margin;
    epoch = routes_epoch_;
  }
  std::string refused;
  Outbox out;
  while (true) {
    {
      MutexLock lock(mu_);
      if (std::optional<std::string> refused = breakers_.refusal(addr, now())) {
        return unavailable(*refused);
      }
    }
    // One attempt, bounded on its own: a peer that does not answer is noticed (and
    // counted) in seconds, not at the room's deadline.
    const TimePoint attempt_deadline =
        std::min(deadline, now() + config_.options.route_attempt_timeout);
    Result<Resolution> attempt = find_targets(room, addr, dp_rank, attempt_deadline, epoch);
    if (!attempt.ok()) {
      const Status& failed = attempt.status();
      if (stop_lookups_.fired() || final_lookup_answer(failed.code())) return failed;
      {
        MutexLock lock(mu_);
        breakers_.failed(addr, failed.message(), now());
        if (rooms_.find(room) == rooms_.end()) return Status();  // ended meanwhile
      }
      if (now() >= deadline) return failed;
      continue;  // the next attempt, or the breaker's refusal
    }
    Resolution found = std::move(attempt).value();
    MutexLock lock(mu_);
    breakers_.succeeded(addr);
    auto it = rooms_.find(room);
    if (it == rooms_.end()) return Status();
    if (routes_epoch_ != epoch) {
      // A route vanished while this room looked its routes up: what it found may be that
      // route, and on_route_change() saw no targets here to fail. Resolve again, from the
      // registry as it is now (the vanished rank's instance left the cache).
      epoch = routes_epoch_;
      if (now() >= deadline) {
        return deadline_exceeded("the routes of prefill instance " + addr +
                                 " kept changing while room " + std::to_string(room) +
                                 " was resolved");
      }
      continue;
    }
    DecodeRoom& r = it->second;
    r.targets = std::move(found.targets);
    r.required_responses = found.instance.route.required_prefill_response_num;
    r.resolved = true;
    if (r.abort_after_resolve) {
      proto::Abort abort;
      abort.room = room;
      abort.sender = identity_;
      abort.reason = *r.abort_after_resolve;
      abort.cause = static_cast<uint8_t>(FailureCause::kAbortedLocally);
      abort.ticket = r.ticket;
      for (const Target& t : r.targets) {
        // A prefill takes an Abort only from a decode that registered with it: register
        // first (same socket, so in order) if this room is the first to reach it.
        register_once(t, addr, out);
        out.add(t.endpoint, abort);
      }
      drop_room(room);
    }
    break;
  }
  if (!out.empty()) {
    flush(out);
    return Status();
  }
  {
    MutexLock lock(mu_);
    auto it = rooms_.find(room);
    if (it == rooms_.end()) return Status();
    DecodeRoom& r = it->second;
    for (const Target& t : r.targets) {
      const PrefillPeer& peer = register_once(t, addr, out);
      if (!peer.refused.ok())
        refused = "prefill " + t.endpoint + " refused this decode: " + peer.refused.message();
    }
    if (refused.empty()) {
      board_.advance(room, RoomState::kWaitingForInput);
      board_.set_deadline(room, now() + config_.options.waiting_timeout,
                          FailureCause::kWaitingTimeout,
                          "waiting timeout: no KV for room " + std::to_string(room) + " within " +
                              format_seconds(config_.options.waiting_timeout) + " of bootstrap");
      if (r.pending) send_pre_allocations(room, r, out);
    }
  }
  flush(out);
  if (!refused.empty()) return failed_precondition(refused);
  return Status();
}

proto::BufferRegistration DecodeManager::registration(const WireFragments& fragments) const {
  const KvArgs& a = config_.args;
  proto::BufferRegistration reg;
  reg.decode = identity_;
  reg.enable_mla_l1_5_cache = config_.enable_mla_l1_5_cache;
  reg.layout = a.layout();
  reg.kv = {a.kv_data_ptrs, a.kv_data_lens, a.kv_item_lens};
  reg.kv_page_strides = a.kv_page_strides;
  reg.state_page_strides = a.state_page_strides;
  reg.aux = {a.aux_data_ptrs, a.aux_data_lens, a.aux_item_lens};
  reg.state = {a.state_data_ptrs, a.state_data_lens, a.state_item_lens};
  reg.state_layer_ids.assign(a.state_layer_ids.begin(), a.state_layer_ids.end());
  if (fragments) reg.fragments = *fragments;
  return reg;
}

}  // namespace pdkv::kv
