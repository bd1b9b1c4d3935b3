// TransferPipeline: the calls other threads make, the dispatcher, the pass (take what was
// handed over, plan, submit, report) and the rooms' table. Planning, submission and
// completion each have their own file (pipeline_planning.cc, pipeline_submission.cc,
// pipeline_completion.cc).
#include "kv/pipeline/transfer_pipeline.h"

#include <algorithm>
#include <utility>

#include "common/stage_cpu.h"

namespace pdkv::kv {

namespace {

// Rounds of planning and submitting per pass: submitting frees link capacity that more
// planning can fill before the dispatcher sleeps again.
constexpr int kRoundsPerPass = 4;

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
  {
    const StageCpuScope cpu(CpuStage::kPlanning);
    for (Command& c : commands) apply(c);
  }
  {
    const StageCpuScope cpu(CpuStage::kCompletion);
    for (Completion& c : completions) on_completion(c);
    for (Opened& o : opened) on_opened(o);
  }
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
    {
      const StageCpuScope cpu(CpuStage::kPlanning);
      plan_ready_rooms();
    }
    wake_at.reset();
    const StageCpuScope cpu(CpuStage::kSubmission);
    submit_ready_links(now(), &wake_at);
    if (ready_.empty() || ready_.size() == before) break;
  }
  reports.finished.swap(finished_);
  reports.failed.swap(failed_);
  return wake_at;
}

void TransferPipeline::report(Reports& reports) {
  // Outside every pipeline lock: the hooks may call back into the pipeline.
  const StageCpuScope cpu(CpuStage::kCompletion);
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

}  // namespace pdkv::kv
