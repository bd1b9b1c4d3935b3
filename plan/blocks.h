// Per-layer KV block lists: whole pages by default, or the byte ranges of TP fragments.
//
// kv_blocks turns resolved page lists into (src_addr, dst_addr, length) writes for the
// KV buffers of the KV layers [begin_layer, end_layer) (KV-layer indices, i.e. indices
// into layer_buffers, not global layer ids). The byte mapping is the reference's
// _layer_transfer_blocks; blocks are emitted in the reference's order (layer, buffer,
// fragment, run, page) and a block that continues the previous one in both source and
// destination is merged into it, so the list is the reference's list with consecutive
// continuing blocks merged.
//
// Validation: equal buffer counts, buffer indices in range, begin/end within the layers,
// page lists of equal length, no negative page, no uint64 overflow in address
// arithmetic, and -- when the buffer lengths are given -- every block inside its source
// and destination buffer. Any failure returns an error and no blocks.
// Output: one vector, reserved once. Pure; safe to call concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "plan/buffer_table.h"
#include "plan/types.h"

namespace pdkv::plan::internal {
struct FragmentIndex;
}

namespace pdkv::plan {

// begin_layer >= end_layer gives no blocks (the reference's empty range); negative
// bounds or end_layer > layer_buffers.size() are errors. Without fragments every buffer
// copies each coalesced run as one block. With any fragment (even only state ones, as
// in the reference) each buffer copies only its own non-state fragments, page by page.
Result<std::vector<Block>> kv_blocks(const BufferTable& buffers,
                                     std::span<const std::vector<int64_t>> layer_buffers,
                                     std::span<const int64_t> src_pages,
                                     std::span<const int64_t> dst_pages, int64_t begin_layer,
                                     int64_t end_layer, std::span<const Fragment> fragments);

// The same in two steps, for callers that own the output memory (the Python binding
// writes straight into a numpy array): prepare() validates the request and sizes it,
// write() fills `out` and returns the number of blocks written (<= max_blocks()).
// The plan borrows every span and vector it was prepared from: they must outlive it.
class KvBlockPlan {
 public:
  static Result<KvBlockPlan> prepare(const BufferTable& buffers,
                                     std::span<const std::vector<int64_t>> layer_buffers,
                                     std::span<const int64_t> src_pages,
                                     std::span<const int64_t> dst_pages, int64_t begin_layer,
                                     int64_t end_layer, std::span<const Fragment> fragments);
  KvBlockPlan(KvBlockPlan&&) noexcept;
  KvBlockPlan& operator=(KvBlockPlan&&) noexcept;
  ~KvBlockPlan();

  uint64_t max_blocks() const { return max_blocks_; }
  // REQUIRES: out.size() >= max_blocks(). On error `out` holds garbage.
  Result<size_t> write(std::span<Block> out) const;

 private:
  KvBlockPlan();
  BufferTable buffers_;
  std::span<const std::vector<int64_t>> layers_;
  std::span<const Fragment> fragments_;
  std::vector<PageRun> runs_;
  uint64_t src_end_page_ = 0;
  uint64_t dst_end_page_ = 0;
  std::unique_ptr<internal::FragmentIndex> index_;
  bool has_fragment_plan_ = false;
  uint64_t max_blocks_ = 0;
};

}  // namespace pdkv::plan
