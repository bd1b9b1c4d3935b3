#include "kv/prefill_manager.h"

#include <iterator>
#include <set>

#include "common/logging.h"
#include "kv/manager_common.h"
#include "kv/page_ownership.h"
#include "kv/room_grant.h"

namespace pdkv::kv {
PrefillManager::PrefillManager(PrefillManagerConfig config,
                               std::shared_ptr<RouteDirectory> directory)
    : config_(std::move(config)),
      directory_(std::move(directory)),
      failed_peers_(config_.options.failed_peer_ttl, config_.options.failed_peer_first_cooldown),
      pending_(
          PendingRoomLimits{static_cast<size_t>(config_.options.max_pending_rooms),
                            static_cast<size_t>(config_.options.max_pending_rooms_per_decode),
                            static_cast<uint64_t>(config_.options.max_pending_bytes_per_decode)}) {}

Result<std::unique_ptr<PrefillManager>> PrefillManager::create(
    PrefillManagerConfig config, const ControlChannelFactory& channels,
    std::shared_ptr<RouteDirectory> directory) {
  PDKV_RETURN_IF_ERROR(config.args.validate().with_context("prefill KVArgs"));
  if (config.enable_mla_l1_5_cache && !config.args.is_mla) {
    return invalid_argument("enable_mla_l1_5_cache needs an MLA model (is_mla)");
  }
  if (directory == nullptr) return invalid_argument("a prefill manager needs a route directory");
  std::unique_ptr<PrefillManager> m(new PrefillManager(std::move(config), std::move(directory)));
  Status started = m->start(channels);
  if (!started.ok()) {
    m->shutdown();
    return started;
  }
  m->metrics_registration_ = MetricsRegistry::process().add(
      [raw = m.get()](PrometheusText& out) { raw->render_metrics(out); });
  return m;
}

Status PrefillManager::start(const ControlChannelFactory& channels) {
  const KvArgs& a = config_.args;
  if (!config_.options.local_ip.empty()) config_.engine.host = config_.options.local_ip;
  // A prefill only sends: its engine admits no write from anyone (no grants, ever), and
  // its KV pool is registered for reading only.
  config_.engine.require_write_grants = true;
  PDKV_ASSIGN_OR_RETURN(engine_, engine::TransferEngine::create(config_.engine));
  PDKV_RETURN_IF_ERROR(register_rank_buffers(*engine_, a, engine::MemoryAccess::kLocalReadOnly));

  PipelineOptions po;
  po.window_bytes = config_.options.transfer_window_bytes;
  po.batch_bytes = config_.options.transfer_batch_bytes;
  po.transfer_attempts = config_.options.transfer_attempts;
  po.layer_num = a.layer_num();
  po.layerwise_interval = std::max<int64_t>(config_.layerwise_interval, 1);
  po.mla_l1_5 = config_.enable_mla_l1_5_cache;
  TransferPipeline::Hooks hooks;
  hooks.on_transferred = [this](const std::vector<TransferredRoom>& rooms) {
    on_rooms_transferred(rooms);
  };
  // With checksums on, a status carries the sum of the bytes sent, decided after they were
  // acknowledged: it cannot ride a batch, so the pipeline never asks.
  if (config_.options.status_in_band && !config_.options.verify_checksum) {
    hooks.status_note = [this](uint64_t room, const std::string& key) {
      return success_for_note(room, key);
    };
  }
  hooks.on_failed = [this](uint64_t room, FailureCause cause, const std::string& reason) {
    fail_room(room, cause, reason);
  };
  pipeline_ = std::make_unique<TransferPipeline>(*engine_, po, failed_peers_, metrics_, steps_,
                                                 std::move(hooks));

  // The channel's receive thread starts before identity_ (which needs the channel's
  // endpoint) is set: its handlers wait until start() has set it (or shutdown() began).
  ChannelCallbacks callbacks;
  callbacks.on_message = [this](proto::Message m) {
    if (wait_until_started()) on_message(std::move(m));
  };
  callbacks.on_peer_gone = [this](const std::string& endpoint) {
    if (wait_until_started()) on_peer_gone(endpoint);
  };
  PDKV_ASSIGN_OR_RETURN(channel_, channels(config_.engine.host, std::move(callbacks)));
  identity_ =
      make_rank_identity(proto::Role::kPrefill, a, channel_->endpoint(), engine_->endpoint());
  started_.store(true, std::memory_order_release);
  started_.notify_all();
  timer_ = std::thread([this] { timer_loop(); });

  PrefillRankInfo info;
  info.engine_rank = a.engine_rank;
  info.tp_size = a.tp_size;
  info.dp_size = a.dp_size;
  info.control_endpoint = channel_->endpoint();
  info.enable_mla_l1_5_cache = config_.enable_mla_l1_5_cache;
  info.layout = a.layout();
  info.kv_item_lens = a.kv_item_lens;
  info.state_item_lens = a.state_item_lens;
  PDKV_RETURN_IF_ERROR(
      directory_
          ->register_prefill_rank(config_.bootstrap_addr, info,
                                  now() + config_.options.bootstrap_timeout)
          .with_context("registering with the bootstrap server at " + config_.bootstrap_addr));
  rank_info_ = std::move(info);
  if (config_.options.bootstrap_refresh.count() > 0)
    bootstrap_refresher_ = std::thread([this] { bootstrap_refresh_loop(); });
  PDKV_LOG_INFO("prefill rank {} ready: control {} engine {}", a.engine_rank, channel_->endpoint(),
                engine_->endpoint());
  return Status();
}

PrefillManager::~PrefillManager() { shutdown(); }

void PrefillManager::shutdown() {
  if (stopping_.exchange(true)) return;
  started_.store(true, std::memory_order_release);  // a handler still waiting returns
  started_.notify_all();
  metrics_registration_.reset();  // waits for a scrape that is reading this manager
  // A KVSender::send running a pass on its own thread (run_pipeline_here) ends first.
  for (int n = inline_passes_.load(); n != 0; n = inline_passes_.load()) inline_passes_.wait(n);
  // The pipeline and the timer send through the channel, so they stop first; the
  // channel's receive thread (handlers) stops with the channel.
  if (pipeline_) pipeline_->stop();
  {
    MutexLock lock(timer_mu_);
    timer_wake_.notify_all();
  }
  if (timer_.joinable()) timer_.join();
  if (bootstrap_refresher_.joinable()) bootstrap_refresher_.join();
  // Withdraw the route first, so decodes stop choosing this rank for new rooms.
  if (!rank_info_.control_endpoint.empty()) {
    Status withdrawn = directory_->unregister_prefill_rank(config_.bootstrap_addr, rank_info_,
                                                           now() + std::chrono::seconds(1));
    if (!withdrawn.ok())
      PDKV_LOG_WARN("prefill rank {}: route not withdrawn: {}", identity_.engine_rank,
                    withdrawn.to_string());
  }
  // Rooms still open fail while the channel can still tell their decodes (a shutdown
  // right after an abort must not leave them to find out by heartbeat); a room a
  // handler opens meanwhile fails after the channel stopped, unannounced.
  fail_open_rooms();
  if (channel_) channel_->stop();  // no handler runs after this
  fail_open_rooms();
  channel_.reset();
  // The engine completes the batches still in flight into the pipeline's callbacks, so it
  // goes before the pipeline.
  engine_.reset();
  pipeline_.reset();
}

void PrefillManager::fail_open_rooms() {
  std::vector<uint64_t> open;
  {
    MutexLock lock(mu_);
    for (const auto& [room, r] : rooms_) open.push_back(room);
  }
  for (uint64_t room : open)
    fail_room(room, FailureCause::kShutdown, "the prefill manager shut down");
}

// --- KVSender API ------------------------------------------------------------------

std::shared_ptr<const RoomHandle> PrefillManager::open_room(uint64_t room) {
  auto handle =
      board_.open(room, now() + config_.options.bootstrap_timeout, FailureCause::kBootstrapTimeout,
                  "bootstrap timeout: no pre-allocation from every decode rank within " +
                      format_seconds(config_.options.bootstrap_timeout));
  metadata_.open(room);
  std::optional<RoomFailure> aborted;
  {
    MutexLock lock(mu_);
    auto [it, created] = rooms_.try_emplace(room);
    Room& r = it->second;
    if (!r.sender_open) {
      if (!created) pending_.release(room);  // a decode's message opened it first
      r.sender_open = true;
      r.first_seen = now();
    }
    aborted = r.aborted_early;
    if (!aborted) maybe_bootstrap(room, r);
  }
  if (aborted) fail_room(room, aborted->cause, aborted->reason);
  return handle;
}

Status PrefillManager::init_room(uint64_t room, int64_t num_pages,
                                 std::optional<int64_t> aux_index) {
  if (num_pages < 0) return invalid_argument("num_kv_indices must be >= 0");
  MutexLock lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end() || !it->second.sender_open) {
    return not_found("room " + std::to_string(room) + " is not open on this prefill rank");
  }
  if (it->second.num_pages >= 0) {
    return failed_precondition("room " + std::to_string(room) + " was already initialised");
  }
  it->second.num_pages = num_pages;
  it->second.aux_index = aux_index;
  return Status();
}

Status PrefillManager::send_chunk(uint64_t room, std::span<const int64_t> pages,
                                  std::span<const int64_t> state_slots,
                                  std::optional<ChunkOwnership> ownership,
                                  std::optional<bool> layerwise, engine::SourceReady sources) {
  Status handed = hand_chunk_over(room, pages, state_slots, std::move(ownership), layerwise,
                                  std::move(sources));
  if (handed.ok()) run_pipeline_here();
  return handed;
}

void PrefillManager::run_pipeline_here() {
  // Counted before stopping_ is read (both seq_cst), so shutdown() either sees this pass
  // and waits for it, or this call sees shutdown and leaves the pipeline alone.
  inline_passes_.fetch_add(1);
  if (!stopping_ && pipeline_) pipeline_->run_here();
  if (inline_passes_.fetch_sub(1) == 1) inline_passes_.notify_all();
}

Status PrefillManager::hand_chunk_over(uint64_t room, std::span<const int64_t> pages,
                                       std::span<const int64_t> state_slots,
                                       std::optional<ChunkOwnership> ownership,
                                       std::optional<bool> layerwise,
                                       engine::SourceReady sources) {
  // Ownership is checked here, not when the chunk is planned, so a malformed mask fails
  // the engine's call instead of the room (and its decode ranks) later.
  if (ownership && !config_.enable_mla_l1_5_cache) {
    return invalid_argument(
        "page_transfer_mask / page_local_indices are only for a prefill that runs the MLA "
        "L1.5 cache (enable_mla_l1_5_cache)");
  }
  if (config_.enable_mla_l1_5_cache) {
    if (!ownership) {
      if (!pages.empty()) {
        return invalid_argument(
            "this prefill runs the MLA L1.5 cache (enable_mla_l1_5_cache): each chunk needs "
            "its page_transfer_mask and page_local_indices");
      }
      ownership.emplace();  // an empty chunk owns nothing
    }
    PDKV_RETURN_IF_ERROR(check_chunk_ownership(ownership->page_transfer_mask,
                                               ownership->page_local_indices, pages.size(),
                                               kv_page_capacity(config_.args)));
  }
  if (sources.marks.size() + (sources.stream != nullptr ? 1 : 0) > 1) {
    return invalid_argument("a chunk waits for one point: name a stream or pass one mark");
  }
  std::shared_ptr<const engine::ReadyEvent> ready;
  if (!sources.marks.empty()) ready = std::move(sources.marks.front());
  if (sources.stream != nullptr) {
    // Recorded before anything else, on the caller's thread: the forward's work issued
    // so far is what this chunk waits for, not what comes later.
    PDKV_ASSIGN_OR_RETURN(ready, engine_->mark_sources_ready(sources.stream, sources.device));
  }
  MutexLock lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end() || !it->second.sender_open) {
    return not_found("room " + std::to_string(room) + " is not open on this prefill rank");
  }
  Room& r = it->second;
  if (r.num_pages < 0)
    return failed_precondition("send() before init() for room " + std::to_string(room));
  if (r.last_chunk_sent) {
    return failed_precondition("room " + std::to_string(room) + " already sent its last chunk");
  }
  const auto n = static_cast<int64_t>(pages.size());
  if (r.next_page + n > r.num_pages) {
    return invalid_argument("chunk of " + std::to_string(n) + " pages at page " +
                            std::to_string(r.next_page) + " overruns the room's " +
                            std::to_string(r.num_pages) + " pages");
  }
  for (int64_t p : pages) {
    if (p < 0) return invalid_argument("negative page index " + std::to_string(p));
  }
  TransferChunk c;
  c.first_page = r.next_page;
  c.pages.assign(pages.begin(), pages.end());
  c.is_last = r.next_page + n == r.num_pages;
  if (c.is_last) {
    r.last_chunk_at = now();
    c.state_slots.assign(state_slots.begin(), state_slots.end());
    c.aux_index = r.aux_index;
  }
  if (layerwise.value_or(config_.layerwise_interval > 0)) {
    if (config_.layerwise_interval <= 0) {
      return failed_precondition("a layerwise chunk needs a manager with layerwise_interval > 0");
    }
    if (ready) {
      // Its layers are written after send(), as the forward goes: a point recorded now
      // would precede them. Layer groups become valid at mark_layers_ready instead.
      return invalid_argument(
          "a layerwise chunk cannot name a stream at send(): synchronise the forward's "
          "stream before each mark_layers_ready, or send the chunk with layerwise=False");
    }
    c.begin_cache_step = steps_.last_reservation();
  }
  c.ownership = std::move(ownership);
  c.ready = std::move(ready);
  r.next_page += n;
  r.last_chunk_sent = c.is_last;
  if (r.bootstrapped) {
    // No wake: send_chunk runs the pass itself next (run_pipeline_here).
    hand_to_pipeline(room, r, std::move(c), /*wake=*/false);
  } else {
    r.waiting_chunks.push_back(std::move(c));
  }
  return Status();
}

void PrefillManager::abort_room(uint64_t room, const std::string& reason) {
  fail_room(room, FailureCause::kAbortedLocally,
            reason.empty() ? "aborted by the prefill" : reason);
}

void PrefillManager::set_prefill_metadata(uint64_t room, int64_t token, std::vector<int32_t> ids) {
  if (!metadata_.publish(room, PrefillMetadata{token, std::move(ids)})) {
    PDKV_LOG_DEBUG("prefill metadata for room {} dropped (room not open or already set)", room);
    return;
  }
  // The room's bytes may all be written already, its statuses waiting for this.
  Outbox out;
  {
    MutexLock lock(mu_);
    if (!awaiting_metadata_.count(room)) return;
    auto it = rooms_.find(room);
    auto meta = metadata_.peek(room);
    if (it == rooms_.end() || !meta) return;
    complete_room(room, it->second, *meta, /*delivered=*/{}, out);
  }
  flush(out);
}

int64_t PrefillManager::reserve_layerwise_cache_steps() {
  return steps_.reserve(config_.args.layer_num());
}

void PrefillManager::mark_layers_ready(int64_t layers) {
  steps_.mark_ready(layers);
  if (pipeline_) pipeline_->steps_advanced();
}

void PrefillManager::render_metrics(PrometheusText& out) const {
  render_rank_metrics(out, metrics_, proto::Role::kPrefill, config_.args.engine_rank,
                      active_rooms());
}

std::string PrefillManager::metrics_text() const {
  PrometheusText out;
  render_metrics(out);
  return out.str();
}

size_t PrefillManager::active_rooms() const {
  size_t held = board_.size();
  MutexLock lock(mu_);
  return std::max(held, rooms_.size());
}

// --- room bookkeeping --------------------------------------------------------------

void PrefillManager::maybe_bootstrap(uint64_t room, Room& r) {
  if (r.bootstrapped || !r.sender_open || r.required_destinations == 0 ||
      r.destinations.size() < r.required_destinations) {
    return;
  }
  r.bootstrapped = true;
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
  while (!r.waiting_chunks.empty()) {
    hand_to_pipeline(room, r, std::move(r.waiting_chunks.front()));
    r.waiting_chunks.pop_front();
  }
}

void PrefillManager::hand_to_pipeline(uint64_t room, Room& r, TransferChunk chunk, bool wake) {
  if (!r.transferring) {
    r.transferring = true;
    board_.advance(room, RoomState::kTransferring);
  }
  pipeline_->add_chunk(room, std::move(chunk), wake);
}

Result<PrefillManager::Room*> PrefillManager::room_for_peer_message(uint64_t room,
                                                                    const std::string& decode,
                                                                    uint64_t bytes) {
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
      if (it->second.bootstrapped && pipeline_) pipeline_->cancel_room(room);
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
  if (unsent.empty() || stopping_) return;
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

// --- control plane -----------------------------------------------------------------

PrefillManager::DecodePeer* PrefillManager::registered_decode(const proto::RankIdentity& sender) {
  auto peer = decodes_.find(sender.control_endpoint);
  if (peer == decodes_.end() || peer->second.registration.decode.incarnation != sender.incarnation)
    return nullptr;
  return &peer->second;
}

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

void PrefillManager::heard_from(const proto::RankIdentity& sender) {
  MutexLock lock(mu_);
  if (DecodePeer* peer = registered_decode(sender)) peer->liveness.heard();
}

void PrefillManager::on_message(proto::Message message) {
  if (stopping_) return;
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

void PrefillManager::on_registration(proto::BufferRegistration reg) {
  const std::string key = reg.decode.control_endpoint;
  Status layout = check_layout_compatible(config_.args, reg.layout);
  FragmentList fragments;
  if (layout.ok()) {
    // Checked here, once, not for each room that names them.
    Result<FragmentList> checked = checked_fragment_list(config_.args, reg.fragments);
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
      Result<Room*> pending =
          plan.ok() ? room_for_peer_message(room, key, shared ? shared_cost : own_cost)
                    : Result<Room*>(plan.status());
      if (!plan.ok()) {
        refused = plan.status();
        if (refused.code() == StatusCode::kOutOfRange) refused_cause = FailureCause::kOutOfRange;
      } else if (!pending.ok()) {
        refused = pending.status();
      } else {
        Room& r = **pending;
        if (r.destinations.empty() && !r.sender_open) r.first_seen = now();
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
    if (!board_.get(abort.room)) {
      // No KVSender yet: keep the abort (like an early pre-allocation, dropped after the
      // bootstrap timeout if no sender ever opens) so the sender fails when it opens.
      Result<Room*> pending = room_for_peer_message(abort.room, abort.sender.control_endpoint, 0);
      if (!pending.ok()) {
        PDKV_LOG_WARN_LIMITED("prefill rank {} drops an Abort of room {}: {}",
                              identity_.engine_rank, abort.room, pending.status().message());
        return;
      }
      Room& r = **pending;
      if (r.first_seen == TimePoint{}) r.first_seen = now();
      if (!r.aborted_early) {
        r.aborted_early = RoomFailure{cause, FailureStage::kBootstrap, std::move(reason)};
      }
      return;
    }
  }
  fail_room(abort.room, cause, reason);
}

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
  proto::Pong pong;
  pong.sender = identity_;
  pong.seq = ping.seq;
  if (!proven) {
    send_to_decode(ping.sender.control_endpoint, false, pong);
    return;
  }
  Status sent = channel_->send(ping.sender.control_endpoint, pong);
  if (!sent.ok())
    PDKV_LOG_DEBUG("pong to {} not sent: {}", ping.sender.control_endpoint, sent.to_string());
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

// --- timer ------------------------------------------------------------------------

void PrefillManager::timer_loop() {
  const auto period = std::min<std::chrono::milliseconds>(config_.options.heartbeat_interval,
                                                          std::chrono::milliseconds(100));
  TimePoint next_ping = now();
  while (!stopping_) {
    {
      MutexLock lock(timer_mu_);
      timer_wake_.wait_for(timer_mu_, period, [this] { return stopping_.load(); });
    }
    if (stopping_) break;
    for (uint64_t room : board_.expire_overdue(now())) {
      auto status = board_.get(room);
      // The board failed it already with the deadline's cause; this tells the peers.
      fail_room(room, status ? status->failure_cause : FailureCause::kInternal,
                status ? status->failure_reason : "timeout");
    }
    ended_.purge(now());
    resend_statuses();
    expire_metadata_waits();
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
    if (now() >= next_ping) {
      check_liveness();
      next_ping = now() + config_.options.heartbeat_interval;
    }
  }
}

void PrefillManager::bootstrap_refresh_loop() {
  constexpr std::chrono::milliseconds kSecond{1000};
  const auto period = config_.options.bootstrap_refresh;
  bool reachable = true;
  while (!stopping_) {
    {
      MutexLock lock(timer_mu_);
      timer_wake_.wait_for(timer_mu_, period, [this] { return stopping_.load(); });
    }
    if (stopping_) break;
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
      proto::Ping ping;
      ping.sender = identity_;
      ping.seq = p.liveness.next_probe();
      out.add(key, ping);
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
