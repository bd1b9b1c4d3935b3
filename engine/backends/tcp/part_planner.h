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
// 3. Bound: a share with more than max_part_entries entries becomes several parts.
// Each entry remembers the index of the block it starts in, so a receiver's rejection
// can be reported against the caller's own list (block_for_address()).
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
  uint32_t block_index = 0;  // a caller's block at or before the entry's first byte
  uint64_t grant = 0;        // every block of an entry lands under the same grant

  uint64_t bytes() const { return length * pieces; }
};

struct PlannedPart {
  uint32_t stream = 0;
  uint32_t first_entry = 0;  // into PartPlan::entries
  uint32_t entry_count = 0;
  uint64_t bytes = 0;
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
};

// REQUIRES: no block's src+length or dst+length overflows (the engine checks).
// `first_stream` < limits.streams. Reuses plan's vectors.
void plan_parts(std::span<const WriteBlock> blocks, const PlanLimits& limits, uint32_t first_stream,
                PartPlan* plan);

// The index of a caller's block that contains `addr`, searching forward from
// entry.block_index (the blocks of one entry are consecutive in the list, and any block
// containing an address the receiver refused is itself out of range). Falls back to
// entry.block_index if no block contains addr.
uint32_t block_for_address(std::span<const WriteBlock> blocks, const PartEntry& entry,
                           uint64_t addr);

}  // namespace pdkv::engine::tcp
