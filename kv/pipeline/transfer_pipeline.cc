#include "kv/pipeline/transfer_pipeline.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "common/logging.h"
#include "kv/pipeline/status_note.h"
#include "kv/pipeline/transfer_retry.h"

namespace pdkv::kv {
namespace {

constexpr int64_t kAllLayers = std::numeric_limits<int64_t>::max();
// Rounds of planning and submitting per pass: submitting frees link capacity that more
// planning can fill before the dispatcher sleeps again.
constexpr int kRoundsPerPass = 4;

// Errors that say something about the blocks, not the connection: the session stays.
bool is_rejection(const Status& s) { return classify_batch_failure(s) == BatchFailure::kRefused; }

// Why a batch that failed for good fails its rooms. A rejection is the decode refusing a
// destination (outside its registered memory); Aborted is our own close of a connection
// that kept breaking, so it is the link too.
FailureCause cause_of_batch_failure(const Status& s) {
  if (is_rejection(s)) return FailureCause::kOutOfRange;
  if (is_transient_transfer_error(s) || s.code() == StatusCode::kAborted) {
    return FailureCause::kLinkLost;
  }
  return FailureCause::kInternal;
}

}  // namespace

TransferPipeline::TransferPipeline(engine::TransferEngine& engine, PipelineOptions options,
                                   FailedPeerTracker& failed_peers, TransferMetrics& metrics,
                                   const StepCounter& steps, Hooks hooks)
    : engine_(engine),
      options_(std::move(options)),
      failed_peers_(failed_peers),
      metrics_(metrics),
      steps_(steps),
      hooks_(std::move(hooks)),
      notes_(engine.carries_notes() && static_cast<bool>(hooks_.status_note)) {
  connector_ = std::make_unique<SessionConnector>(
      engine_, [this](const std::string& endpoint, Result<engine::SessionId> session) {
        MutexLock lock(mu_);
        opened_.push_back(Opened{endpoint, std::move(session)});
        wake_.notify_one();
      });
  dispatcher_ = std::thread([this] { run(); });
}

TransferPipeline::~TransferPipeline() { stop(); }

void TransferPipeline::stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    wake_.notify_all();
  }
  if (dispatcher_.joinable()) dispatcher_.join();
  { MutexLock pass_lock(pass_mu_); }  // a caller's pass still running ends first
  if (connector_) connector_->stop();
}

void TransferPipeline::push(Command command, bool wake) {
  MutexLock lock(mu_);
  commands_.push_back(std::move(command));
  if (wake) wake_.notify_one();
}

void TransferPipeline::start_room(uint64_t room, std::vector<TransferDestination> destinations) {
  Command c;
  c.kind = Command::Kind::kStartRoom;
  c.room = room;
  c.destinations = std::move(destinations);
  push(std::move(c));
}

void TransferPipeline::add_chunk(uint64_t room, TransferChunk chunk, bool wake) {
  metrics_.queue_depth_delta(1);
  chunk.queued_at = now();
  Command c;
  c.kind = Command::Kind::kAddChunk;
  c.room = room;
  c.chunk = std::move(chunk);
  push(std::move(c), wake);
}

void TransferPipeline::cancel_room(uint64_t room) {
  Command c;
  c.kind = Command::Kind::kCancelRoom;
  c.room = room;
  push(std::move(c));
}

void TransferPipeline::reset_peer(const std::string& engine_endpoint) {
  Command c;
  c.kind = Command::Kind::kResetPeer;
  c.engine_endpoint = engine_endpoint;
  push(std::move(c));
}

void TransferPipeline::prepare_peer(const std::string& engine_endpoint) {
  Command c;
  c.kind = Command::Kind::kPreparePeer;
  c.engine_endpoint = engine_endpoint;
  push(std::move(c));
}

void TransferPipeline::steps_advanced() {
  MutexLock lock(mu_);
  steps_advanced_ = true;
  wake_.notify_one();
}

// --- the dispatcher -------------------------------------------------------------

void TransferPipeline::run() {
  std::optional<TimePoint> wake_at;
  while (true) {
    {
      MutexLock lock(mu_);
      wake_.wait_until(mu_, wake_at.value_or(TimePoint::max()), [this]() PDKV_REQUIRES(mu_) {
        return stopping_ || rerun_ || !commands_.empty() || !completions_.empty() ||
               !opened_.empty() || steps_advanced_;
      });
      if (stopping_) return;
      rerun_ = false;
    }
    Reports reports;
    {
      MutexLock pass_lock(pass_mu_);
      wake_at = pass(reports);
    }
    report(reports);
  }
}

void TransferPipeline::run_here() {
  if (!pass_mu_.try_lock()) {
    // Another pass is running (the dispatcher's, another caller's) and may have taken the
    // commands before ours: the dispatcher's next pass takes it.
    MutexLock lock(mu_);
    rerun_ = true;
    wake_.notify_one();
    return;
  }
  bool stopping = false;
  {
    MutexLock lock(mu_);
    stopping = stopping_;
  }
  if (stopping) {
    pass_mu_.unlock();
    return;
  }
  Reports reports;
  const bool timers = pass(reports).has_value();
  pass_mu_.unlock();
  report(reports);
  if (timers) {
    // The dispatcher keeps the timers (backoffs, reconnects): it runs a pass to see them.
    MutexLock lock(mu_);
    rerun_ = true;
    wake_.notify_one();
  }
}

std::optional<TimePoint> TransferPipeline::pass(Reports& reports) {
  std::vector<Command> commands;
  std::vector<Completion> completions;
  std::vector<Opened> opened;
  bool steps = false;
  {
    MutexLock lock(mu_);
    commands.swap(commands_);
    completions.swap(completions_);
    opened.swap(opened_);
    steps = steps_advanced_;
    steps_advanced_ = false;
  }
  for (Command& c : commands) apply(c);
  for (Completion& c : completions) on_completion(c);
  for (Opened& o : opened) on_opened(o);
  if (steps || !waiting_steps_.empty()) {
    const int64_t ready = steps_.ready();
    while (!waiting_steps_.empty() && waiting_steps_.begin()->first <= ready) {
      const uint64_t room = waiting_steps_.begin()->second;
      waiting_steps_.erase(waiting_steps_.begin());
      auto it = rooms_.find(room);
      if (it != rooms_.end() && !it->second.queued) {
        it->second.queued = true;
        ready_.push_back(room);
      }
    }
  }
  std::optional<TimePoint> wake_at;
  for (int round = 0; round < kRoundsPerPass; ++round) {
    const size_t before = ready_.size();
    plan_ready_rooms();
    wake_at.reset();
    submit_ready_links(now(), &wake_at);
    if (ready_.empty() || ready_.size() == before) break;
  }
  reports.finished.swap(finished_);
  reports.failed.swap(failed_);
  return wake_at;
}

void TransferPipeline::report(Reports& reports) {
  // Outside every pipeline lock: the hooks may call back into the pipeline.
  for (auto& [room, cause, reason] : reports.failed) hooks_.on_failed(room, cause, reason);
  if (!reports.finished.empty()) hooks_.on_transferred(reports.finished);
}

void TransferPipeline::apply(Command& command) {
  switch (command.kind) {
    case Command::Kind::kStartRoom: {
      erase_room(command.room);  // a stale entry of a room id used again
      RoomTransfer& r = rooms_[command.room];
      r.id = command.room;
      r.serial = next_serial_++;
      r.destinations = std::move(command.destinations);
      r.dest_outstanding.assign(r.destinations.size(), 0);
      r.status_sent_at.assign(r.destinations.size(), TimePoint::max());
      for (const TransferDestination& d : r.destinations) link_for(d.engine_endpoint);
      return;
    }
    case Command::Kind::kAddChunk: {
      auto it = rooms_.find(command.room);
      if (it == rooms_.end()) {
        metrics_.queue_depth_delta(-1);
        return;  // ended meanwhile
      }
      RoomTransfer& r = it->second;
      r.last_chunk_added = r.last_chunk_added || command.chunk.is_last;
      r.jobs.push_back(Job{std::move(command.chunk), {}, {}, 0, false});
      if (!r.queued) {
        r.queued = true;
        ready_.push_back(command.room);
      }
      return;
    }
    case Command::Kind::kCancelRoom: erase_room(command.room); return;
    case Command::Kind::kPreparePeer: {
      PeerLink& link = link_for(command.engine_endpoint);
      if (!link.session && !link.opening) open_link(link, now());
      return;
    }
    case Command::Kind::kResetPeer: {
      auto it = links_.find(command.engine_endpoint);
      if (it != links_.end() && it->second->session) {
        connector_->close(*it->second->session);
        it->second->session.reset();
      }
      return;
    }
  }
}

void TransferPipeline::erase_room(uint64_t room) {
  auto it = rooms_.find(room);
  if (it == rooms_.end()) return;
  metrics_.queue_depth_delta(-static_cast<int64_t>(it->second.jobs.size()));
  rooms_.erase(it);  // ready_ and waiting_steps_ entries are skipped when met
}

bool TransferPipeline::alive(const RoomKey& key) const {
  auto it = rooms_.find(key.room);
  return it != rooms_.end() && it->second.serial == key.serial;
}

TransferPipeline::RoomTransfer* TransferPipeline::find_room(const RoomKey& key) {
  auto it = rooms_.find(key.room);
  return it != rooms_.end() && it->second.serial == key.serial ? &it->second : nullptr;
}

size_t TransferPipeline::dest_index(const RoomTransfer& r, const std::string& engine_endpoint) {
  for (size_t i = 0; i < r.destinations.size(); ++i) {
    if (r.destinations[i].engine_endpoint == engine_endpoint) return i;
  }
  return r.destinations.size();
}

std::string TransferPipeline::decode_name(const RoomTransfer& r,
                                          const std::string& engine_endpoint) {
  for (const TransferDestination& d : r.destinations) {
    if (d.engine_endpoint == engine_endpoint) return d.key;
  }
  return engine_endpoint;
}

PeerLink& TransferPipeline::link_for(const std::string& endpoint) {
  auto& link = links_[endpoint];
  if (!link) link = std::make_unique<PeerLink>(endpoint);
  return *link;
}

void TransferPipeline::fail(uint64_t room, FailureCause cause, const std::string& reason) {
  if (rooms_.count(room) == 0) return;
  erase_room(room);
  failed_.emplace_back(room, cause, reason);
}

void TransferPipeline::maybe_finished(uint64_t room, RoomTransfer& r) {
  const bool acked = std::all_of(r.dest_outstanding.begin(), r.dest_outstanding.end(),
                                 [](uint64_t bytes) { return bytes == 0; });
  if (!r.last_chunk_added || !r.jobs.empty() || !acked) return;
  metrics_.observe(RoomStage::kQueueWait, r.queue_wait);
  metrics_.observe(RoomStage::kPlanning, r.planning);
  if (r.planned_bytes != 0) metrics_.observe(RoomStage::kWire, r.last_ack - r.first_submit);
  metrics_.observe_room_size(r.planned_bytes, r.planned_blocks);
  for (size_t i = 0; i < r.delivered.size(); ++i) metrics_.status_in_band();
  finished_.push_back(TransferredRoom{room, std::move(r.delivered)});
  rooms_.erase(room);
}

// --- planning ---------------------------------------------------------------------

void TransferPipeline::plan_ready_rooms() {
  const size_t n = ready_.size();
  for (size_t i = 0; i < n; ++i) {
    const uint64_t room = ready_.front();
    ready_.pop_front();
    auto it = rooms_.find(room);
    if (it == rooms_.end() || !it->second.queued) continue;
    it->second.queued = false;
    if (!plan_room(room, it->second)) {
      // Its links hold a window's worth already: it goes on once they drain.
      it->second.queued = true;
      ready_.push_back(room);
    }
  }
}

bool TransferPipeline::plan_room(uint64_t room, RoomTransfer& r) {
  const RoomKey key{room, r.serial};
  while (!r.jobs.empty()) {
    for (const TransferDestination& d : r.destinations) {
      if (link_for(d.engine_endpoint).pending_bytes() >= options_.window_bytes) return false;
    }
    std::optional<int64_t> wait_for;
    const TimePoint started = now();
    Job& job = r.jobs.front();
    if (!job.resolved) r.queue_wait += started - job.chunk.queued_at;
    Status planned = plan_job(r, job, &wait_for);
    const auto planning = now() - started;
    if (!planned.ok()) {
      // The reason names the destination. Unavailable is the circuit breaker: the last
      // transfer to that decode failed after every retry.
      FailureCause cause = FailureCause::kInternal;
      if (planned.code() == StatusCode::kUnavailable) cause = FailureCause::kLinkLost;
      if (planned.code() == StatusCode::kOutOfRange) cause = FailureCause::kOutOfRange;
      fail(room, cause, planned.message());
      return true;
    }
    if (!alive(key)) return true;
    r.planning += planning;
    if (wait_for) {
      waiting_steps_.emplace(*wait_for, room);
      return true;
    }
    r.jobs.pop_front();
    metrics_.queue_depth_delta(-1);
  }
  maybe_finished(room, r);
  return true;
}

Status TransferPipeline::plan_job(RoomTransfer& r, Job& job, std::optional<int64_t>* wait_for) {
  const TransferChunk& c = job.chunk;
  for (const TransferDestination& d : r.destinations) {
    if (auto refused = failed_peers_.refused_for(d.engine_endpoint); refused.count() > 0) {
      return unavailable("decode " + d.key + " failed its last transfer after " +
                         std::to_string(options_.transfer_attempts) +
                         " attempts; refusing to send to it for another " +
                         std::to_string(refused.count()) + " ms");
    }
  }
  if (!job.resolved) {
    plan::SrcOwnership own;
    const plan::SrcOwnership* src_l15 = nullptr;
    if (options_.mla_l1_5) {
      if (!c.ownership) {
        return invalid_argument(
            "the prefill runs the MLA L1.5 cache but the chunk carries no page ownership "
            "(page_transfer_mask / page_local_indices)");
      }
      own.page_transfer_mask = std::span<const uint8_t>(c.ownership->page_transfer_mask);
      own.page_local_indices = std::span<const int64_t>(c.ownership->page_local_indices);
      src_l15 = &own;
    }
    job.pages.reserve(r.destinations.size());
    for (const TransferDestination& d : r.destinations) {
      auto pages = d.plan->resolve(ChunkSpec{c.first_page, c.pages, src_l15});
      if (!pages.ok()) {
        return Status(pages.status().code(),
                      "chunk of room for decode " + d.key + ": " + pages.status().message());
      }
      job.pages.push_back(std::move(pages).value());
    }
    if (c.begin_cache_step) {
      PDKV_ASSIGN_OR_RETURN(
          job.groups,
          plan::layer_groups(options_.layer_num, options_.layerwise_interval, *c.begin_cache_step));
    }
    job.resolved = true;
  }
  auto each_destination = [&](const BlockSpec& spec) PDKV_REQUIRES(pass_mu_) -> Status {
    for (size_t d = 0; d < r.destinations.size(); ++d) {
      PDKV_RETURN_IF_ERROR(plan_blocks(r, d, job, spec));
    }
    return Status();
  };
  if (!c.begin_cache_step) {
    BlockSpec all;
    all.kv = true;
    all.begin_layer = 0;
    all.end_layer = kAllLayers;
    all.state = c.is_last;
    all.aux = c.is_last && c.aux_index.has_value();
    return each_destination(all);
  }
  const int64_t ready = steps_.ready();
  while (job.next_group < job.groups.size()) {
    const plan::LayerGroup& g = job.groups[job.next_group];
    if (ready < g.wait_for_cache_step + 1) {
      *wait_for = g.wait_for_cache_step + 1;
      return Status();
    }
    BlockSpec group;
    group.kv = true;
    group.begin_layer = g.begin_layer;
    group.end_layer = g.end_layer;
    group.state = c.is_last;
    group.state_begin = g.begin_layer;
    group.state_end = g.end_layer;
    PDKV_RETURN_IF_ERROR(each_destination(group));
    ++job.next_group;
  }
  if (c.is_last && c.aux_index) {
    BlockSpec aux;
    aux.aux = true;
    return each_destination(aux);
  }
  return Status();
}

Status TransferPipeline::plan_blocks(RoomTransfer& r, size_t d, const Job& job,
                                     const BlockSpec& spec) {
  const TransferDestination& dest = r.destinations[d];
  const DestinationPlan& plan = *dest.plan;
  const TransferChunk& c = job.chunk;
  scratch_.clear();
  if (spec.kv) {
    PDKV_RETURN_IF_ERROR(
        plan.append_kv_blocks(job.pages[d], spec.begin_layer, spec.end_layer, scratch_));
  }
  if (spec.state) {
    PDKV_RETURN_IF_ERROR(
        plan.append_state_blocks(c.state_slots, spec.state_begin, spec.state_end, scratch_));
  }
  if (spec.aux) PDKV_RETURN_IF_ERROR(plan.append_aux_blocks(*c.aux_index, scratch_));
  if (scratch_.empty()) return Status();
  auto writes = std::make_shared<std::vector<engine::WriteBlock>>();
  writes->reserve(scratch_.size());
  uint64_t bytes = 0;
  for (const plan::Block& b : scratch_) {
    if (b.length == 0) continue;
    // Under the decode's grant for this room: its engine admits nothing else.
    writes->push_back(
        engine::WriteBlock{b.src_addr, b.dst_addr, b.length, plan.pre_allocation().write_grant});
    bytes += b.length;
  }
  if (bytes == 0) return Status();
  // Summed now: the bytes the forward pass wrote, which is what must arrive. The sum
  // reads them on the CPU, so it waits for the forward's point first (a checking mode).
  if (dest.checksum) {
    if (c.ready) PDKV_RETURN_IF_ERROR(c.ready->wait_on_host());
    PDKV_RETURN_IF_ERROR(dest.checksum->add(*writes, engine_.device_regions()));
  }
  r.dest_outstanding[d] += bytes;
  r.planned_bytes += bytes;
  r.planned_blocks += writes->size();
  const size_t n = writes->size();
  link_for(dest.engine_endpoint)
      .add(WritePiece{RoomKey{r.id, r.serial}, std::move(writes), 0, n, bytes, c.ready});
  return Status();
}

// --- submitting -------------------------------------------------------------------

void TransferPipeline::submit_ready_links(TimePoint at, std::optional<TimePoint>* wake_at) {
  for (auto& [endpoint, link] : links_) submit_link(*link, at, wake_at);
}

void TransferPipeline::submit_link(PeerLink& link, TimePoint at,
                                   std::optional<TimePoint>* wake_at) {
  if (!link.has_work()) return;
  if (auto refused = failed_peers_.refused_for(link.endpoint()); refused.count() > 0) {
    // The breaker opened (a batch to this peer failed for good): what waits fails now,
    // not one batch at a time.
    give_up_link(link,
                 unavailable("refusing to send to " + link.endpoint() + " for another " +
                             std::to_string(refused.count()) + " ms after its transfers failed"));
    return;
  }
  if (!link.session) {
    if (link.opening) return;
    if (at >= link.reconnect_at) {
      open_link(link, at);
    } else if (!*wake_at || link.reconnect_at < **wake_at) {
      *wake_at = link.reconnect_at;
    }
    return;
  }
  // Called by next_batch() on this thread, within this pass.
  auto is_alive = [this](const RoomKey& key) PDKV_REQUIRES(pass_mu_) { return alive(key); };
  while (link.session && link.inflight_bytes < options_.window_bytes) {
    std::optional<WriteBatch> next =
        link.next_batch(options_.batch_bytes, options_.batch_blocks, at, is_alive, wake_at);
    if (!next) break;
    const uint64_t id = next_batch_id_++;
    next->id = id;
    next->session = *link.session;
    next->submitted_at = at;
    if (notes_ && next->note.empty()) attach_statuses(*next);
    for (const RoomKey& key : next->noted) {
      if (RoomTransfer* r = find_room(key); r != nullptr) {
        const size_t d = dest_index(*r, next->endpoint);
        if (d < r->status_sent_at.size()) r->status_sent_at[d] = std::min(r->status_sent_at[d], at);
      }
    }
    const uint64_t bytes = next->bytes;
    auto [it, inserted] = inflight_.emplace(id, std::move(*next));
    link.inflight_bytes += bytes;
    const std::string& note = it->second.note;
    Status submitted = engine_.submit_async(
        it->second.session, it->second.blocks,
        [this, id](Status status) {
          MutexLock lock(mu_);
          completions_.push_back(Completion{id, std::move(status)});
          wake_.notify_one();
        },
        {reinterpret_cast<const uint8_t*>(note.data()), note.size()},
        engine::SourceReady{nullptr, -1, it->second.ready_points()});
    if (!submitted.ok()) {
      link.inflight_bytes -= bytes;
      WriteBatch failed = std::move(it->second);
      inflight_.erase(it);
      handle_batch_failure(link, std::move(failed), submitted);
    }
  }
}

void TransferPipeline::open_link(PeerLink& link, TimePoint at) {
  link.opening = true;
  link.opening_since = at;
  connector_->open(link.endpoint());
}

void TransferPipeline::attach_statuses(WriteBatch& batch) {
  batch.noted.clear();
  // The bytes of each room in this batch, summed by room (its pieces need not be adjacent).
  room_bytes_.clear();
  for (const BatchSegment& seg : batch.segments) {
    room_bytes_.emplace_back(seg.key, seg.bytes);
  }
  std::stable_sort(room_bytes_.begin(), room_bytes_.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first.room, a.first.serial) < std::tie(b.first.room, b.first.serial);
  });
  for (size_t i = 0; i < room_bytes_.size();) {
    const RoomKey key = room_bytes_[i].first;
    uint64_t bytes = 0;
    for (; i < room_bytes_.size() && room_bytes_[i].first == key; ++i) {
      bytes += room_bytes_[i].second;
    }
    const RoomTransfer* r = find_room(key);
    const size_t d = r != nullptr ? dest_index(*r, batch.endpoint) : 0;
    // Only a batch that completes the room's bytes to this decode rank may say so: every
    // chunk planned and no byte for this rank pending or in flight elsewhere. The status
    // is this rank's (each decode rank gets its own).
    if (r == nullptr || d == r->destinations.size() || !r->last_chunk_added || !r->jobs.empty() ||
        r->dest_outstanding[d] != bytes) {
      continue;
    }
    std::optional<proto::TransferStatus> status =
        hooks_.status_note(key.room, r->destinations[d].key);
    if (!status) continue;
    if (!append_status(&batch.note, *status)) break;  // full: the rest go the usual way
    batch.noted.push_back(key);
  }
}

void TransferPipeline::on_opened(Opened& opened) {
  PeerLink& link = link_for(opened.endpoint);
  link.opening = false;
  if (opened.session.ok()) {
    if (link.session) {
      connector_->close(*opened.session);  // a second open raced the first
    } else {
      link.session = *opened.session;
      link.connect_failures = 0;
    }
    return;
  }
  if (!link.has_work()) return;  // an early open (prepare_peer): the first batch retries
  ++link.connect_failures;
  if (link.connect_failures >= options_.transfer_attempts) {
    link.connect_failures = 0;
    failed_peers_.mark_failed(link.endpoint(), link.opening_since);
    give_up_link(link, opened.session.status());
    return;
  }
  link.reconnect_at = now() + retry_backoff(options_.first_backoff, link.connect_failures);
}

void TransferPipeline::on_completion(Completion& completion) {
  auto it = inflight_.find(completion.batch_id);
  if (it == inflight_.end()) return;
  WriteBatch batch = std::move(it->second);
  inflight_.erase(it);
  PeerLink& link = link_for(batch.endpoint);
  link.inflight_bytes -= batch.bytes;
  if (!completion.status.ok()) {
    handle_batch_failure(link, std::move(batch), completion.status);
    return;
  }
  failed_peers_.record_success(batch.endpoint);
  metrics_.wrote(batch.bytes, batch.blocks.size());
  acknowledge(batch, batch.noted);
}

void TransferPipeline::acknowledge(const WriteBatch& batch, const std::vector<RoomKey>& noted) {
  const TimePoint acked = now();
  for (const RoomKey& key : noted) {
    // Its status rode this batch (or an earlier attempt), and the decode handled it.
    RoomTransfer* r = find_room(key);
    const size_t d = r != nullptr ? dest_index(*r, batch.endpoint) : 0;
    if (r == nullptr || d >= r->destinations.size()) continue;
    const std::string& dest = r->destinations[d].key;
    if (std::find(r->delivered.begin(), r->delivered.end(), dest) == r->delivered.end()) {
      r->delivered.push_back(dest);
    }
  }
  for (const BatchSegment& seg : batch.segments) {
    RoomTransfer* r = find_room(seg.key);
    if (r == nullptr) continue;
    // A link carries only the pieces of destinations behind its endpoint.
    r->dest_outstanding[dest_index(*r, batch.endpoint)] -= seg.bytes;
    r->first_submit = std::min(r->first_submit, batch.submitted_at);
    r->last_ack = acked;
    maybe_finished(seg.key.room, *r);
  }
}

void TransferPipeline::handle_batch_failure(PeerLink& link, WriteBatch batch,
                                            const Status& status) {
  if (!is_rejection(status) && link.session && *link.session == batch.session) {
    // The connection broke: nothing more goes on this session. Closing it aborts the
    // batches still on it, which come back here and are retried like this one.
    connector_->close(*link.session);
    link.session.reset();
  }
  // Aborted comes from our own close (above, or a reset peer): the batch did nothing wrong.
  const bool retryable =
      is_transient_transfer_error(status) || status.code() == StatusCode::kAborted;
  if (retryable && batch.attempt + 1 < options_.transfer_attempts) {
    ++batch.attempt;
    batch.not_before = now() + retry_backoff(options_.first_backoff, batch.attempt);
    link.requeue(std::move(batch));
    return;
  }
  auto rooms_of = [&] {
    std::vector<RoomKey> keys;
    for (const BatchSegment& s : batch.segments) {
      if (std::find(keys.begin(), keys.end(), s.key) == keys.end()) keys.push_back(s.key);
    }
    return keys;
  };
  std::vector<RoomKey> keys = rooms_of();
  if (status.code() == StatusCode::kAlreadyCompleted && keys.size() == 1) {
    // The decode says this room already succeeded: a retry of a batch whose first
    // attempt landed, status and all, and whose acknowledgement was lost. Believed only
    // when the room's status rode an earlier submission to that decode (a refused part
    // delivers no note, so this one's cannot count); else the decode is wrong about our
    // room and it fails below like any refusal.
    RoomTransfer* r = find_room(keys.front());
    const size_t d = r != nullptr ? dest_index(*r, batch.endpoint) : 0;
    if (r != nullptr && d < r->status_sent_at.size() && r->status_sent_at[d] < batch.submitted_at) {
      failed_peers_.record_success(batch.endpoint);
      acknowledge(batch, keys);
      return;
    }
  }
  if (is_rejection(status) && !batch.single_room && keys.size() > 1) {
    // The decode refused a block: send each room alone, so only the guilty one fails.
    for (const RoomKey& k : keys) {
      WriteBatch one = select_segments(batch, [&](const RoomKey& key) { return key == k; });
      one.single_room = true;
      one.not_before = TimePoint{};
      link.requeue(std::move(one));
    }
    return;
  }
  // Only the peer's absence opens its breaker. A refusal came in a proper acknowledgement
  // from a live peer and is about these blocks: it fails their rooms (below) and no other.
  // Counted against the endpoint, one room the decode cancelled mid-transfer would fail
  // every other room pending to it for the cooldown, and a registration naming another
  // decode's engine endpoint could do that to it at will.
  if (classify_batch_failure(status) == BatchFailure::kPeerLost) {
    failed_peers_.mark_failed(batch.endpoint, batch.submitted_at);
  }
  const FailureCause cause = cause_of_batch_failure(status);
  for (const RoomKey& k : keys) {
    const RoomTransfer* r = find_room(k);
    if (r == nullptr) continue;
    fail(k.room, cause,
         "failed to send KV of room " + std::to_string(k.room) + " to decode " +
             decode_name(*r, batch.endpoint) + ": " + status.to_string());
  }
}

void TransferPipeline::give_up_link(PeerLink& link, const Status& why) {
  for (const RoomKey& k : link.take_all_rooms()) {
    const RoomTransfer* r = find_room(k);
    if (r == nullptr) continue;
    fail(k.room, FailureCause::kLinkLost,
         "cannot send KV of room " + std::to_string(k.room) + " to decode " +
             decode_name(*r, link.endpoint()) + ": " + why.to_string());
  }
}

}  // namespace pdkv::kv
