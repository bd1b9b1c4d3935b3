#include "kv/prefill/destination_plan.h"

#include <algorithm>
#include <limits>
#include <string>

#include "kv/prefill/fragment_checks.h"
#include "plan/blocks.h"
#include "plan/slot_pairs.h"
#include "plan/state_blocks.h"

namespace pdkv::kv {
namespace {

constexpr int64_t kAllLayerIds = std::numeric_limits<int64_t>::max();

plan::BufferKind to_plan_kind(proto::BufferKind kind) {
  switch (kind) {
    case proto::BufferKind::kTargetK: return plan::BufferKind::kTargetK;
    case proto::BufferKind::kTargetV: return plan::BufferKind::kTargetV;
    case proto::BufferKind::kDraftK: return plan::BufferKind::kDraftK;
    case proto::BufferKind::kDraftV: return plan::BufferKind::kDraftV;
    case proto::BufferKind::kMambaState: return plan::BufferKind::kState;
  }
  return plan::BufferKind::kKv;
}

bool has_kv_fragment(const std::vector<plan::Fragment>& fragments) {
  return std::any_of(fragments.begin(), fragments.end(),
                     [](const plan::Fragment& f) { return !plan::is_state_kind(f.kind); });
}

// `fragments` as a shared list, once check_fragment_sources() passed.
Result<FragmentList> checked_and_shared(const KvArgs& prefill, const proto::BufferRegistration& reg,
                                        std::vector<plan::Fragment> fragments) {
  PDKV_RETURN_IF_ERROR(check_fragment_sources(prefill, fragments));
  PDKV_RETURN_IF_ERROR(apply_page_strides(prefill, reg, fragments));
  return FragmentList(std::make_shared<const std::vector<plan::Fragment>>(std::move(fragments)));
}

}  // namespace

Result<FragmentList> checked_fragment_list(const KvArgs& prefill,
                                           const proto::BufferRegistration& registration,
                                           std::span<const proto::Fragment> fragments) {
  return checked_and_shared(prefill, registration, to_plan_fragments(fragments));
}

std::vector<plan::Fragment> to_plan_fragments(std::span<const proto::Fragment> fragments) {
  std::vector<plan::Fragment> out;
  out.reserve(fragments.size());
  for (const proto::Fragment& f : fragments) {
    plan::Fragment p;
    p.kind = to_plan_kind(f.buffer_kind);
    p.buffer_index = f.buffer_index;
    p.src_page_stride_bytes = f.src_page_stride_bytes;
    p.dst_page_stride_bytes = f.dst_page_stride_bytes;
    p.src_byte_offset = f.src_byte_offset;
    p.dst_byte_offset = f.dst_byte_offset;
    p.bytes_per_page = f.bytes_per_page;
    p.page_count = f.page_count;
    p.src_rank = static_cast<int32_t>(f.src_rank);
    p.dst_rank = static_cast<int32_t>(f.dst_rank);
    out.push_back(p);
  }
  return out;
}

namespace {

// The prefill's side of DestinationBuffers is the same for every plan of one `prefill`
// (PlanSharing's contract), so only the registration is compared.
bool same_buffers(const DestinationBuffers& b, const proto::BufferRegistration& reg) {
  return b.kv_ptrs == reg.kv.ptrs && b.kv_lens == reg.kv.lens &&
         b.kv_strides == reg.kv_page_strides && b.state_ptrs == reg.state.ptrs &&
         b.state_strides == reg.state_page_strides && b.state_lens == reg.state.lens &&
         b.aux_ptrs == reg.aux.ptrs && b.aux_lens == reg.aux.lens &&
         b.aux_item_lens == reg.aux.item_lens;
}

std::shared_ptr<const DestinationBuffers> buffers_of(const KvArgs& prefill,
                                                     const proto::BufferRegistration& reg) {
  auto b = std::make_shared<DestinationBuffers>();
  b->kv_ptrs = reg.kv.ptrs;
  b->kv_lens = reg.kv.lens;
  b->kv_strides = reg.kv_page_strides;
  b->state_ptrs = reg.state.ptrs;
  b->state_lens = reg.state.lens;
  b->state_strides = reg.state_page_strides;
  b->aux_ptrs = reg.aux.ptrs;
  b->aux_lens = reg.aux.lens;
  b->aux_item_lens = reg.aux.item_lens;
  b->layer_buffers = prefill.layer_buffers;
  b->kv_layer_ids = prefill.effective_kv_layer_ids();
  b->kv_layer_groups.resize(prefill.layer_buffers.size());
  for (size_t l = 0; l < prefill.layer_buffers.size(); ++l) {
    b->kv_layer_groups[l] = prefill.kv_layer_group(l);
  }
  return b;
}

}  // namespace

Result<DestinationPlan> DestinationPlan::create(const KvArgs& prefill,
                                                const proto::BufferRegistration& registration,
                                                proto::PreAllocation pre_allocation,
                                                const PlanSharing& share) {
  DestinationPlan plan;
  plan.prefill_ = &prefill;
  const auto& reg = registration;
  if (pre_allocation.decode_prefix_len % static_cast<uint64_t>(prefill.page_size) != 0) {
    return invalid_argument("decode_prefix_len " +
                            std::to_string(pre_allocation.decode_prefix_len) +
                            " is not a multiple of page_size " + std::to_string(prefill.page_size));
  }
  plan.prefix_pages_ = static_cast<int64_t>(pre_allocation.decode_prefix_len /
                                            static_cast<uint64_t>(prefill.page_size));
  if (pre_allocation.fragments_from_registration && share.registered_fragments) {
    plan.fragments_ = share.registered_fragments;  // checked when the decode registered
  } else {
    const std::vector<proto::Fragment>& wire = pre_allocation.fragments_from_registration
                                                   ? registration.fragments
                                                   : pre_allocation.fragments;
    std::vector<plan::Fragment> fragments = to_plan_fragments(wire);
    PDKV_RETURN_IF_ERROR(check_fragment_sources(prefill, fragments));
    PDKV_RETURN_IF_ERROR(apply_page_strides(prefill, reg, fragments));
    if (share.fragments && *share.fragments == fragments) {
      plan.fragments_ = share.fragments;  // an earlier plan's, the same list
    } else {
      plan.fragments_ = std::make_shared<const std::vector<plan::Fragment>>(std::move(fragments));
    }
    std::vector<proto::Fragment>().swap(pre_allocation.fragments);  // the wire copy
  }
  if (pre_allocation.kind == proto::PreAllocKind::kTransfer) {
    if (reg.kv.ptrs.size() != prefill.kv_data_ptrs.size()) {
      return invalid_argument("decode registered " + std::to_string(reg.kv.ptrs.size()) +
                              " KV buffers but the prefill has " +
                              std::to_string(prefill.kv_data_ptrs.size()));
    }
    if (!has_kv_fragment(*plan.fragments_)) {
      // Without fragments the reference copies prefill items onto decode items one for
      // one, which is only right when they have the same size.
      for (size_t i = 0; i < reg.kv.item_lens.size(); ++i) {
        if (reg.kv.item_lens[i] != prefill.kv_item_lens[i]) {
          return invalid_argument("KV buffer " + std::to_string(i) + " has item length " +
                                  std::to_string(prefill.kv_item_lens[i]) + " on prefill but " +
                                  std::to_string(reg.kv.item_lens[i]) +
                                  " on decode and the pre-allocation carries no fragments");
        }
      }
    }
    const int64_t groups = prefill.state_group_count();
    const size_t lists = pre_allocation.state_slot_group_ends.size();
    if (lists != 0 && static_cast<int64_t>(lists) != groups) {
      return invalid_argument("the decode sent " + std::to_string(lists) +
                              " state lists but the prefill has " + std::to_string(groups) +
                              " state groups");
    }
    if (lists == 0 && !pre_allocation.state_slots.empty() && groups > 1) {
      return invalid_argument("the decode sent one state list but the prefill has " +
                              std::to_string(groups) + " state groups");
    }
    if (!pre_allocation.state_slots.empty() && !prefill.state_data_ptrs.empty() &&
        pre_allocation.copy_state_buffers &&
        reg.state.ptrs.size() != prefill.state_data_ptrs.size()) {
      return invalid_argument("decode registered " + std::to_string(reg.state.ptrs.size()) +
                              " state buffers but the prefill has " +
                              std::to_string(prefill.state_data_ptrs.size()));
    }
  }
  if (pre_allocation.dst_l1_5 && pre_allocation.dst_l1_5->indices_are_local) {
    const auto& own = *pre_allocation.dst_l1_5;
    plan.dst_local_ = true;
    plan.dst_mask_.reserve(own.page_transfer_mask.size());
    plan.dst_mapping_.reserve(own.page_transfer_mask.size());
    int64_t owned = 0;
    for (bool bit : own.page_transfer_mask) {
      plan.dst_mask_.push_back(bit ? 1 : 0);
      owned += bit ? 1 : 0;
      plan.dst_mapping_.push_back(owned - 1);
    }
    if (plan.dst_mask_.size() != pre_allocation.dst_kv_pages.size()) {
      return invalid_argument("L1.5 page_transfer_mask has " +
                              std::to_string(plan.dst_mask_.size()) + " entries but the room has " +
                              std::to_string(pre_allocation.dst_kv_pages.size()) +
                              " destination pages");
    }
  }
  plan.buffers_ =
      share.buffers && same_buffers(*share.buffers, reg) ? share.buffers : buffers_of(prefill, reg);
  plan.pre_allocation_ = std::move(pre_allocation);
  return plan;
}

Result<plan::ResolvedIndices> DestinationPlan::resolve(const ChunkSpec& chunk) const {
  const int64_t n = static_cast<int64_t>(chunk.pages.size());
  if (chunk.first_page < 0) return invalid_argument("chunk first_page is negative");
  const int64_t skip = std::clamp<int64_t>(prefix_pages_ - chunk.first_page, 0, n);
  const int64_t slice_start = chunk.first_page + skip - prefix_pages_;
  const int64_t slice_stop = chunk.first_page + n - prefix_pages_;
  if (skip == n) return plan::ResolvedIndices{};  // the chunk lies inside the decode prefix
  plan::DstOwnership dst_own;
  const plan::DstOwnership* dst_l15 = nullptr;
  const auto& local = pre_allocation_.dst_l1_5;
  if (dst_local_) {
    dst_own.page_transfer_mask = std::span<const uint8_t>(dst_mask_);
    dst_own.page_indices_mapping = std::span<const int64_t>(dst_mapping_);
    dst_own.page_local_indices = std::span<const int64_t>(local->page_local_indices);
    dst_l15 = &dst_own;
  }
  // The prefill's mask covers the whole chunk, prefix pages included: the skipped pages
  // take their mask entries, and the local pages of those they own, with them.
  plan::SrcOwnership src_own;
  const plan::SrcOwnership* src_l15 = chunk.src_l15;
  if (src_l15 && skip > 0 && src_l15->page_transfer_mask && src_l15->page_local_indices) {
    const auto mask = *src_l15->page_transfer_mask;
    const auto local_pages = *src_l15->page_local_indices;
    const size_t skipped = std::min(static_cast<size_t>(skip), mask.size());
    const auto owned_skipped = static_cast<size_t>(
        std::count_if(mask.begin(), mask.begin() + static_cast<std::ptrdiff_t>(skipped),
                      [](uint8_t m) { return m != 0; }));
    src_own.page_transfer_mask = mask.subspan(skipped);
    src_own.page_local_indices = local_pages.subspan(std::min(owned_skipped, local_pages.size()));
    src_l15 = &src_own;
  }
  return plan::resolve_indices(chunk.pages.subspan(static_cast<size_t>(skip)),
                               pre_allocation_.dst_kv_pages, slice_start, slice_stop, src_l15,
                               dst_l15);
}

plan::BufferTable DestinationPlan::kv_table() const {
  const DestinationBuffers& dst = *buffers_;
  return plan::BufferTable{prefill_->kv_data_ptrs, dst.kv_ptrs, prefill_->kv_item_lens,
                           prefill_->kv_data_lens, dst.kv_lens, prefill_->kv_page_strides,
                           dst.kv_strides};
}

Status DestinationPlan::append_layer_blocks(int64_t group, std::span<const int64_t> src_pages,
                                            std::span<const int64_t> dst_pages,
                                            int64_t begin_layer_id, int64_t end_layer_id,
                                            std::vector<plan::Block>& out) const {
  if (src_pages.empty()) return Status();
  const DestinationBuffers& dst = *buffers_;
  const plan::BufferTable table = kv_table();
  // KV layers of the group whose global id is in range, as maximal runs of consecutive
  // KV-layer indices (hybrid models interleave KV and state layers, so the ids may have
  // gaps, and groups interleave too).
  const int64_t layers = static_cast<int64_t>(dst.layer_buffers.size());
  auto wanted = [&](int64_t l) {
    return dst.kv_layer_groups[l] == group && dst.kv_layer_ids[l] >= begin_layer_id &&
           dst.kv_layer_ids[l] < end_layer_id;
  };
  int64_t l = 0;
  while (l < layers) {
    if (!wanted(l)) {
      ++l;
      continue;
    }
    int64_t run_end = l + 1;
    while (run_end < layers && wanted(run_end)) ++run_end;
    PDKV_ASSIGN_OR_RETURN(auto blocks, plan::kv_blocks(table, dst.layer_buffers, src_pages,
                                                       dst_pages, l, run_end, *fragments_));
    out.insert(out.end(), blocks.begin(), blocks.end());
    l = run_end;
  }
  return Status();
}

Status DestinationPlan::append_kv_blocks(const plan::ResolvedIndices& pages, int64_t begin_layer_id,
                                         int64_t end_layer_id,
                                         std::vector<plan::Block>& out) const {
  return append_layer_blocks(-1, pages.src_pages, pages.dst_pages, begin_layer_id, end_layer_id,
                             out);
}

Status DestinationPlan::append_state_blocks(StateSlotLists src,
                                            std::optional<int64_t> begin_layer_id,
                                            std::optional<int64_t> end_layer_id,
                                            std::vector<plan::Block>& out) const {
  const StateSlotLists dst{pre_allocation_.state_slots, pre_allocation_.state_slot_group_ends};
  const size_t groups = std::max(state_list_count(src), state_list_count(dst));
  const DestinationBuffers& buffers = *buffers_;
  const bool copy_state = pre_allocation_.copy_state_buffers && !prefill_->state_data_ptrs.empty();
  std::vector<int64_t> src_pages, dst_pages;  // a group's kept pairs, for its KV layers
  for (size_t g = 0; g < groups; ++g) {
    auto src_list = state_list(src, g);
    auto dst_list = state_list(dst, g);
    if (src_list.empty() || dst_list.empty()) continue;
    if (prefill_->is_window_state_group(static_cast<int64_t>(g)) &&
        src_list.size() != dst_list.size()) {
      // Both window lists start at the window's first page; the longer one ends past the
      // shorter one's last page (kv_args.h, window_state_groups), so the pages both hold
      // are the leading ones.
      const size_t both = std::min(src_list.size(), dst_list.size());
      src_list = src_list.first(both);
      dst_list = dst_list.first(both);
    }
    auto in_group = [&](const std::string& why) {
      return invalid_argument("state group " + std::to_string(g) + ": " + why);
    };
    // Paired once here: the group's KV layers take these pages, and a pairing error
    // names the group whatever the group holds.
    if (Status paired = plan::pair_slots(src_list, dst_list, src_pages, dst_pages); !paired.ok()) {
      return in_group(paired.message());
    }
    if (copy_state) {
      if (buffers.state_ptrs.empty()) {
        // The reference reported success here without sending the state: the decode then
        // decoded from slots nobody wrote.
        return failed_precondition(
            "the room has state slots but the decode registered no state buffers");
      }
      plan::BufferTable table{prefill_->state_data_ptrs, buffers.state_ptrs,
                              prefill_->state_item_lens, prefill_->state_data_lens,
                              buffers.state_lens,        prefill_->state_page_strides,
                              buffers.state_strides};
      plan::StateSlots slots;
      slots.src_slots = src_list;
      slots.dst_slots = dst_list;
      slots.buffer_groups = prefill_->state_buffer_groups;
      slots.group = static_cast<int64_t>(g);
      if (begin_layer_id || end_layer_id) {
        slots.state_layer_ids = std::span<const int64_t>(prefill_->state_layer_ids);
        slots.begin_layer = begin_layer_id;
        slots.end_layer = end_layer_id;
      }
      auto blocks = plan::state_blocks(table, slots, *fragments_);
      if (!blocks.ok()) {
        return Status(blocks.status().code(),
                      "state group " + std::to_string(g) + ": " + blocks.status().message());
      }
      out.insert(out.end(), blocks->begin(), blocks->end());
    }
    if (!prefill_->has_group_kv_layers()) continue;
    PDKV_RETURN_IF_ERROR(append_layer_blocks(static_cast<int64_t>(g), src_pages, dst_pages,
                                             begin_layer_id.value_or(0),
                                             end_layer_id.value_or(kAllLayerIds), out));
  }
  return Status();
}

Status DestinationPlan::append_aux_blocks(int64_t src_aux_index,
                                          std::vector<plan::Block>& out) const {
  const auto& dst_index = pre_allocation_.aux_index;
  const DestinationBuffers& dst = *buffers_;
  if (!dst_index || prefill_->aux_data_ptrs.empty() || dst.aux_ptrs.empty()) return Status();
  if (dst.aux_ptrs.size() != prefill_->aux_data_ptrs.size()) {
    return invalid_argument("decode registered " + std::to_string(dst.aux_ptrs.size()) +
                            " aux buffers but the prefill has " +
                            std::to_string(prefill_->aux_data_ptrs.size()));
  }
  if (src_aux_index < 0 || *dst_index < 0) return out_of_range("negative aux index");
  for (size_t i = 0; i < dst.aux_ptrs.size(); ++i) {
    const uint64_t item = prefill_->aux_item_lens[i];
    if (dst.aux_item_lens[i] != item) {
      return invalid_argument("aux buffer " + std::to_string(i) + " has item length " +
                              std::to_string(item) + " on prefill but " +
                              std::to_string(dst.aux_item_lens[i]) + " on decode");
    }
    const auto src_row = static_cast<uint64_t>(src_aux_index);
    const auto dst_row = static_cast<uint64_t>(*dst_index);
    const uint64_t src_rows = prefill_->aux_data_lens[i] / item;
    const uint64_t dst_rows = dst.aux_lens[i] / item;
    if (src_row >= src_rows || dst_row >= dst_rows) {
      return out_of_range("aux row " + std::to_string(src_row) + " -> " + std::to_string(dst_row) +
                          " outside buffer " + std::to_string(i) + " (" + std::to_string(src_rows) +
                          " / " + std::to_string(dst_rows) + " rows)");
    }
    out.push_back(plan::Block{prefill_->aux_data_ptrs[i] + src_row * item,
                              dst.aux_ptrs[i] + dst_row * item, item});
  }
  return Status();
}

}  // namespace pdkv::kv
