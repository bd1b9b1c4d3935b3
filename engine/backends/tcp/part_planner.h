// Part planning: turns a batch's block list into per-stream parts (pure, no I/O).
//
// 1. Coalesce: consecutive blocks that continue each other in both source and
//    destination become one entry; zero-length blocks are dropped.
// 2. Spread: a batch of at least 2 x min_split_bytes is cut into byte-balanced shares,
//    one per stream (up to `streams`), splitting an entry at a share boundary so a single
//    huge block still uses every stream. Smaller batches go to `first_stream` alone.
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

struct PartEntry {
  uint64_t src_addr = 0;
  uint64_t dst_addr = 0;
  uint64_t length = 0;
  uint32_t block_index = 0;  // caller's block containing dst_addr
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

// The index of the caller's block that contains `addr`, searching forward from
// entry.block_index (blocks merged into one entry are consecutive in dst). Falls back to
// entry.block_index if addr is in none of them.
uint32_t block_for_address(std::span<const WriteBlock> blocks, const PartEntry& entry,
                           uint64_t addr);

}  // namespace pdkv::engine::tcp
