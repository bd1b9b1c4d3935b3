// BufferTable: both sides' buffers as the block planners (blocks.h, state_blocks.h) and
// their shared emitter (block_writer.h) read them. Plain views; no ownership.
#pragma once

#include <cstdint>
#include <span>

namespace pdkv::plan {

// Both sides' buffers, indexed by buffer index. item_lens are the prefill item lengths;
// the reference uses them for both sides. Empty src_lens/dst_lens = not checked.
// Page strides: bytes from page i to page i+1 of each buffer on each side; empty, or 0
// for a buffer, = its item length (pages packed). A stride larger than the item is a
// buffer whose pages sit inside a larger block (FlashInfer keeps K and V of a page side
// by side), so its pages are never merged into one block.
struct BufferTable {
  std::span<const uint64_t> src_ptrs;
  std::span<const uint64_t> dst_ptrs;
  std::span<const uint64_t> item_lens;
  std::span<const uint64_t> src_lens;
  std::span<const uint64_t> dst_lens;
  std::span<const uint64_t> src_strides = {};
  std::span<const uint64_t> dst_strides = {};
};

}  // namespace pdkv::plan
