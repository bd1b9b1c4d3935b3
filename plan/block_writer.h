// Internal to plan/: checked emission of blocks shared by kv_blocks and state_blocks.
//
// BlockWriter appends blocks to one reserved vector, merging a block into the previous
// one when it continues it on both sides. The emit_* helpers validate a whole run once
// (its first and last page bound every page in between, since runs step by +1), so the
// per-page loop does no checks and no allocation.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "plan/types.h"

namespace pdkv::plan::internal {

class BlockWriter {
 public:
  explicit BlockWriter(std::vector<Block>& out) : out_(out) {}

  void add(uint64_t src, uint64_t dst, uint64_t len) {
    if (!out_.empty()) {
      Block& last = out_.back();
      if (last.src_addr + last.length == src && last.dst_addr + last.length == dst) {
        last.length += len;
        return;
      }
    }
    out_.push_back(Block{src, dst, len});
  }

 private:
  std::vector<Block>& out_;
};

// One buffer's addresses on both sides; len == 0 with has_len false means unchecked.
struct BufferSides {
  uint64_t src_ptr = 0;
  uint64_t dst_ptr = 0;
  uint64_t item_len = 0;
  bool has_src_len = false;
  bool has_dst_len = false;
  uint64_t src_len = 0;
  uint64_t dst_len = 0;
};

// Checks buffer-count consistency of a table with `count` buffers; `what` names them.
Status check_table(std::span<const uint64_t> src_ptrs, std::span<const uint64_t> dst_ptrs,
                   std::span<const uint64_t> item_lens, std::span<const uint64_t> src_lens,
                   std::span<const uint64_t> dst_lens, const char* what);

BufferSides sides_of(std::span<const uint64_t> src_ptrs, std::span<const uint64_t> dst_ptrs,
                     std::span<const uint64_t> item_lens, std::span<const uint64_t> src_lens,
                     std::span<const uint64_t> dst_lens, size_t index);

// Every run's pages must be non-negative (runs ascend, so the first page is the least).
Status check_runs(std::span<const PageRun> runs);

// Default blocks: one per run, len = count * item_len.
Status emit_default(const BufferSides& b, std::span<const PageRun> runs, BlockWriter& w,
                    const char* what, size_t index);

// Fragment blocks: one per page of each run (capped by page_count), merged if contiguous.
Status emit_fragment(const BufferSides& b, const Fragment& f, std::span<const PageRun> runs,
                     BlockWriter& w, const char* what, size_t index);

// Upper bound of blocks a fragment emits over `runs` (for reserving once).
uint64_t fragment_block_bound(const Fragment& f, std::span<const PageRun> runs,
                              uint64_t total_pages);

// Stable grouping of fragment positions by buffer index: positions of buffer b are
// order[begin[b] .. begin[b+1]). Fragments with `state` != is_state_kind(kind) are left
// out. Buffer indices must lie in [0, buffer_count).
struct FragmentIndex {
  std::vector<uint32_t> begin;
  std::vector<uint32_t> order;
  size_t selected = 0;
};
Result<FragmentIndex> index_fragments(std::span<const Fragment> fragments, bool state,
                                      size_t buffer_count);

}  // namespace pdkv::plan::internal
