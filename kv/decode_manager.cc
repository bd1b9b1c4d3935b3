#include "kv/decode_manager.h"

#include <algorithm>
#include <utility>

#include "common/logging.h"
#include "kv/manager_common.h"
#include "kv/page_ownership.h"
#include "kv/status_note.h"

namespace pdkv::kv {
DecodeManager::DecodeManager(DecodeManagerConfig config, std::shared_ptr<RouteDirectory> directory)
    : config_(std::move(config)), directory_(std::move(directory)) {}

Result<std::unique_ptr<DecodeManager>> DecodeManager::create(
    DecodeManagerConfig config, const ControlChannelFactory& channels,
    std::shared_ptr<RouteDirectory> directory) {
  PDKV_RETURN_IF_ERROR(config.args.validate().with_context("decode KVArgs"));
  if (config.enable_mla_l1_5_cache && !config.args.is_mla) {
    return invalid_argument("enable_mla_l1_5_cache needs an MLA model (is_mla)");
  }
  if (directory == nullptr) return invalid_argument("a decode manager needs a route directory");
  std::unique_ptr<DecodeManager> m(new DecodeManager(std::move(config), std::move(directory)));
  Status started = m->start(channels);
  if (!started.ok()) {
    m->shutdown();
    return started;
  }
  m->metrics_registration_ = MetricsRegistry::process().add(
      [raw = m.get()](PrometheusText& out) { raw->render_metrics(out); });
  return m;
}

Status DecodeManager::start(const ControlChannelFactory& channels) {
  const KvArgs& a = config_.args;
  if (!config_.options.local_ip.empty()) config_.engine.host = config_.options.local_ip;
  // Peers write only into what a room granted (room_grant.h), under its grant's id.
  config_.engine.require_write_grants = true;
  PDKV_ASSIGN_OR_RETURN(engine_, engine::TransferEngine::create(config_.engine));
  PDKV_RETURN_IF_ERROR(register_rank_buffers(*engine_, a, engine::MemoryAccess::kPeerWritable));
  grant_buffers_ = std::make_unique<const RankGrantBuffers>(a);
  for (const engine::Region& r : rank_regions(a)) {
    PDKV_RETURN_IF_ERROR(registered_.add(r.addr, r.length));
  }
  // The channel's receive thread starts before identity_ (which needs the channel's
  // endpoint) is set: its handlers wait until start() has set it (or shutdown() began).
  ChannelCallbacks callbacks;
  callbacks.on_message = [this](proto::Message m) {
    if (wait_until_started()) on_message(std::move(m));
  };
  callbacks.on_peer_gone = [this](const std::string& endpoint) {
    if (wait_until_started()) on_peer_gone(endpoint);
  };
  callbacks.on_peer_refused = [this](const std::string& endpoint) {
    if (wait_until_started()) on_peer_refused(endpoint);
  };
  PDKV_ASSIGN_OR_RETURN(channel_, channels(config_.engine.host, std::move(callbacks)));
  identity_ =
      make_rank_identity(proto::Role::kDecode, a, channel_->endpoint(), engine_->endpoint());
  started_.store(true, std::memory_order_release);
  started_.notify_all();
  // A prefill's Success status may ride the room's last batch (prefill_transfer.cc): the
  // engine hands it over once every byte of that batch landed here.
  engine_->set_note_handler([this](std::span<const uint8_t> note) { on_note(note); });
  route_subscription_ =
      directory_->subscribe([this](const RouteChange& change) { on_route_change(change); });
  for (int i = 0; i < kResolverThreads; ++i) resolvers_.emplace_back([this] { resolver_loop(); });
  timer_ = std::thread([this] { timer_loop(); });
  PDKV_LOG_INFO("decode rank {} ready: control {} engine {}", a.engine_rank, channel_->endpoint(),
                engine_->endpoint());
  return Status();
}

DecodeManager::~DecodeManager() { shutdown(); }

void DecodeManager::shutdown() {
  if (stopping_.exchange(true)) return;
  started_.store(true, std::memory_order_release);  // a handler still waiting returns
  started_.notify_all();
  route_subscription_.reset();    // waits for a route change being handled
  metrics_registration_.reset();  // waits for a scrape that is reading this manager
  {
    MutexLock lock(mu_);
    resolve_wake_.notify_all();
  }
  {
    MutexLock lock(timer_mu_);
    timer_wake_.notify_all();
  }
  for (std::thread& t : resolvers_) t.join();
  resolvers_.clear();
  if (timer_.joinable()) timer_.join();
  // As on the prefill: tell the prefill ranks while the channel still runs.
  auto fail_open_rooms = [this] {
    std::vector<uint64_t> open;
    {
      MutexLock lock(mu_);
      for (const auto& [room, r] : rooms_) open.push_back(room);
    }
    for (uint64_t room : open) {
      fail_room(room, FailureCause::kShutdown, "the decode manager shut down", true);
    }
  };
  fail_open_rooms();
  // No note handler runs after this (it may send through the channel).
  if (engine_) engine_->set_note_handler({});
  if (channel_) channel_->stop();  // no handler runs after this
  fail_open_rooms();
  channel_.reset();
  engine_.reset();
}

// --- KVReceiver API ----------------------------------------------------------------

DecodeManager::Handles DecodeManager::open_room(uint64_t room, const std::string& bootstrap_addr) {
  Handles h;
  h.status = board_.open(
      room, now() + config_.options.bootstrap_timeout, FailureCause::kBootstrapTimeout,
      "bootstrap timeout: the prefill ranks of room " + std::to_string(room) +
          " were not resolved within " + format_seconds(config_.options.bootstrap_timeout));
  MutexLock lock(mu_);
  Room& r = rooms_[room];
  if (!r.metadata) {
    r.metadata = std::make_shared<ReceivedMetadata>();
    r.bootstrap_addr = bootstrap_addr.empty() ? config_.bootstrap_addr : bootstrap_addr;
    r.opened = now();
    r.ticket = random_secret_id();
  }
  h.metadata = r.metadata;
  return h;
}

Status DecodeManager::init_room(uint64_t room, std::optional<int64_t> prefill_dp_rank) {
  MutexLock lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end()) return not_found("room " + std::to_string(room) + " is not open here");
  if (it->second.init_requested) return Status();
  it->second.init_requested = true;
  it->second.prefill_dp_rank = prefill_dp_rank;
  resolve_queue_.push_back(room);
  resolve_wake_.notify_one();
  return Status();
}

Status DecodeManager::send_metadata(uint64_t room, PreAllocationRequest request) {
  if (request.decode_prefix_len % static_cast<uint64_t>(config_.args.page_size) != 0) {
    return invalid_argument("decode_prefix_len " + std::to_string(request.decode_prefix_len) +
                            " is not a multiple of page_size " +
                            std::to_string(config_.args.page_size));
  }
  for (int64_t p : request.kv_pages) {
    if (p < 0) return invalid_argument("negative destination page " + std::to_string(p));
  }
  if (request.ownership && !config_.enable_mla_l1_5_cache) {
    return invalid_argument(
        "page_transfer_mask / page_indices_mapping / page_local_indices are only for a decode "
        "that runs the MLA L1.5 cache (enable_mla_l1_5_cache)");
  }
  if (config_.enable_mla_l1_5_cache) {
    if (!request.ownership) {
      return invalid_argument(
          "this decode runs the MLA L1.5 cache (enable_mla_l1_5_cache): send_metadata needs "
          "page_transfer_mask, page_indices_mapping and page_local_indices");
    }
    RequestOwnership& own = *request.ownership;
    if (!own.page_indices_mapping) {
      std::vector<int64_t> mapping(own.page_transfer_mask.size());
      int64_t owned = -1;
      for (size_t i = 0; i < mapping.size(); ++i) {
        owned += own.page_transfer_mask[i] ? 1 : 0;
        mapping[i] = owned;
      }
      own.page_indices_mapping = std::move(mapping);
    }
    PDKV_ASSIGN_OR_RETURN(
        own.page_local_indices,
        mask_ordered_local_indices(own.page_transfer_mask, *own.page_indices_mapping,
                                   own.page_local_indices, request.kv_pages.size(),
                                   kv_page_capacity(config_.args)));
    own.page_indices_mapping.reset();  // the local pages are in mask order now
  }
  // Open exactly these pages, rows and slots to the room's prefill ranks (pages past the
  // pool are left out: the prefill's write there fails the room as out of range).
  RoomWrites writes;
  writes.kv_pages = request.kv_pages;
  if (request.ownership) writes.l1_5_local_pages = request.ownership->page_local_indices;
  writes.aux_index = request.aux_index;
  writes.state_slots = request.state_slots;
  const uint64_t grant = random_grant_id();
  engine::WriteGrant room_grant = grant_for_room(*grant_buffers_, writes);
  std::shared_ptr<const GrantedDestination> granted;
  if (config_.options.verify_checksum) {
    auto g = granted_destination(room_grant);
    if (!g.ok()) return g.status().with_context("room " + std::to_string(room));
    granted = std::make_shared<const GrantedDestination>(std::move(*g));
  }
  PDKV_RETURN_IF_ERROR(engine_->grant_writes(grant, std::move(room_grant))
                           .with_context("room " + std::to_string(room)));
  Outbox out;
  Status refused;
  {
    MutexLock lock(mu_);
    auto it = rooms_.find(room);
    if (it == rooms_.end()) {
      refused = not_found("room " + std::to_string(room) + " is not open here");
    } else if (it->second.pending) {
      refused = failed_precondition("send_metadata() was already called for room " +
                                    std::to_string(room));
    } else {
      Room& r = it->second;
      r.pending = std::move(request);
      r.grant = grant;
      r.granted = std::move(granted);
      if (r.resolved) send_pre_allocations(room, r, out);
    }
  }
  if (!refused.ok()) {
    (void)engine_->revoke_writes(grant);  // nobody was told its id
    return refused;
  }
  flush(out);
  return Status();
}

void DecodeManager::abort_room(uint64_t room, const std::string& reason) {
  fail_room(room, FailureCause::kAbortedLocally, reason.empty() ? "aborted by the decode" : reason,
            true);
}

void DecodeManager::render_metrics(PrometheusText& out) const {
  render_rank_metrics(out, metrics_, proto::Role::kDecode, config_.args.engine_rank,
                      active_rooms());
}

std::string DecodeManager::metrics_text() const {
  PrometheusText out;
  render_metrics(out);
  return out.str();
}

size_t DecodeManager::active_rooms() const {
  size_t held = board_.size();
  MutexLock lock(mu_);
  return std::max(held, rooms_.size());
}

// --- resolution ------------------------------------------------------------------

void DecodeManager::resolver_loop() {
  while (true) {
    uint64_t room;
    {
      MutexLock lock(mu_);
      resolve_wake_.wait_until(mu_, TimePoint::max(), [&]() PDKV_REQUIRES(mu_) {
        return stopping_.load() || !resolve_queue_.empty();
      });
      if (stopping_) return;
      room = resolve_queue_.front();
      resolve_queue_.pop_front();
    }
    Status resolved = resolve(room);
    if (resolved.ok()) continue;
    std::string reason = resolved.message();
    if (resolved.code() == StatusCode::kDeadlineExceeded) {
      reason = "bootstrap timeout: the prefill ranks of room " + std::to_string(room) +
               " could not be resolved within " +
               format_seconds(config_.options.bootstrap_timeout) + " (" + reason + ")";
    }
    // instance_for() reports an instance this decode cannot receive from as
    // FailedPrecondition; anything else is the lookup itself.
    FailureCause cause = FailureCause::kBootstrapFailed;
    if (resolved.code() == StatusCode::kDeadlineExceeded) cause = FailureCause::kBootstrapTimeout;
    if (resolved.code() == StatusCode::kFailedPrecondition) cause = FailureCause::kLayoutMismatch;
    fail_room(room, cause, reason, true);
  }
}

Result<DecodeManager::Instance> DecodeManager::instance_for(const std::string& addr,
                                                            TimePoint deadline, uint64_t epoch) {
  {
    MutexLock lock(mu_);
    auto it = instances_.find(addr);
    if (it != instances_.end()) return it->second;
  }
  PDKV_ASSIGN_OR_RETURN(PrefillRankInfo info, directory_->lookup_instance(addr, deadline));
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
      PDKV_ASSIGN_OR_RETURN(PrefillRankInfo rank, directory_->lookup_prefill_rank(
                                                      addr, group, rt.prefill_tp_rank, deadline));
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
    PDKV_ASSIGN_OR_RETURN(Resolution found, find_targets(room, addr, dp_rank, deadline, epoch));
    MutexLock lock(mu_);
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
    Room& r = it->second;
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
    Room& r = it->second;
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
  reg.aux = {a.aux_data_ptrs, a.aux_data_lens, a.aux_item_lens};
  reg.state = {a.state_data_ptrs, a.state_data_lens, a.state_item_lens};
  reg.state_layer_ids.assign(a.state_layer_ids.begin(), a.state_layer_ids.end());
  if (fragments) reg.fragments = *fragments;
  return reg;
}

bool DecodeManager::ready_for_pre_allocation(const std::string& endpoint) const {
  auto peer = prefills_.find(endpoint);
  return peer != prefills_.end() && peer->second.registration_acked && peer->second.refused.ok();
}

void DecodeManager::send_pre_allocations(uint64_t room, Room& r, Outbox& out,
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
      if (t.route.send_state) pre.state_slots = req.state_slots;
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

// --- control plane -----------------------------------------------------------------

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
    Room& r = it->second;
    for (size_t i = 0; i < r.targets.size() && i < r.pre_sent.size(); ++i) {
      if (r.targets[i].endpoint == u.endpoint) r.pre_sent[i] = false;
    }
    unsent_pre_allocations_.insert(pre->room);
  }
}

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

void DecodeManager::on_message(proto::Message message) {
  if (stopping_) return;
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
    proto::Pong pong;
    pong.sender = identity_;
    pong.seq = ping->seq;
    Status sent = channel_->send(ping->sender.control_endpoint, pong);
    if (!sent.ok())
      PDKV_LOG_DEBUG("pong to {} not sent: {}", ping->sender.control_endpoint, sent.to_string());
  } else {
    PDKV_LOG_WARN_LIMITED("decode rank {} ignores an unexpected message type",
                          identity_.engine_rank);
  }
}

void DecodeManager::on_note(std::span<const uint8_t> note) {
  if (stopping_) return;
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
                                                          const Room& r) const {
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
    Room& r = it->second;
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

// --- route changes -------------------------------------------------------------------

void DecodeManager::on_route_change(const RouteChange& change) {
  if (stopping_ || !change.route_lost()) return;
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

// --- failures ----------------------------------------------------------------------

void DecodeManager::revoke_grant(uint64_t room, Room& r, engine::GrantEnd end) {
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
      Room& r = it->second;
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

// --- timer -------------------------------------------------------------------------

void DecodeManager::timer_loop() {
  const auto tick = std::min<std::chrono::milliseconds>(config_.options.heartbeat_interval,
                                                        std::chrono::milliseconds(100));
  TimePoint next_ping = now();
  while (!stopping_) {
    {
      MutexLock lock(timer_mu_);
      timer_wake_.wait_for(timer_mu_, tick, [this] { return stopping_.load(); });
    }
    if (stopping_) break;
    for (uint64_t room : board_.expire_overdue(now())) {
      auto status = board_.get(room);
      // The board failed it already with the deadline's cause; this tells the peers.
      fail_room(room, status ? status->failure_cause : FailureCause::kInternal,
                status ? status->failure_reason : "timeout", true);
    }
    resend_unacknowledged();
    if (now() >= next_ping) {
      heartbeat();
      next_ping = now() + config_.options.heartbeat_interval;
    }
  }
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
        proto::Ping ping;
        ping.sender = identity_;
        ping.seq = peer.liveness.next_probe();
        out.add(it->first, ping);
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

}  // namespace pdkv::kv
