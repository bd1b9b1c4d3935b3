// TransferPipeline's submission: batches cut from each link's pieces and submitted while
// its bytes in flight stay under the window; sessions opened on the connector; Success
// statuses put into the note of a room's last batch.
#include <algorithm>
#include <utility>

#include "kv/pipeline/status_note.h"
#include "kv/pipeline/transfer_pipeline.h"

namespace pdkv::kv {

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
    // Per session: an automatic engine's shm path carries no notes (those go the usual way).
    if (notes_ && next->note.empty() && engine_.carries_notes(next->session)) {
      attach_statuses(*next);
    }
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

}  // namespace pdkv::kv
