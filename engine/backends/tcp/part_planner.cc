#include "engine/backends/tcp/part_planner.h"

#include <algorithm>

namespace pdkv::engine::tcp {
namespace {

void coalesce(std::span<const WriteBlock> blocks, std::vector<PartEntry>* out, uint64_t* total) {
  out->clear();
  out->reserve(blocks.size());
  *total = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const WriteBlock& b = blocks[i];
    if (b.length == 0) continue;
    *total += b.length;
    if (!out->empty()) {
      PartEntry& last = out->back();
      if (last.src_addr + last.length == b.src_addr && last.dst_addr + last.length == b.dst_addr &&
          last.length <= UINT64_MAX - b.length) {
        last.length += b.length;
        continue;
      }
    }
    out->push_back(PartEntry{b.src_addr, b.dst_addr, b.length, static_cast<uint32_t>(i)});
  }
}

// Appends parts for entries [first, last) on `stream`, at most max_entries each.
void emit_parts(PartPlan* plan, uint32_t stream, size_t first, size_t last, uint32_t max_entries) {
  while (first < last) {
    const size_t end = std::min(last, first + max_entries);
    PlannedPart part{stream, static_cast<uint32_t>(first), static_cast<uint32_t>(end - first), 0};
    for (size_t i = first; i < end; ++i) part.bytes += plan->entries[i].length;
    plan->parts.push_back(part);
    first = end;
  }
}

}  // namespace

void plan_parts(std::span<const WriteBlock> blocks, const PlanLimits& limits, uint32_t first_stream,
                PartPlan* plan) {
  plan->parts.clear();
  coalesce(blocks, &plan->entries, &plan->total_bytes);
  if (plan->entries.empty()) return;
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
    while (e.length > 0) {
      const uint64_t take = std::min(target - in_share, e.length);
      split.push_back(PartEntry{e.src_addr, e.dst_addr, take, e.block_index});
      e.src_addr += take;
      e.dst_addr += take;
      e.length -= take;
      in_share += take;
      if (in_share == target && share_end.size() + 1 < shares) {
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

uint32_t block_for_address(std::span<const WriteBlock> blocks, const PartEntry& entry,
                           uint64_t addr) {
  uint64_t expected_dst = 0;
  bool first = true;
  for (size_t i = entry.block_index; i < blocks.size(); ++i) {
    const WriteBlock& b = blocks[i];
    if (b.length == 0) continue;
    if (!first && b.dst_addr != expected_dst) break;  // end of the merged run
    if (addr >= b.dst_addr && addr - b.dst_addr < b.length) return static_cast<uint32_t>(i);
    expected_dst = b.dst_addr + b.length;
    first = false;
  }
  return entry.block_index;
}

}  // namespace pdkv::engine::tcp
