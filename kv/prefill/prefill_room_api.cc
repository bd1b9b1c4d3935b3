// PrefillManager's KVSender calls: open a room, initialise it, hand its chunks over
// (checked, then a pipeline pass on the caller's thread), publish its first token, abort it.
#include <utility>

#include "common/logging.h"
#include "kv/page_ownership.h"
#include "kv/prefill/prefill_manager.h"
#include "kv/runtime/manager_common.h"

namespace pdkv::kv {

std::shared_ptr<const RoomHandle> PrefillManager::open_room(uint64_t room) {
  auto handle =
      board_.open(room, now() + config_.options.bootstrap_timeout, FailureCause::kBootstrapTimeout,
                  "bootstrap timeout: no pre-allocation from every decode rank within " +
                      format_seconds(config_.options.bootstrap_timeout));
  metadata_.open(room);
  std::optional<RoomFailure> aborted;
  {
    MutexLock lock(mu_);
    // The room left the board since board_.open above: the timer failed it in between (a
    // decode's pre-allocation had opened it longer than the bootstrap timeout ago). Its
    // handle already shows that failure; a record made now would never be dropped.
    if (!board_.state(room)) {
      metadata_.close(room);
      return handle;
    }
    auto [it, created] = rooms_.try_emplace(room);
    PrefillRoom& r = it->second;
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
                                  StateSlotLists state, std::optional<ChunkOwnership> ownership,
                                  std::optional<bool> layerwise, engine::SourceReady sources) {
  Status handed =
      hand_chunk_over(room, pages, state, std::move(ownership), layerwise, std::move(sources));
  if (handed.ok()) run_pipeline_here();
  return handed;
}

void PrefillManager::run_pipeline_here() {
  // Counted before the stop signal is read (both seq_cst), so shutdown() either sees this
  // pass and waits for it, or this call sees shutdown and leaves the pipeline alone.
  inline_passes_.fetch_add(1);
  if (!runtime_.stopping() && pipeline_) pipeline_->run_here();
  if (inline_passes_.fetch_sub(1) == 1) inline_passes_.notify_all();
}

Status PrefillManager::hand_chunk_over(uint64_t room, std::span<const int64_t> pages,
                                       StateSlotLists state_lists,
                                       std::optional<ChunkOwnership> ownership,
                                       std::optional<bool> layerwise, engine::SourceReady sources) {
  PDKV_RETURN_IF_ERROR(check_state_lists(config_.args, state_lists));
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
  PrefillRoom& r = it->second;
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
    c.state_slots.assign(state_lists.slots.begin(), state_lists.slots.end());
    c.state_group_ends.assign(state_lists.group_ends.begin(), state_lists.group_ends.end());
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
  // Bootstrapped (the pipeline holds the room) from WaitingForInput on; before, the chunk
  // waits in the room for maybe_bootstrap. After a failure it waits too, dropped with the
  // room by fail_room.
  const std::optional<RoomState> state = board_.state(room);
  if (state == RoomState::kWaitingForInput || state == RoomState::kTransferring) {
    // No wake: send_chunk runs the pass itself next (run_pipeline_here).
    hand_to_pipeline(room, *state, std::move(c), /*wake=*/false);
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

}  // namespace pdkv::kv
