// TransferPipeline's planning: ready rooms' chunks resolved and turned into blocks per
// destination, as WritePieces on each decode's PeerLink; layerwise chunks one layer group
// at a time, as the forward marks its layers.
#include <limits>
#include <utility>

#include "kv/pipeline/transfer_pipeline.h"

namespace pdkv::kv {

namespace {

constexpr int64_t kAllLayers = std::numeric_limits<int64_t>::max();

}  // namespace

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
    PDKV_RETURN_IF_ERROR(plan.append_state_blocks(StateSlotLists{c.state_slots, c.state_group_ends},
                                                  spec.state_begin, spec.state_end, scratch_));
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

}  // namespace pdkv::kv
