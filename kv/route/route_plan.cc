#include "kv/route/route_plan.h"

#include <string>

namespace pdkv::kv {
namespace {

proto::BufferKind to_wire_kind(plan::BufferKind kind) {
  switch (kind) {
    case plan::BufferKind::kTargetV: return proto::BufferKind::kTargetV;
    case plan::BufferKind::kDraftK: return proto::BufferKind::kDraftK;
    case plan::BufferKind::kDraftV: return proto::BufferKind::kDraftV;
    case plan::BufferKind::kState: return proto::BufferKind::kMambaState;
    case plan::BufferKind::kKv:
    case plan::BufferKind::kTargetK: return proto::BufferKind::kTargetK;
  }
  return proto::BufferKind::kTargetK;
}

proto::Fragment to_wire(const plan::Fragment& f) {
  proto::Fragment w;
  w.buffer_kind = to_wire_kind(f.kind);
  w.buffer_index = static_cast<uint32_t>(f.buffer_index);
  w.src_rank = static_cast<uint32_t>(f.src_rank < 0 ? 0 : f.src_rank);
  w.dst_rank = static_cast<uint32_t>(f.dst_rank < 0 ? 0 : f.dst_rank);
  w.src_page_stride_bytes = f.src_page_stride_bytes;
  w.dst_page_stride_bytes = f.dst_page_stride_bytes;
  w.src_byte_offset = f.src_byte_offset;
  w.dst_byte_offset = f.dst_byte_offset;
  w.bytes_per_page = f.bytes_per_page;
  w.page_count = f.page_count;
  return w;
}

}  // namespace

plan::SideLayout side_layout(int64_t tp_size, const proto::KvLayout& layout,
                             const std::vector<uint64_t>& kv_item_lens,
                             const std::vector<uint64_t>& state_item_lens) {
  plan::SideLayout s;
  s.tp_size = tp_size;
  s.page_size = layout.page_size;
  s.page_layout = layout.page_layout == proto::PageLayout::kHND ? plan::PageLayout::kHND
                                                                : plan::PageLayout::kNHD;
  s.is_mla = layout.is_mla;
  s.target.total_kv_heads = layout.total_kv_head_num;
  s.target.head_dim = layout.head_dim;
  s.target.dtype_bytes = layout.dtype_bytes;
  // Position 0 of a layer is K (or the MLA latent), position 1 is V; KV layers from
  // target_layer_num on are the draft model's, with its own geometry.
  s.kv_buffer_kinds.assign(kv_item_lens.size(), plan::BufferKind::kTargetK);
  for (size_t layer = 0; layer < layout.layer_buffers.size(); ++layer) {
    const auto& buffers = layout.layer_buffers[layer];
    const bool draft = layout.target_layer_num != 0 && layer >= layout.target_layer_num;
    for (size_t pos = 0; pos < buffers.size(); ++pos) {
      if (buffers[pos] < s.kv_buffer_kinds.size()) {
        s.kv_buffer_kinds[buffers[pos]] =
            draft ? (pos == 1 ? plan::BufferKind::kDraftV : plan::BufferKind::kDraftK)
                  : (pos == 1 ? plan::BufferKind::kTargetV : plan::BufferKind::kTargetK);
      }
    }
  }
  if (layout.target_layer_num != 0 && layout.target_layer_num < layout.layer_buffers.size()) {
    plan::KvGeometry draft = s.target;
    if (layout.draft_total_kv_head_num != 0) draft.total_kv_heads = layout.draft_total_kv_head_num;
    if (layout.draft_head_dim != 0) draft.head_dim = layout.draft_head_dim;
    s.draft = draft;
  }
  s.kv_item_lens = kv_item_lens;
  s.state_item_lens = state_item_lens;
  return s;
}

Result<RoomRoute> plan_route(const KvArgs& decode, const PrefillRankInfo& prefill) {
  RoomRoute route;
  const int64_t P = prefill.tp_size;
  const int64_t D = decode.tp_size;
  if (prefill.enable_mla_l1_5_cache) {
    if (!prefill.layout.is_mla || !decode.is_mla) {
      return invalid_argument(
          "the prefill runs the MLA L1.5 cache, which needs an MLA model on both sides");
    }
    for (int64_t p = 0; p < P; ++p) {
      RouteTarget t;
      t.prefill_tp_rank = p;
      t.required_dst_info_num = static_cast<uint32_t>(D);
      t.send_state = p == 0;
      route.targets.push_back(std::move(t));
    }
    route.required_prefill_response_num = static_cast<uint32_t>(P);
    return route;
  }
  // The bootstrap server does not carry the per-layer buffer structure; the prefill
  // checks that it equals ours when we register, so plan with ours.
  proto::KvLayout prefill_layout = prefill.layout;
  if (prefill_layout.layer_buffers.empty())
    prefill_layout.layer_buffers = decode.layout().layer_buffers;
  plan::SideLayout pre =
      side_layout(P, prefill_layout, prefill.kv_item_lens, prefill.state_item_lens);
  plan::SideLayout dec =
      side_layout(D, decode.layout(), decode.kv_item_lens, decode.state_item_lens);
  PDKV_ASSIGN_OR_RETURN(plan::FragmentPlan fp,
                        plan::plan_fragments(pre, dec, decode.attn_tp_rank()));
  for (const plan::PrefillTarget& pt : fp.targets) {
    RouteTarget t;
    t.prefill_tp_rank = pt.prefill_rank;
    t.kind = pt.dummy ? proto::PreAllocKind::kNothingNeeded : proto::PreAllocKind::kTransfer;
    t.send_state = pt.send_state;
    t.required_dst_info_num = static_cast<uint32_t>(pt.required_dst_info_num);
    std::vector<proto::Fragment> wire;
    wire.reserve(pt.fragments.size());
    for (const plan::Fragment& f : pt.fragments) wire.push_back(to_wire(f));
    t.fragments = std::make_shared<const std::vector<proto::Fragment>>(std::move(wire));
    route.targets.push_back(std::move(t));
  }
  route.required_prefill_response_num = static_cast<uint32_t>(fp.required_prefill_response_num);
  if (route.required_prefill_response_num == 0) {
    return internal_error("the route plan names no prefill rank to receive from");
  }
  return route;
}

}  // namespace pdkv::kv
