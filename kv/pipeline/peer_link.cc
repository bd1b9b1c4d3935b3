#include "kv/pipeline/peer_link.h"

#include <algorithm>
#include <unordered_set>

namespace pdkv::kv {
namespace {

struct RoomKeyHash {
  size_t operator()(const RoomKey& k) const {
    return std::hash<uint64_t>()(k.room ^ (k.serial << 1));
  }
};

// Drops the segments of rooms that ended; false if none is left.
bool drop_dead_segments(WriteBatch& batch, const std::function<bool(const RoomKey&)>& alive) {
  bool all_alive = std::all_of(batch.segments.begin(), batch.segments.end(),
                               [&](const BatchSegment& s) { return alive(s.key); });
  if (!all_alive) batch = select_segments(batch, alive);
  return !batch.segments.empty();
}

}  // namespace

WriteBatch select_segments(const WriteBatch& batch,
                           const std::function<bool(const RoomKey&)>& keep) {
  WriteBatch out;
  out.id = batch.id;
  out.endpoint = batch.endpoint;
  out.attempt = batch.attempt;
  out.single_room = batch.single_room;
  out.not_before = batch.not_before;
  out.session = batch.session;
  for (const BatchSegment& s : batch.segments) {
    if (!keep(s.key)) continue;
    BatchSegment moved{s.key, out.blocks.size(), 0, s.bytes, s.ready};
    out.blocks.insert(out.blocks.end(), batch.blocks.begin() + static_cast<ptrdiff_t>(s.begin),
                      batch.blocks.begin() + static_cast<ptrdiff_t>(s.end));
    moved.end = out.blocks.size();
    out.bytes += s.bytes;
    out.segments.push_back(moved);
  }
  return out;
}

engine::ReadyEvents WriteBatch::ready_points() const {
  engine::ReadyEvents points;
  for (const BatchSegment& s : segments) {
    if (s.ready && std::find(points.begin(), points.end(), s.ready) == points.end()) {
      points.push_back(s.ready);
    }
  }
  return points;
}

void PeerLink::add(WritePiece piece) {
  if (piece.begin >= piece.end) return;
  pending_bytes_ += piece.bytes;
  pending_.push_back(std::move(piece));
}

void PeerLink::requeue(WriteBatch batch) { requeued_.push_back(std::move(batch)); }

std::optional<WriteBatch> PeerLink::next_batch(uint64_t max_bytes, size_t max_blocks, TimePoint now,
                                               const std::function<bool(const RoomKey&)>& alive,
                                               std::optional<TimePoint>* wake_at) {
  while (!requeued_.empty()) {
    WriteBatch& front = requeued_.front();
    if (front.not_before > now) {
      if (wake_at && (!*wake_at || front.not_before < **wake_at)) *wake_at = front.not_before;
      break;
    }
    WriteBatch batch = std::move(front);
    requeued_.pop_front();
    if (drop_dead_segments(batch, alive)) return batch;
  }
  WriteBatch batch;
  batch.endpoint = endpoint_;
  while (!pending_.empty() && batch.bytes < max_bytes && batch.blocks.size() < max_blocks) {
    WritePiece& piece = pending_.front();
    if (!alive(piece.key)) {
      pending_bytes_ -= piece.bytes;
      pending_.pop_front();
      continue;
    }
    // Take whole blocks while the batch has room (always at least one block).
    const auto& src = *piece.blocks;
    BatchSegment seg{piece.key, batch.blocks.size(), 0, 0, piece.ready};
    size_t i = piece.begin;
    while (i < piece.end) {
      const bool batch_empty = batch.blocks.empty() && i == piece.begin;
      const bool fits = batch.bytes + seg.bytes + src[i].length <= max_bytes &&
                        batch.blocks.size() + (i - piece.begin) < max_blocks;
      if (!batch_empty && !fits) break;
      seg.bytes += src[i].length;
      ++i;
    }
    if (i == piece.begin) break;  // the batch is full
    batch.blocks.insert(batch.blocks.end(), src.begin() + static_cast<ptrdiff_t>(piece.begin),
                        src.begin() + static_cast<ptrdiff_t>(i));
    seg.end = batch.blocks.size();
    batch.bytes += seg.bytes;
    // Consecutive pieces of one room share a segment.
    if (!batch.segments.empty() && batch.segments.back().key == seg.key &&
        batch.segments.back().end == seg.begin && batch.segments.back().ready == seg.ready) {
      batch.segments.back().end = seg.end;
      batch.segments.back().bytes += seg.bytes;
    } else {
      batch.segments.push_back(seg);
    }
    pending_bytes_ -= seg.bytes;
    piece.bytes -= seg.bytes;
    piece.begin = i;
    if (piece.begin == piece.end) pending_.pop_front();
  }
  if (batch.segments.empty()) return std::nullopt;
  return batch;
}

std::vector<RoomKey> PeerLink::take_all_rooms() {
  std::vector<RoomKey> rooms;
  std::unordered_set<RoomKey, RoomKeyHash> seen;
  auto note = [&](const RoomKey& k) {
    if (seen.insert(k).second) rooms.push_back(k);
  };
  for (const WriteBatch& b : requeued_) {
    for (const BatchSegment& s : b.segments) note(s.key);
  }
  for (const WritePiece& p : pending_) note(p.key);
  requeued_.clear();
  pending_.clear();
  pending_bytes_ = 0;
  return rooms;
}

}  // namespace pdkv::kv
