// Part planning: turns a batch's block list into per-stream parts (pure, no I/O).
//
// 1. Coalesce: consecutive blocks under the same grant that continue each other in both
//    source and destination become one entry; zero-length blocks are dropped. Then consecutive
//    entries of equal length, equally spaced (ascending, not overlapping) in source and in
//    destination, fold into one run entry: a head-split KV page (16 tokens of 512 bytes,
//    destination stride 1 KiB) becomes one entry instead of 16, on the wire too.
// 2. Spread: a batch of at least 2 x min_split_bytes is cut into byte-balanced shares,
//    one per stream (up to `streams`), splitting an entry at a share boundary (a run at a
//    piece boundary) so a single huge block still uses every stream. Smaller batches go
//    to `first_stream` alone.
// 3. Bound: a share with more than max_part_entries entries, or more than max_part_bytes
//    payload bytes, becomes several parts.
// Each entry remembers which of the caller's blocks it carries (the first index and how
// many, and whether piece i is exactly block first + i), so a receiver's rejection can be
// reported against the caller's own list (name_block()) without keeping a copy of it.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/write_block.h"

namespace pdkv::engine::tcp {

// `pieces` copies of `length` bytes: the i-th from src_addr + i * src_stride to
// dst_addr + i * dst_stride (strides are 0 when pieces is 1).
struct PartEntry {
  uint64_t src_addr = 0;
  uint64_t dst_addr = 0;
  uint64_t length = 0;
  uint64_t pieces = 1;
  uint64_t src_stride = 0;
  uint64_t dst_stride = 0;
  // The caller's blocks [block_index, block_index + block_span) are the ones this entry
  // carries (contiguous blocks merge into one piece; zero-length blocks among them count).
  uint32_t block_index = 0;
  uint32_t block_span = 1;
  uint64_t grant = 0;  // every block of an entry lands under the same grant
  // Device ordinal of the entry's source memory, or -1 for host memory (set by the
  // backend after planning, from the engine's DeviceRegions; the planner leaves -1).
  int src_device = -1;
  // Its source pieces lie in different device allocations (device_copies.h).
  bool src_piecewise = false;

  uint64_t bytes() const { return length * pieces; }
  // Piece i is exactly the caller's block block_index + i (every piece is non-empty, so
  // the span equals the piece count only when no piece merged blocks or skipped one).
  bool one_block_per_piece() const { return block_span == pieces; }
};

struct PlannedPart {
  uint32_t stream = 0;
  uint32_t first_entry = 0;  // into PartPlan::entries
  uint32_t entry_count = 0;
  uint64_t bytes = 0;
  int src_device = -1;  // the device its entries read from (-1: host memory only)
};

struct PartPlan {
  std::vector<PartEntry> entries;
  std::vector<PlannedPart> parts;
  uint64_t total_bytes = 0;
};

struct PlanLimits {
  uint32_t streams = 1;
  uint64_t min_split_bytes = 1 << 20;
  uint32_t max_part_entries = 1 << 20;
  // 0 = unbounded; else no part carries more payload bytes (a part read from device
  // memory is staged whole in one pinned slab of this size).
  uint64_t max_part_bytes = 0;
};

// REQUIRES: no block's src+length or dst+length overflows (the engine checks).
// `first_stream` < limits.streams. Reuses plan's vectors.
void plan_parts(std::span<const WriteBlock> blocks, const PlanLimits& limits, uint32_t first_stream,
                PartPlan* plan);

// Which of the caller's blocks holds destination address `addr` of `entry`: exactly one
// (first == last) when the entry keeps one block per piece or carries a single block;
// otherwise the range of blocks merged into that piece. `dst` and `length` describe the
// piece (= the block, when exact).
struct BlockName {
  uint32_t first = 0;
  uint32_t last = 0;
  uint64_t dst = 0;
  uint64_t length = 0;
};
BlockName name_block(const PartEntry& entry, uint64_t addr);

}  // namespace pdkv::engine::tcp
