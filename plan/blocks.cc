#include "plan/blocks.h"

#include <string>

#include "plan/block_writer.h"
#include "plan/coalesce.h"

namespace pdkv::plan {

KvBlockPlan::KvBlockPlan() = default;
KvBlockPlan::KvBlockPlan(KvBlockPlan&&) noexcept = default;
KvBlockPlan& KvBlockPlan::operator=(KvBlockPlan&&) noexcept = default;
KvBlockPlan::~KvBlockPlan() = default;

Result<KvBlockPlan> KvBlockPlan::prepare(const BufferTable& buffers,
                                         std::span<const std::vector<int64_t>> layer_buffers,
                                         std::span<const int64_t> src_pages,
                                         std::span<const int64_t> dst_pages, int64_t begin_layer,
                                         int64_t end_layer, std::span<const Fragment> fragments) {
  PDKV_RETURN_IF_ERROR(internal::check_table(buffers, "kv"));
  const size_t nbuf = buffers.src_ptrs.size();
  if (begin_layer < 0 || end_layer < 0) {
    return invalid_argument("negative layer bound [" + std::to_string(begin_layer) + ", " +
                            std::to_string(end_layer) + ")");
  }
  KvBlockPlan plan;
  plan.buffers_ = buffers;
  plan.fragments_ = fragments;
  PDKV_RETURN_IF_ERROR(coalesce_into(src_pages, dst_pages, plan.runs_));
  PDKV_ASSIGN_OR_RETURN(auto extent, internal::check_runs(plan.runs_));
  plan.src_end_page_ = extent.src_end_page;
  plan.dst_end_page_ = extent.dst_end_page;
  if (begin_layer >= end_layer) return plan;  // the reference's empty range
  if (static_cast<uint64_t>(end_layer) > layer_buffers.size()) {
    return out_of_range("end_layer " + std::to_string(end_layer) + " past the " +
                        std::to_string(layer_buffers.size()) + " KV layers");
  }
  plan.layers_ = layer_buffers.subspan(static_cast<size_t>(begin_layer),
                                       static_cast<size_t>(end_layer - begin_layer));
  for (const auto& bufs : plan.layers_) {
    for (int64_t b : bufs) {
      if (b < 0 || static_cast<uint64_t>(b) >= nbuf) {
        return out_of_range("layer_buffers names buffer " + std::to_string(b) + " of " +
                            std::to_string(nbuf));
      }
    }
  }
  // Any fragment, even a state one, replaces the default blocks (as in the reference).
  plan.has_fragment_plan_ = !fragments.empty();
  PDKV_ASSIGN_OR_RETURN(auto idx, internal::index_fragments(fragments, false, nbuf));
  plan.index_ = std::make_unique<internal::FragmentIndex>(std::move(idx));

  const uint64_t total_pages = static_cast<uint64_t>(src_pages.size());
  for (const auto& bufs : plan.layers_) {
    for (int64_t b : bufs) {
      if (!plan.has_fragment_plan_) {
        plan.max_blocks_ += internal::default_block_bound(
            internal::sides_of(buffers, static_cast<size_t>(b)), plan.runs_, total_pages);
        continue;
      }
      for (uint32_t k = plan.index_->begin[b]; k < plan.index_->begin[b + 1]; ++k) {
        plan.max_blocks_ += internal::fragment_block_bound(fragments[plan.index_->order[k]],
                                                           plan.runs_, total_pages);
      }
    }
  }
  return plan;
}

Result<size_t> KvBlockPlan::write(std::span<Block> out) const {
  if (out.size() < max_blocks_) return invalid_argument("output smaller than max_blocks()");
  internal::BlockWriter writer(out.data());
  const internal::RunExtent extent{src_end_page_, dst_end_page_};
  for (const auto& bufs : layers_) {
    for (int64_t bi : bufs) {
      const auto b = static_cast<size_t>(bi);
      const auto sides = internal::sides_of(buffers_, b);
      if (!has_fragment_plan_) {
        PDKV_RETURN_IF_ERROR(internal::emit_default(sides, runs_, extent, writer, "kv", b));
        continue;
      }
      for (uint32_t k = index_->begin[b]; k < index_->begin[b + 1]; ++k) {
        PDKV_RETURN_IF_ERROR(internal::emit_fragment(sides, fragments_[index_->order[k]], runs_,
                                                     extent, writer, "kv", b));
      }
    }
  }
  return writer.size();
}

Result<std::vector<Block>> kv_blocks(const BufferTable& buffers,
                                     std::span<const std::vector<int64_t>> layer_buffers,
                                     std::span<const int64_t> src_pages,
                                     std::span<const int64_t> dst_pages, int64_t begin_layer,
                                     int64_t end_layer, std::span<const Fragment> fragments) {
  PDKV_ASSIGN_OR_RETURN(
      auto plan, KvBlockPlan::prepare(buffers, layer_buffers, src_pages, dst_pages, begin_layer,
                                      end_layer, fragments));
  std::vector<Block> out(plan.max_blocks());  // one allocation for the whole call
  PDKV_ASSIGN_OR_RETURN(size_t n, plan.write(out));
  out.resize(n);
  return out;
}

}  // namespace pdkv::plan
