#include "plan/blocks.h"

#include <string>

#include "plan/block_writer.h"
#include "plan/coalesce.h"

namespace pdkv::plan {

using internal::BlockWriter;

Result<std::vector<Block>> kv_blocks(const BufferTable& buffers,
                                     std::span<const std::vector<int64_t>> layer_buffers,
                                     std::span<const int64_t> src_pages,
                                     std::span<const int64_t> dst_pages, int64_t begin_layer,
                                     int64_t end_layer, std::span<const Fragment> fragments) {
  PDKV_RETURN_IF_ERROR(internal::check_table(buffers.src_ptrs, buffers.dst_ptrs, buffers.item_lens,
                                             buffers.src_lens, buffers.dst_lens, "kv"));
  const size_t nbuf = buffers.src_ptrs.size();
  if (begin_layer < 0 || end_layer < 0) {
    return invalid_argument("negative layer bound [" + std::to_string(begin_layer) + ", " +
                            std::to_string(end_layer) + ")");
  }
  std::vector<Block> out;
  std::vector<PageRun> runs;
  PDKV_RETURN_IF_ERROR(coalesce_into(src_pages, dst_pages, runs));
  PDKV_RETURN_IF_ERROR(internal::check_runs(runs));
  if (begin_layer >= end_layer) return out;
  if (static_cast<uint64_t>(end_layer) > layer_buffers.size()) {
    return out_of_range("end_layer " + std::to_string(end_layer) + " past the " +
                        std::to_string(layer_buffers.size()) + " KV layers");
  }
  const auto layers = layer_buffers.subspan(static_cast<size_t>(begin_layer),
                                            static_cast<size_t>(end_layer - begin_layer));
  for (const auto& bufs : layers) {
    for (int64_t b : bufs) {
      if (b < 0 || static_cast<uint64_t>(b) >= nbuf) {
        return out_of_range("layer_buffers names buffer " + std::to_string(b) + " of " +
                            std::to_string(nbuf));
      }
    }
  }
  const bool has_fragment_plan = !fragments.empty();
  PDKV_ASSIGN_OR_RETURN(auto idx, internal::index_fragments(fragments, false, nbuf));

  // Reserve once for the worst case (no merging).
  const uint64_t total_pages = static_cast<uint64_t>(src_pages.size());
  uint64_t bound = 0;
  for (const auto& bufs : layers) {
    for (int64_t b : bufs) {
      if (!has_fragment_plan) {
        bound += runs.size();
        continue;
      }
      for (uint32_t k = idx.begin[b]; k < idx.begin[b + 1]; ++k) {
        bound += internal::fragment_block_bound(fragments[idx.order[k]], runs, total_pages);
      }
    }
  }
  out.reserve(bound);
  BlockWriter writer(out);
  for (const auto& bufs : layers) {
    for (int64_t bi : bufs) {
      const auto b = static_cast<size_t>(bi);
      const auto sides = internal::sides_of(buffers.src_ptrs, buffers.dst_ptrs, buffers.item_lens,
                                            buffers.src_lens, buffers.dst_lens, b);
      if (!has_fragment_plan) {
        PDKV_RETURN_IF_ERROR(internal::emit_default(sides, runs, writer, "kv", b));
        continue;
      }
      for (uint32_t k = idx.begin[b]; k < idx.begin[b + 1]; ++k) {
        PDKV_RETURN_IF_ERROR(
            internal::emit_fragment(sides, fragments[idx.order[k]], runs, writer, "kv", b));
      }
    }
  }
  return out;
}

}  // namespace pdkv::plan
