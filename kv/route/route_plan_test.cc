#include "kv/route/route_plan.h"

#include <gtest/gtest.h>

namespace pdkv::kv {
namespace {

// Target: 2 layers of 4 KV heads x 8 (fp16); draft: 1 layer of 2 KV heads x 16.
KvArgs draft_model_rank(int64_t tp, int64_t rank) {
  KvArgs a;
  a.engine_rank = rank;
  a.tp_size = tp;
  a.page_size = 4;
  a.total_kv_head_num = 4;
  a.kv_head_num = 4 / tp;
  a.head_dim = 8;
  a.dtype_bytes = 2;
  a.target_layer_num = 2;
  a.draft_total_kv_head_num = 2;
  a.draft_kv_head_num = tp >= 2 ? 1 : 2;
  a.draft_head_dim = 16;
  a.layer_buffers = {{0, 2}, {1, 3}, {4, 5}};
  const uint64_t target_item = 4 * static_cast<uint64_t>(a.kv_head_num) * 8 * 2;
  const uint64_t draft_item = 4 * static_cast<uint64_t>(a.draft_kv_head_num) * 16 * 2;
  for (int b = 0; b < 6; ++b) {
    const uint64_t item = b < 4 ? target_item : draft_item;
    a.kv_data_ptrs.push_back(0x100000 * (b + 1));
    a.kv_data_lens.push_back(item * 8);
    a.kv_item_lens.push_back(item);
  }
  return a;
}

PrefillRankInfo instance_of(const KvArgs& prefill) {
  PrefillRankInfo info;
  info.tp_size = prefill.tp_size;
  info.layout = prefill.layout();
  info.layout.layer_buffers.clear();  // the bootstrap server does not carry them
  info.kv_item_lens = prefill.kv_item_lens;
  return info;
}

TEST(RoutePlanTest, DraftLayersAreMarkedAndUseTheDraftGeometry) {
  const KvArgs a = draft_model_rank(1, 0);
  ASSERT_TRUE(a.validate().ok()) << a.validate().to_string();
  plan::SideLayout s = side_layout(1, a.layout(), a.kv_item_lens, {});
  ASSERT_EQ(s.kv_buffer_kinds.size(), 6u);
  EXPECT_EQ(s.kv_buffer_kinds[0], plan::BufferKind::kTargetK);
  EXPECT_EQ(s.kv_buffer_kinds[2], plan::BufferKind::kTargetV);
  EXPECT_EQ(s.kv_buffer_kinds[4], plan::BufferKind::kDraftK);
  EXPECT_EQ(s.kv_buffer_kinds[5], plan::BufferKind::kDraftV);
  ASSERT_TRUE(s.draft.has_value());
  EXPECT_EQ(s.draft->total_kv_heads, 2);
  EXPECT_EQ(s.draft->head_dim, 16);
}

TEST(RoutePlanTest, HeterogeneousTpSlicesTheDraftByItsOwnHeads) {
  // Prefill TP 2 -> decode TP 1: each prefill rank sends 2 of the target's 4 heads (16 B
  // per token each) and 1 of the draft's 2 heads (32 B per token each).
  const KvArgs decode = draft_model_rank(1, 0);
  auto route = plan_route(decode, instance_of(draft_model_rank(2, 0)));
  ASSERT_TRUE(route.ok()) << route.status().to_string();
  ASSERT_EQ(route->targets.size(), 2u);
  for (const RouteTarget& t : route->targets) {
    bool saw_draft = false;
    for (const proto::Fragment& f : *t.fragments) {
      const bool draft = f.buffer_kind == proto::BufferKind::kDraftK ||
                         f.buffer_kind == proto::BufferKind::kDraftV;
      saw_draft = saw_draft || draft;
      EXPECT_EQ(f.buffer_index >= 4, draft) << "buffer " << f.buffer_index;
      // One token's slice of the heads this prefill rank holds.
      EXPECT_EQ(f.bytes_per_page % (draft ? 32u : 32u), 0u);
      EXPECT_EQ(f.src_page_stride_bytes, draft ? 4u * 1 * 16 * 2 : 4u * 2 * 8 * 2);
      EXPECT_EQ(f.dst_page_stride_bytes, draft ? 4u * 2 * 16 * 2 : 4u * 4 * 8 * 2);
    }
    EXPECT_TRUE(saw_draft) << "prefill rank " << t.prefill_tp_rank << " sends no draft layer";
  }
}

TEST(RoutePlanTest, DifferentDraftGeometryIsALayoutMismatch) {
  KvArgs prefill = draft_model_rank(1, 0);
  KvArgs decode = draft_model_rank(1, 0);
  decode.draft_head_dim = 8;
  Status st = check_layout_compatible(prefill, decode.layout());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("draft_head_dim"), std::string::npos) << st.to_string();
  decode = draft_model_rank(1, 0);
  decode.target_layer_num = 3;
  decode.draft_head_dim = 0;
  decode.draft_total_kv_head_num = 0;
  decode.draft_kv_head_num = 0;
  st = check_layout_compatible(prefill, decode.layout());
  EXPECT_NE(st.message().find("target_layer_num"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace pdkv::kv
