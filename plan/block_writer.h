// Internal to plan/: checked emission of blocks shared by kv_blocks and state_blocks.
//
// BlockWriter appends blocks to memory sized beforehand, merging a block into the previous
// one when it continues it on both sides. The emit_* helpers validate the extent of the
// runs once (the highest page bounds every page, since offsets grow with the page), so
// the per-page loop does no checks and no allocation.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "plan/buffer_table.h"
#include "plan/types.h"

namespace pdkv::plan::internal {

class BlockWriter {
 public:
  // REQUIRES: `data` has room for every block the caller will add (the callers size it
  // with fragment_block_bound / the run count beforehand).
  explicit BlockWriter(Block* data) : data_(data) {}

  void add(uint64_t src, uint64_t dst, uint64_t len) {
    if (size_ > 0) {
      Block& last = data_[size_ - 1];
      if (last.src_addr + last.length == src && last.dst_addr + last.length == dst) {
        last.length += len;
        return;
      }
    }
    data_[size_++] = Block{src, dst, len};
  }
  // For a block known not to continue the previous one.
  void add_unmerged(uint64_t src, uint64_t dst, uint64_t len) {
    data_[size_++] = Block{src, dst, len};
  }
  size_t size() const { return size_; }

 private:
  Block* data_;
  size_t size_ = 0;
};

// One past the highest page of any run, per side (runs ascend, so first + count).
struct RunExtent {
  uint64_t src_end_page = 0;
  uint64_t dst_end_page = 0;
};

// One buffer's addresses on both sides; len == 0 with has_len false means unchecked.
// Strides are resolved (never 0): the item length unless the table gives one.
struct BufferSides {
  uint64_t src_ptr = 0;
  uint64_t dst_ptr = 0;
  uint64_t item_len = 0;
  uint64_t src_stride = 0;
  uint64_t dst_stride = 0;
  bool has_src_len = false;
  bool has_dst_len = false;
  uint64_t src_len = 0;
  uint64_t dst_len = 0;
};

// Checks buffer-count consistency of a table (every list empty-or-one-per-buffer where
// allowed); `what` names them. Strides are checked where whole items use them
// (emit_default): with fragments a side's stride may be below the other side's item.
Status check_table(const BufferTable& table, const char* what);

BufferSides sides_of(const BufferTable& table, size_t index);

// Every run's pages must be non-negative (runs ascend, so the first page is the least);
// returns the extent of all runs.
Result<RunExtent> check_runs(std::span<const PageRun> runs);

// Default blocks: one per run, len = count * item_len, or one per page where a side's
// stride exceeds the item. The extent is checked once, so the loop is pure arithmetic.
Status emit_default(const BufferSides& b, std::span<const PageRun> runs, RunExtent extent,
                    BlockWriter& w, const char* what, size_t index);

// Fragment blocks: one per page of each run (capped by page_count), merged if contiguous.
// Without a page cap the extent is checked once; with one, each run is checked.
Status emit_fragment(const BufferSides& b, const Fragment& f, std::span<const PageRun> runs,
                     RunExtent extent, BlockWriter& w, const char* what, size_t index);

// Upper bound of blocks emit_default emits for one buffer over `runs`.
uint64_t default_block_bound(const BufferSides& b, std::span<const PageRun> runs,
                             uint64_t total_pages);

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
