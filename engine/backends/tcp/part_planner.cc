#include "engine/backends/tcp/part_planner.h"

#include <algorithm>

namespace pdkv::engine::tcp {
namespace {

// Whether plain entry `e` continues run `r` (same piece length, next equally spaced
// position in source and destination). A 1-piece `r` takes its strides from `e`, which
// must lie at or beyond r's end in both (ascending, no overlap).
bool extends_run(const PartEntry& r, const PartEntry& e, uint64_t* src_stride,
                 uint64_t* dst_stride) {
  if (e.length != r.length || e.grant != r.grant) return false;
  if (r.pieces == 1) {
    if (e.src_addr < r.src_addr || e.dst_addr < r.dst_addr) return false;
    *src_stride = e.src_addr - r.src_addr;
    *dst_stride = e.dst_addr - r.dst_addr;
    return *src_stride >= r.length && *dst_stride >= r.length;
  }
  uint64_t src_next = 0;
  uint64_t dst_next = 0;
  if (__builtin_mul_overflow(r.pieces, r.src_stride, &src_next) ||
      __builtin_add_overflow(src_next, r.src_addr, &src_next) ||
      __builtin_mul_overflow(r.pieces, r.dst_stride, &dst_next) ||
      __builtin_add_overflow(dst_next, r.dst_addr, &dst_next)) {
    return false;
  }
  *src_stride = r.src_stride;
  *dst_stride = r.dst_stride;
  return src_next == e.src_addr && dst_next == e.dst_addr;
}

// Appends plain entry `e` to `out`, folding it into the last entry when it continues
// that run (see the header).
void append_folded(const PartEntry& e, std::vector<PartEntry>* out) {
  if (!out->empty()) {
    PartEntry& run = out->back();
    uint64_t src_stride = 0;
    uint64_t dst_stride = 0;
    if (extends_run(run, e, &src_stride, &dst_stride)) {
      run.src_stride = src_stride;
      run.dst_stride = dst_stride;
      run.block_span = e.block_index + e.block_span - run.block_index;
      ++run.pieces;
      return;
    }
  }
  out->push_back(e);
}

// One pass over the blocks: contiguous blocks grow the pending plain entry, which is
// folded into the output when a block does not continue it. The output is not reserved
// at blocks.size(): with runs it holds a fraction of that, and a fresh per-block-sized
// vector per batch showed up as page faults in profiles.
void coalesce(std::span<const WriteBlock> blocks, std::vector<PartEntry>* out, uint64_t* total) {
  out->clear();
  *total = 0;
  PartEntry pending;
  bool have = false;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const WriteBlock& b = blocks[i];
    if (b.length == 0) continue;
    *total += b.length;
    if (have && pending.grant == b.grant && pending.src_addr + pending.length == b.src_addr &&
        pending.dst_addr + pending.length == b.dst_addr &&
        pending.length <= UINT64_MAX - b.length) {
      pending.length += b.length;
      pending.block_span = static_cast<uint32_t>(i) - pending.block_index + 1;
      continue;
    }
    if (have) append_folded(pending, out);
    pending = PartEntry{};
    pending.src_addr = b.src_addr;
    pending.dst_addr = b.dst_addr;
    pending.length = b.length;
    pending.block_index = static_cast<uint32_t>(i);
    pending.grant = b.grant;
    have = true;
  }
  if (have) append_folded(pending, out);
}

// Takes up to `want` bytes (at least one piece of a run) off the front of `e` as a new
// entry; `e` keeps the rest.
PartEntry take_front(PartEntry* e, uint64_t want) {
  PartEntry front = *e;
  if (e->pieces == 1) {
    front.length = std::min(want, e->length);
    e->src_addr += front.length;
    e->dst_addr += front.length;
    e->length -= front.length;
    if (e->length == 0) e->pieces = 0;
    return front;
  }
  const uint64_t k = std::min(e->pieces, std::max<uint64_t>(1, want / e->length));
  const bool exact = e->one_block_per_piece();
  front.pieces = k;
  e->src_addr += k * e->src_stride;
  e->dst_addr += k * e->dst_stride;
  e->pieces -= k;
  if (exact) {  // otherwise both halves keep naming the whole range
    front.block_span = static_cast<uint32_t>(k);
    e->block_index += static_cast<uint32_t>(k);
    e->block_span -= static_cast<uint32_t>(k);
  }
  for (PartEntry* p : {&front, e}) {
    if (p->pieces == 1) p->src_stride = p->dst_stride = 0;
  }
  return front;
}

// Appends parts for entries [first, last) on `stream`, at most max_entries each.
void emit_parts(PartPlan* plan, uint32_t stream, size_t first, size_t last, uint32_t max_entries) {
  while (first < last) {
    const size_t end = std::min(last, first + max_entries);
    PlannedPart part{stream, static_cast<uint32_t>(first), static_cast<uint32_t>(end - first), 0};
    for (size_t i = first; i < end; ++i) part.bytes += plan->entries[i].bytes();
    plan->parts.push_back(part);
    first = end;
  }
}

// Splits every part above `max_bytes` payload bytes (and keeps max_entries), cutting
// entries as take_front() does; a run whose pieces are each above the bound becomes its
// single pieces first, which are then cut by length.
void bound_part_bytes(PartPlan* plan, uint64_t max_bytes, uint32_t max_entries) {
  std::vector<PartEntry> entries;
  entries.reserve(plan->entries.size() + plan->total_bytes / max_bytes + plan->parts.size());
  std::vector<PlannedPart> parts;
  for (const PlannedPart& old : plan->parts) {
    PlannedPart cur{old.stream, static_cast<uint32_t>(entries.size()), 0, 0};
    auto close = [&] {
      if (cur.entry_count > 0) parts.push_back(cur);
      cur = PlannedPart{old.stream, static_cast<uint32_t>(entries.size()), 0, 0};
    };
    auto emit = [&](PartEntry e) {
      while (e.pieces > 0) {
        const uint64_t smallest = e.pieces > 1 ? e.length : 1;
        if (cur.bytes + smallest > max_bytes || cur.entry_count == max_entries) close();
        const PartEntry front = take_front(&e, max_bytes - cur.bytes);
        entries.push_back(front);
        ++cur.entry_count;
        cur.bytes += front.bytes();
      }
    };
    for (uint32_t k = 0; k < old.entry_count; ++k) {
      const PartEntry& e = plan->entries[old.first_entry + k];
      if (e.pieces == 1 || e.length <= max_bytes) {
        emit(e);
        continue;
      }
      for (uint64_t i = 0; i < e.pieces; ++i) {
        PartEntry one = e;
        one.pieces = 1;
        one.src_addr = e.src_addr + i * e.src_stride;
        one.dst_addr = e.dst_addr + i * e.dst_stride;
        one.src_stride = one.dst_stride = 0;
        if (e.one_block_per_piece()) {
          one.block_index = e.block_index + static_cast<uint32_t>(i);
          one.block_span = 1;
        }
        emit(one);
      }
    }
    close();
  }
  plan->entries.swap(entries);
  plan->parts.swap(parts);
}

// Steps 2 and 3 without the byte bound.
void plan_shares(const PlanLimits& limits, uint32_t first_stream, PartPlan* plan);

}  // namespace

void plan_parts(std::span<const WriteBlock> blocks, const PlanLimits& limits, uint32_t first_stream,
                PartPlan* plan) {
  plan->parts.clear();
  coalesce(blocks, &plan->entries, &plan->total_bytes);
  if (plan->entries.empty()) return;
  plan_shares(limits, first_stream, plan);
  if (limits.max_part_bytes > 0) {
    bound_part_bytes(plan, limits.max_part_bytes, limits.max_part_entries);
  }
}

namespace {

void plan_shares(const PlanLimits& limits, uint32_t first_stream, PartPlan* plan) {
  const uint64_t total = plan->total_bytes;
  const uint64_t min_split = std::max<uint64_t>(limits.min_split_bytes, 1);
  uint64_t shares = std::min<uint64_t>(limits.streams, total / min_split);
  if (shares <= 1) {
    emit_parts(plan, first_stream, 0, plan->entries.size(), limits.max_part_entries);
    return;
  }
  // Splitting adds at most shares-1 entries; `split` is reserved once per batch.
  std::vector<PartEntry> split;
  split.reserve(plan->entries.size() + shares);
  std::vector<size_t> share_end;  // exclusive end index in `split` of each share
  share_end.reserve(shares);
  const uint64_t target = (total + shares - 1) / shares;
  uint64_t in_share = 0;
  for (PartEntry e : plan->entries) {
    while (e.pieces > 0) {
      // A run is cut at piece boundaries, so a share may end a little past its target.
      const PartEntry front = take_front(&e, in_share < target ? target - in_share : UINT64_MAX);
      split.push_back(front);
      in_share += front.bytes();
      if (in_share >= target && share_end.size() + 1 < shares) {
        share_end.push_back(split.size());
        in_share = 0;
      }
    }
  }
  share_end.push_back(split.size());
  plan->entries.swap(split);
  size_t first = 0;
  for (size_t s = 0; s < share_end.size(); ++s) {
    emit_parts(plan, static_cast<uint32_t>((first_stream + s) % limits.streams), first,
               share_end[s], limits.max_part_entries);
    first = share_end[s];
  }
}

}  // namespace

BlockName name_block(const PartEntry& entry, uint64_t addr) {
  uint64_t piece = 0;
  if (entry.pieces > 1 && addr >= entry.dst_addr) {
    piece = std::min((addr - entry.dst_addr) / entry.dst_stride, entry.pieces - 1);
  }
  BlockName name;
  name.dst = entry.dst_addr + piece * entry.dst_stride;
  name.length = entry.length;
  if (entry.one_block_per_piece()) {
    name.first = name.last = entry.block_index + static_cast<uint32_t>(piece);
  } else {
    name.first = entry.block_index;
    name.last = entry.block_index + entry.block_span - 1;
  }
  return name;
}

}  // namespace pdkv::engine::tcp
