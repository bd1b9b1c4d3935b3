#include "kv/prefill/destination_plan.h"

#include <gtest/gtest.h>

#include <limits>

namespace pdkv::kv {
namespace {

constexpr uint64_t kItem = 256;
constexpr uint64_t kPages = 64;

// Two KV layers (K0 V0 K1 V1 as buffers 0..3), one aux buffer and one state buffer.
KvArgs prefill_args() {
  KvArgs a;
  a.page_size = 4;
  for (uint64_t b = 0; b < 4; ++b) {
    a.kv_data_ptrs.push_back(0x100000 * (b + 1));
    a.kv_data_lens.push_back(kItem * kPages);
    a.kv_item_lens.push_back(kItem);
  }
  a.layer_buffers = {{0, 2}, {1, 3}};
  a.aux_data_ptrs = {0x900000};
  a.aux_data_lens = {64 * 16};
  a.aux_item_lens = {64};
  a.state_data_ptrs = {0xA00000};
  a.state_data_lens = {1024 * 8};
  a.state_item_lens = {1024};
  a.state_layer_ids = {1};
  return a;
}

proto::BufferRegistration decode_registration() {
  proto::BufferRegistration r;
  for (uint64_t b = 0; b < 4; ++b) {
    r.kv.ptrs.push_back(0x10000000 * (b + 1));
    r.kv.lens.push_back(kItem * kPages);
    r.kv.item_lens.push_back(kItem);
  }
  r.aux = {{0x20000000}, {64 * 16}, {64}};
  r.state = {{0x30000000}, {1024 * 8}, {1024}};
  return r;
}

proto::PreAllocation pre_allocation(std::vector<int64_t> pages, uint64_t prefix_tokens = 0) {
  proto::PreAllocation p;
  p.room = 1;
  p.dst_kv_pages = std::move(pages);
  p.decode_prefix_len = prefix_tokens;
  p.aux_index = 3;
  p.state_slots = {5};
  p.copy_state_buffers = true;
  return p;
}

TEST(DestinationPlanTest, ChunksMapToDestinationPositions) {
  KvArgs args = prefill_args();
  auto plan =
      DestinationPlan::create(args, decode_registration(), pre_allocation({10, 11, 12, 20}));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const std::vector<int64_t> second_half = {2, 3};
  auto resolved = plan->resolve(ChunkSpec{2, second_half});
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(resolved->src_pages, second_half);
  EXPECT_EQ(resolved->dst_pages, (std::vector<int64_t>{12, 20}));

  std::vector<plan::Block> blocks;
  ASSERT_TRUE(
      plan->append_kv_blocks(*resolved, 0, std::numeric_limits<int64_t>::max(), blocks).ok());
  // Pages 2->12 and 3->20 do not coalesce: two blocks per buffer, four buffers.
  ASSERT_EQ(blocks.size(), 8u);
  EXPECT_EQ(blocks[0].src_addr, 0x100000 + 2 * kItem);
  EXPECT_EQ(blocks[0].dst_addr, 0x10000000 + 12 * kItem);
  EXPECT_EQ(blocks[0].length, kItem);
}

TEST(DestinationPlanTest, DecodePrefixPagesAreSkipped) {
  KvArgs args = prefill_args();
  // The decode already holds 8 tokens = 2 pages; it pre-allocated only pages 2 and 3.
  auto plan = DestinationPlan::create(args, decode_registration(), pre_allocation({40, 41}, 8));
  ASSERT_TRUE(plan.ok());
  const std::vector<int64_t> first = {7, 8, 9};  // request pages 0..2
  auto r = plan->resolve(ChunkSpec{0, first});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->src_pages, std::vector<int64_t>{9});
  EXPECT_EQ(r->dst_pages, std::vector<int64_t>{40});
  const std::vector<int64_t> inside_prefix = {7, 8};
  EXPECT_TRUE(plan->resolve(ChunkSpec{0, inside_prefix})->src_pages.empty());
}

TEST(DestinationPlanTest, UnalignedPrefixIsRejected) {
  KvArgs args = prefill_args();
  auto plan = DestinationPlan::create(args, decode_registration(), pre_allocation({1}, 6));
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("not a multiple of page_size 4"), std::string::npos);
}

TEST(DestinationPlanTest, ItemLengthMismatchWithoutFragmentsIsRejected) {
  KvArgs args = prefill_args();
  auto reg = decode_registration();
  reg.kv.item_lens[1] = 128;
  auto plan = DestinationPlan::create(args, reg, pre_allocation({1}));
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("carries no fragments"), std::string::npos);
}

// KV theft: a decode that names a fragment reading the whole pool (source stride 0,
// bytes_per_page = the buffer) would be pushed every other request's KV; a fragment must
// read inside one of the prefill's own pages, at its own page stride.
TEST(DestinationPlanTest, FragmentsReadingOutsideOneSourcePageAreRefused) {
  KvArgs args = prefill_args();
  auto with = [&](uint64_t src_stride, uint64_t src_offset, uint64_t bytes, uint32_t buffer) {
    proto::PreAllocation p = pre_allocation({1});
    proto::Fragment f;
    f.buffer_kind = proto::BufferKind::kTargetK;
    f.buffer_index = buffer;
    f.src_page_stride_bytes = src_stride;
    f.dst_page_stride_bytes = kItem;
    f.src_byte_offset = src_offset;
    f.bytes_per_page = bytes;
    p.fragments = {f};
    return DestinationPlan::create(args, decode_registration(), p).status();
  };
  EXPECT_TRUE(with(kItem, 0, kItem, 0).ok());
  EXPECT_TRUE(with(kItem, kItem / 2, kItem / 2, 3).ok());
  EXPECT_EQ(with(0, 0, kItem * kPages, 0).code(), StatusCode::kInvalidArgument);     // whole pool
  EXPECT_EQ(with(kItem * 2, 0, kItem, 0).code(), StatusCode::kInvalidArgument);      // wrong stride
  EXPECT_EQ(with(kItem, kItem / 2, kItem, 0).code(), StatusCode::kInvalidArgument);  // past page
  EXPECT_EQ(with(kItem, UINT64_MAX, 2, 0).code(), StatusCode::kInvalidArgument);     // wraps
  EXPECT_EQ(with(kItem, 0, kItem, 9).code(), StatusCode::kInvalidArgument);  // no such buffer
}

// Every room of one decode carries the same fragments and uses the same buffers: plans
// given equal parts share them (one copy per decode, not per room) and keep no wire copy
// of the fragments; a different list, or other buffers, get their own, and the blocks
// are the same either way.
TEST(DestinationPlanTest, EqualFragmentListsAndBuffersAreSharedAcrossRooms) {
  KvArgs args = prefill_args();
  auto with_halves = [&](uint64_t first_offset) {
    proto::PreAllocation p = pre_allocation({1, 2});
    for (uint32_t buffer = 0; buffer < 4; ++buffer) {
      for (uint64_t half = 0; half < 2; ++half) {
        proto::Fragment f;
        f.buffer_kind = proto::BufferKind::kTargetK;
        f.buffer_index = buffer;
        f.src_page_stride_bytes = kItem;
        f.dst_page_stride_bytes = kItem;
        f.src_byte_offset = (half == 0 ? first_offset : kItem / 2);
        f.dst_byte_offset = half * kItem / 2;
        f.bytes_per_page = kItem / 2;
        p.fragments.push_back(f);
      }
    }
    return p;
  };
  auto first = DestinationPlan::create(args, decode_registration(), with_halves(0));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->fragments()->size(), 8u);
  EXPECT_TRUE(first->pre_allocation().fragments.empty());
  auto second =
      DestinationPlan::create(args, decode_registration(), with_halves(0), first->shared_parts());
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(second->fragments(), first->fragments());  // the same list, not a copy
  EXPECT_EQ(second->shared_parts().buffers, first->shared_parts().buffers);
  auto other =
      DestinationPlan::create(args, decode_registration(), with_halves(8), first->shared_parts());
  ASSERT_TRUE(other.ok()) << other.status().to_string();
  EXPECT_NE(other->fragments(), first->fragments());
  EXPECT_EQ(other->fragments()->at(0).src_byte_offset, 8u);
  EXPECT_EQ(other->shared_parts().buffers, first->shared_parts().buffers);
  // A decode that registered other buffers (a restart) gets its own copy of them.
  proto::BufferRegistration moved = decode_registration();
  moved.kv.ptrs[0] += kItem * kPages;
  auto restarted = DestinationPlan::create(args, moved, with_halves(0), first->shared_parts());
  ASSERT_TRUE(restarted.ok()) << restarted.status().to_string();
  EXPECT_NE(restarted->shared_parts().buffers, first->shared_parts().buffers);
  EXPECT_EQ(restarted->shared_parts().buffers->kv_ptrs, moved.kv.ptrs);

  const std::vector<int64_t> pages = {7, 9};
  std::vector<plan::Block> a, b;
  auto resolved = first->resolve({0, pages, nullptr});
  ASSERT_TRUE(resolved.ok());
  ASSERT_TRUE(first->append_kv_blocks(*resolved, 0, INT64_MAX, a).ok());
  ASSERT_TRUE(second->append_kv_blocks(*resolved, 0, INT64_MAX, b).ok());
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
}

TEST(DestinationPlanTest, OutOfRangeDestinationPageIsAnError) {
  KvArgs args = prefill_args();
  auto plan = DestinationPlan::create(args, decode_registration(), pre_allocation({kPages}));
  ASSERT_TRUE(plan.ok());
  const std::vector<int64_t> src = {0};
  auto r = plan->resolve(ChunkSpec{0, src});
  ASSERT_TRUE(r.ok());
  std::vector<plan::Block> blocks;
  EXPECT_FALSE(plan->append_kv_blocks(*r, 0, 100, blocks).ok());
}

TEST(DestinationPlanTest, LayerRangeSelectsByGlobalId) {
  KvArgs args = prefill_args();
  args.kv_layer_ids = {0, 2};  // a hybrid model: layer 1 is a state layer
  auto plan = DestinationPlan::create(args, decode_registration(), pre_allocation({1}));
  const std::vector<int64_t> src = {0};
  auto r = plan->resolve(ChunkSpec{0, src});
  std::vector<plan::Block> blocks;
  ASSERT_TRUE(plan->append_kv_blocks(*r, 1, 3, blocks).ok());
  ASSERT_EQ(blocks.size(), 2u);  // buffers 1 and 3 of KV layer 1 (global id 2)
  EXPECT_EQ(blocks[0].src_addr, 0x200000u);
  EXPECT_EQ(blocks[1].src_addr, 0x400000u);
}

TEST(DestinationPlanTest, AuxAndStateBlocks) {
  KvArgs args = prefill_args();
  auto plan = DestinationPlan::create(args, decode_registration(), pre_allocation({1}));
  std::vector<plan::Block> blocks;
  ASSERT_TRUE(plan->append_aux_blocks(2, blocks).ok());
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].src_addr, 0x900000u + 2 * 64);
  EXPECT_EQ(blocks[0].dst_addr, 0x20000000u + 3 * 64);
  EXPECT_FALSE(plan->append_aux_blocks(16, blocks).ok());

  blocks.clear();
  const std::vector<int64_t> slots = {2};
  ASSERT_TRUE(
      plan->append_state_blocks(StateSlotLists{slots, {}}, std::nullopt, std::nullopt, blocks)
          .ok());
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].src_addr, 0xA00000u + 2 * 1024);
  EXPECT_EQ(blocks[0].dst_addr, 0x30000000u + 5 * 1024);
  blocks.clear();
  ASSERT_TRUE(plan->append_state_blocks(StateSlotLists{slots, {}}, 0, 1, blocks).ok());
  EXPECT_TRUE(blocks.empty());  // the state buffer belongs to layer 1
}

// A state buffer that is one piece of a wider slot page (state_page_strides) on both
// sides: its fragments step by the prefill's and the decode's own strides, and a decode's
// fragment must stay inside its strided destination item.
TEST(DestinationPlanTest, StateFragmentsStepByBothSidesSlotStrides) {
  KvArgs args = prefill_args();
  args.state_page_strides = {2048};
  auto reg = decode_registration();
  reg.state = {{0x30000000}, {1024 * 8}, {512}};  // this decode rank's half of the slot
  reg.state_page_strides = {1536};
  auto with = [&](uint64_t dst_offset) {
    proto::PreAllocation p = pre_allocation({1});
    proto::Fragment f;  // as the decode's planner writes it: strides = the items
    f.buffer_kind = proto::BufferKind::kMambaState;
    f.src_page_stride_bytes = 1024;
    f.dst_page_stride_bytes = 512;
    f.src_byte_offset = 512;
    f.dst_byte_offset = dst_offset;
    f.bytes_per_page = 512 - dst_offset;
    p.fragments = {f};
    return DestinationPlan::create(args, reg, p);
  };
  auto plan = with(0);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<plan::Block> blocks;
  const std::vector<int64_t> slots = {2};
  ASSERT_TRUE(
      plan->append_state_blocks(StateSlotLists{slots, {}}, std::nullopt, std::nullopt, blocks)
          .ok());
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0], (plan::Block{0xA00000u + 2 * 2048 + 512, 0x30000000u + 5 * 1536, 512}));
  // bytes 256..767 of a 512-byte destination item: refused, whatever stride it names
  auto bad = with(256);
  ASSERT_TRUE(bad.ok());  // 256 bytes at 256: inside
  proto::PreAllocation p = pre_allocation({1});
  proto::Fragment f;
  f.buffer_kind = proto::BufferKind::kMambaState;
  f.src_page_stride_bytes = 1024;
  f.dst_page_stride_bytes = 1536;  // claims the gap between the decode's items
  f.dst_byte_offset = 256;
  f.bytes_per_page = 512;
  p.fragments = {f};
  const Status refused = DestinationPlan::create(args, reg, p).status();
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("destination page of state buffer 0"), std::string::npos)
      << refused.message();
}

TEST(DestinationPlanTest, StateSlotsWithoutDecodeStateBuffersFailInsteadOfSkipping) {
  KvArgs args = prefill_args();
  auto reg = decode_registration();
  reg.state = {};
  auto p = pre_allocation({1});
  auto plan = DestinationPlan::create(args, reg, p);
  ASSERT_FALSE(plan.ok());  // buffer count mismatch caught at pre-allocation
}

TEST(DestinationPlanTest, DstOwnershipMaskMustCoverTheRoom) {
  KvArgs args = prefill_args();
  auto p = pre_allocation({1, 2, 3});
  p.dst_l1_5 = proto::PageOwnership{true, {true, false}, {9}};
  EXPECT_FALSE(DestinationPlan::create(args, decode_registration(), p).ok());
  p.dst_l1_5 = proto::PageOwnership{true, {true, false, true}, {9, 8}};
  auto plan = DestinationPlan::create(args, decode_registration(), p);
  ASSERT_TRUE(plan.ok());
  const std::vector<int64_t> src = {4, 5, 6};
  auto r = plan->resolve(ChunkSpec{0, src});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->src_pages, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(r->dst_pages, (std::vector<int64_t>{9, 8}));
}

TEST(DestinationPlanTest, SrcOwnershipOfDecodePrefixPagesIsSkippedWithThem) {
  // Request pages 0..3, the decode holds pages 0..1 (8 tokens) and pre-allocated 40, 41.
  KvArgs args = prefill_args();
  auto plan = DestinationPlan::create(args, decode_registration(), pre_allocation({40, 41}, 8));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const std::vector<int64_t> chunk = {1, 2, 3, 4};  // placeholders: L1.5 sends local pages
  const std::vector<uint8_t> mask = {1, 0, 1, 1};   // owns request pages 0, 2, 3
  const std::vector<int64_t> local = {50, 52, 53};
  plan::SrcOwnership own{std::span<const uint8_t>(mask), std::span<const int64_t>(local)};
  auto r = plan->resolve(ChunkSpec{0, chunk, &own});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->src_pages, (std::vector<int64_t>{52, 53}));
  EXPECT_EQ(r->dst_pages, (std::vector<int64_t>{40, 41}));

  // A later chunk starting inside the prefix: request pages 1..3, owns 2 and 3.
  const std::vector<int64_t> tail = {1, 2, 3};
  const std::vector<uint8_t> tail_mask = {0, 1, 1};
  const std::vector<int64_t> tail_local = {62, 63};
  plan::SrcOwnership tail_own{std::span<const uint8_t>(tail_mask),
                              std::span<const int64_t>(tail_local)};
  r = plan->resolve(ChunkSpec{1, tail, &tail_own});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->src_pages, (std::vector<int64_t>{62, 63}));
  EXPECT_EQ(r->dst_pages, (std::vector<int64_t>{40, 41}));
}

TEST(DestinationPlanTest, SrcLocalPagesNotMatchingTheMaskFailTheChunk) {
  KvArgs args = prefill_args();
  auto plan = DestinationPlan::create(args, decode_registration(), pre_allocation({40, 41}));
  ASSERT_TRUE(plan.ok());
  const std::vector<int64_t> chunk = {1, 2};
  const std::vector<uint8_t> mask = {1, 1};
  const std::vector<int64_t> local = {50};
  plan::SrcOwnership own{std::span<const uint8_t>(mask), std::span<const int64_t>(local)};
  auto r = plan->resolve(ChunkSpec{0, chunk, &own});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(DestinationPlanTest, StateGroupsSplitLayersAndFollowTheLayerRange) {
  KvArgs args = prefill_args();
  args.kv_layer_ids = {0, 2};
  args.kv_layer_groups = {-1, 1};  // KV layer 1 (buffers 1, 3) takes group 1's pages
  args.state_buffer_groups = {0};
  ASSERT_EQ(args.state_group_count(), 2);
  auto pre = pre_allocation({1});
  pre.state_slots = {5, 7, -1};
  pre.state_slot_group_ends = {1, 3};
  auto plan = DestinationPlan::create(args, decode_registration(), pre);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const std::vector<int64_t> src = {0};
  auto r = plan->resolve(ChunkSpec{0, src});
  ASSERT_TRUE(r.ok());
  std::vector<plan::Block> blocks;
  ASSERT_TRUE(plan->append_kv_blocks(*r, 0, std::numeric_limits<int64_t>::max(), blocks).ok());
  ASSERT_EQ(blocks.size(), 2u);  // the chunked layer only: buffers 0 and 2
  EXPECT_EQ(blocks[0].src_addr, 0x100000u);
  EXPECT_EQ(blocks[1].src_addr, 0x300000u);

  const std::vector<int64_t> lists = {2, 9, 4};
  const std::vector<uint32_t> ends = {1, 3};
  blocks.clear();
  ASSERT_TRUE(
      plan->append_state_blocks(StateSlotLists{lists, ends}, std::nullopt, std::nullopt, blocks)
          .ok());
  // Group 0: slot 2 -> 5; group 1: page 9 -> 7 of KV layer 1 (4 -> -1 dropped).
  EXPECT_EQ(blocks,
            (std::vector<plan::Block>{{0xA00000 + 2 * 1024, 0x30000000 + 5 * 1024, 1024},
                                      {0x200000 + 9 * kItem, 0x20000000 + 7 * kItem, kItem},
                                      {0x400000 + 9 * kItem, 0x40000000 + 7 * kItem, kItem}}));
  blocks.clear();
  ASSERT_TRUE(plan->append_state_blocks(StateSlotLists{lists, ends}, 2, 3, blocks).ok());
  EXPECT_EQ(blocks.size(), 2u);  // layer id 2: the group's KV layer, not the state buffer
  blocks.clear();
  ASSERT_TRUE(plan->append_state_blocks(StateSlotLists{lists, ends}, 1, 2, blocks).ok());
  EXPECT_EQ(blocks.size(), 1u);  // layer id 1: the state buffer only

  const std::vector<int64_t> long_lists = {2, 9, 4, 3};
  const std::vector<uint32_t> long_ends = {1, 4};
  const Status mismatch =
      plan->append_state_blocks(StateSlotLists{long_lists, long_ends}, {}, {}, blocks);
  EXPECT_NE(mismatch.message().find("state group 1: slot count mismatch: 3 source vs 2"),
            std::string::npos)
      << mismatch.to_string();

  pre.state_slot_group_ends = {3};
  const auto one_list = DestinationPlan::create(args, decode_registration(), pre);
  ASSERT_FALSE(one_list.ok());
  EXPECT_NE(one_list.status().message().find("1 state lists but the prefill has 2"),
            std::string::npos);
}

TEST(DestinationPlanTest, WindowGroupsPairTheLeadingPagesOfListsOfTwoLengths) {
  KvArgs args = prefill_args();
  args.kv_layer_ids = {0, 2};
  args.kv_layer_groups = {-1, 1};  // KV layer 1 (buffers 1, 3): group 1, a window
  args.state_buffer_groups = {0};
  args.window_state_groups = {1};
  ASSERT_TRUE(args.validate().ok()) << args.validate().to_string();
  auto pre = pre_allocation({1});
  pre.state_slots = {5, 7, 8};  // group 0: slot 5; group 1: window pages 7, 8
  pre.state_slot_group_ends = {1, 3};
  auto plan = DestinationPlan::create(args, decode_registration(), pre);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const auto group_one_blocks = [&](const std::vector<int64_t>& lists,
                                    const std::vector<uint32_t>& ends) {
    std::vector<plan::Block> blocks;
    const Status s = plan->append_state_blocks(StateSlotLists{lists, ends}, 2, 3, blocks);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return blocks;
  };
  // The prefill lists one page more (its sampled token's): pages 9, 4 go to 7, 8; 6 nowhere.
  EXPECT_EQ(group_one_blocks({2, 9, 4, 6}, {1, 4}),
            (std::vector<plan::Block>{{0x200000 + 9 * kItem, 0x20000000 + 7 * kItem, kItem},
                                      {0x200000 + 4 * kItem, 0x20000000 + 8 * kItem, kItem},
                                      {0x400000 + 9 * kItem, 0x40000000 + 7 * kItem, kItem},
                                      {0x400000 + 4 * kItem, 0x40000000 + 8 * kItem, kItem}}));
  // The decode lists one page more: page 9 goes to 7 and page 8 is written by nobody (no
  // broadcast of a one-page window).
  EXPECT_EQ(group_one_blocks({2, 9}, {1, 2}),
            (std::vector<plan::Block>{{0x200000 + 9 * kItem, 0x20000000 + 7 * kItem, kItem},
                                      {0x400000 + 9 * kItem, 0x40000000 + 7 * kItem, kItem}}));

  args.window_state_groups = {2};
  EXPECT_NE(args.validate().message().find("window_state_groups holds 2"), std::string::npos);
  args.window_state_groups = {1, 1};
  EXPECT_NE(args.validate().message().find("names group 1 twice"), std::string::npos);
}

}  // namespace
}  // namespace pdkv::kv
