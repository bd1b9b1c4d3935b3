// State groups and strided KV pages in plan/: a group's state buffers copy its slots, a
// group's KV layers copy its pages head-sliced like chunked pages (the same fragments),
// pages may sit at a stride wider than the page (FlashInfer's K and V side by side), and
// every block stays inside its buffers.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "plan/blocks.h"
#include "plan/fragment_planner.h"
#include "plan/slot_pairs.h"
#include "plan/state_blocks.h"

namespace pdkv::plan {
namespace {

using U = std::vector<uint64_t>;
using V = std::vector<int64_t>;

uint64_t addr(const std::vector<uint8_t>& v) { return reinterpret_cast<uint64_t>(v.data()); }

void apply(const std::vector<Block>& blocks) {
  for (const Block& b : blocks) {
    std::memcpy(reinterpret_cast<void*>(b.dst_addr), reinterpret_cast<const void*>(b.src_addr),
                b.length);
  }
}

TEST(SlotPairs, DropsNegativesAndBroadcasts) {
  V s, d;
  ASSERT_TRUE(pair_slots(V{4, -1, 6, 7}, V{1, 2, -1, 3}, s, d).ok());
  EXPECT_EQ(s, (V{4, 7}));
  EXPECT_EQ(d, (V{1, 3}));
  ASSERT_TRUE(pair_slots(V{9}, V{1, -1, 3}, s, d).ok());
  EXPECT_EQ(s, (V{9, 9}));
  EXPECT_EQ(d, (V{1, 3}));
  const Status bad = pair_slots(V{1, 2}, V{1, 2, 3}, s, d);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("2 source vs 3 destination"), std::string::npos);
}

TEST(StateGroups, OnlyTheGroupsBuffersCopyItsSlots) {
  // Buffers 0 and 2 are group 0 (8-byte slots), buffer 1 is group 1 (4-byte slots).
  const U src_ptrs{1000, 2000, 3000}, dst_ptrs{5000, 6000, 7000}, items{8, 4, 8};
  const U lens{80, 40, 80};
  const BufferTable table{src_ptrs, dst_ptrs, items, lens, lens};
  const V groups{0, 1, 0};
  const V src{2, -1, 5}, dst{1, 3, -1};
  StateSlots slots;
  slots.src_slots = std::span<const int64_t>(src);
  slots.dst_slots = std::span<const int64_t>(dst);
  slots.buffer_groups = groups;
  slots.group = 0;
  auto blocks = state_blocks(table, slots, {});
  ASSERT_TRUE(blocks.ok()) << blocks.status().to_string();
  EXPECT_EQ(*blocks, (std::vector<Block>{{1016, 5008, 8}, {3016, 7008, 8}}));
  slots.group = 1;
  blocks = state_blocks(table, slots, {});
  ASSERT_TRUE(blocks.ok());
  EXPECT_EQ(*blocks, (std::vector<Block>{{2008, 6004, 4}}));
  slots.group = 2;  // a group without state buffers
  blocks = state_blocks(table, slots, {});
  ASSERT_TRUE(blocks.ok());
  EXPECT_TRUE(blocks->empty());
  const V short_groups{0};
  slots.buffer_groups = short_groups;
  EXPECT_EQ(state_blocks(table, slots, {}).status().code(), StatusCode::kInvalidArgument);
}

// A group's KV layer between TP sizes: one layer of K and V, H heads, S tokens a page,
// kPages pages a buffer; `strided` keeps K and V of a page side by side (FlashInfer).
constexpr int64_t kH = 4, kS = 2, kHeadDim = 4, kDtype = 2, kHeadBytes = kHeadDim * kDtype;
constexpr int64_t kPages = 6;

struct Side {
  std::vector<uint8_t> mem;  // strided: one region per page [K | V]; else K then V
  U ptrs, lens, strides;
  uint64_t item = 0;
};

Side make_side(int64_t heads, bool strided, uint8_t fill) {
  Side s;
  s.item = static_cast<uint64_t>(heads * kS * kHeadBytes);
  s.mem.assign(2 * s.item * kPages, fill);
  const uint64_t base = addr(s.mem);
  if (strided) {
    s.ptrs = {base, base + s.item};
    s.lens = {2 * s.item * kPages - s.item, 2 * s.item * kPages - s.item};
    s.strides = {2 * s.item, 2 * s.item};
  } else {
    s.ptrs = {base, base + s.item * kPages};
    s.lens = {s.item * kPages, s.item * kPages};
    s.strides = {0, 0};
  }
  return s;
}

// Byte of (buffer b, page q, token t, local head h) inside a side's memory.
size_t at(const Side& s, bool strided, int64_t b, int64_t q, int64_t t, int64_t h, int64_t heads,
          PageLayout pl) {
  const size_t page = strided ? static_cast<size_t>((2 * q + b)) * s.item
                              : static_cast<size_t>(b * kPages + q) * s.item;
  const int64_t e = pl == PageLayout::kNHD ? t * heads + h : h * kS + t;
  return page + static_cast<size_t>(e * kHeadBytes);
}

SideLayout layout_of(int64_t tp, PageLayout pl, const Side& s) {
  SideLayout l;
  l.tp_size = tp;
  l.page_size = kS;
  l.page_layout = pl;
  l.target = KvGeometry{kH, kHeadDim, kDtype};
  l.kv_buffer_kinds = {BufferKind::kTargetK, BufferKind::kTargetV};
  l.kv_item_lens = {s.item, s.item};
  l.kv_page_strides = s.strides;
  return l;
}

void run_group_layer(int64_t D, PageLayout pl, bool strided) {
  SCOPED_TRACE(::testing::Message()
               << "D=" << D << " layout=" << static_cast<int>(pl) << " strided=" << strided);
  std::mt19937 rng(static_cast<uint32_t>(D * 10 + strided));
  Side pre = make_side(kH, strided, 0);
  for (auto& x : pre.mem) x = static_cast<uint8_t>(rng() % 255 + 1);
  // The group's lists: a broadcast-free pairing with entries each side drops.
  const V src_list{0, 3, -1, 5, 1}, dst_list{4, -1, 2, 0, 5};
  V src, dst;
  ASSERT_TRUE(pair_slots(src_list, dst_list, src, dst).ok());
  const std::vector<std::vector<int64_t>> layers{{0, 1}};
  for (int64_t d = 0; d < D; ++d) {
    const int64_t dh = kH / D;
    Side dec = make_side(dh, strided, 0xEE);
    auto fp = plan_fragments(layout_of(1, pl, pre), layout_of(D, pl, dec), d);
    ASSERT_TRUE(fp.ok()) << fp.status().to_string();
    ASSERT_EQ(fp->targets.size(), 1u);
    EXPECT_EQ(fp->identity, D == 1);
    const U items{pre.item, pre.item};
    const BufferTable table{pre.ptrs, dec.ptrs,    items,      pre.lens,
                            dec.lens, pre.strides, dec.strides};
    auto blocks = kv_blocks(table, layers, src, dst, 0, 1, fp->targets[0].fragments);
    ASSERT_TRUE(blocks.ok()) << blocks.status().to_string();
    std::vector<uint8_t> want = dec.mem;
    for (size_t i = 0; i < src.size(); ++i) {
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t t = 0; t < kS; ++t)
          for (int64_t h = 0; h < dh; ++h) {
            std::memcpy(&want[at(dec, strided, b, dst[i], t, h, dh, pl)],
                        &pre.mem[at(pre, strided, b, src[i], t, d * dh + h, kH, pl)], kHeadBytes);
          }
    }
    apply(*blocks);
    EXPECT_EQ(dec.mem, want);
  }
}

TEST(StridedStateSlots, PiecesOfOnePageMergeIntoOneCopy) {
  // Two state buffers are pieces of one 16-byte slot page (8 bytes at 0, 4 at 8): equal
  // TP sizes copy a slot's pieces as one block (the writer merges a block into the one
  // before it), and nothing of the page's last 4 bytes.
  const U src_ptrs{1000, 1008}, dst_ptrs{5000, 5008}, items{8, 4}, lens{72, 68}, strides{16, 16};
  const BufferTable table{src_ptrs, dst_ptrs, items, lens, lens, strides, strides};
  const V src{2}, dst{3};  // a Mamba request's one running state
  StateSlots slots;
  slots.src_slots = std::span<const int64_t>(src);
  slots.dst_slots = std::span<const int64_t>(dst);
  auto blocks = state_blocks(table, slots, {});
  ASSERT_TRUE(blocks.ok()) << blocks.status().to_string();
  EXPECT_EQ(*blocks, (std::vector<Block>{{1032, 5048, 12}}));
  const V past{5};  // slot 5 would end past the buffers
  slots.src_slots = std::span<const int64_t>(past);
  slots.dst_slots = std::span<const int64_t>(past);
  EXPECT_FALSE(state_blocks(table, slots, {}).ok());
}

TEST(GroupKvPages, EqualTp) {
  for (bool strided : {false, true}) run_group_layer(1, PageLayout::kNHD, strided);
}

TEST(GroupKvPages, HeadSlicedTp1To2Nhd) {
  for (bool strided : {false, true}) run_group_layer(2, PageLayout::kNHD, strided);
}

TEST(GroupKvPages, HeadSlicedTp1To2Hnd) {
  for (bool strided : {false, true}) run_group_layer(2, PageLayout::kHND, strided);
}

// A decode page stride below the prefill's page: fine, fragments step by each side's own.
TEST(GroupKvPages, HeadSlicedTp1To4Strided) {
  run_group_layer(4, PageLayout::kNHD, true);
  run_group_layer(4, PageLayout::kHND, true);
}

TEST(StridedPages, DefaultBlocksStepByTheStride) {
  // FlashInfer-shaped: K at base, V at base + 16, pages 32 bytes apart.
  const U src_ptrs{1000, 1016}, dst_ptrs{5000, 5016}, items{16, 16};
  const U lens{32 * 4 - 16, 32 * 4 - 16}, strides{32, 32};
  const BufferTable table{src_ptrs, dst_ptrs, items, lens, lens, strides, strides};
  const std::vector<std::vector<int64_t>> layers{{0, 1}};
  auto blocks = kv_blocks(table, layers, V{1, 2}, V{0, 3}, 0, 1, {});
  ASSERT_TRUE(blocks.ok()) << blocks.status().to_string();
  EXPECT_EQ(*blocks, (std::vector<Block>{
                         {1032, 5000, 16}, {1064, 5096, 16}, {1048, 5016, 16}, {1080, 5112, 16}}));
}

TEST(StridedPages, OutOfBoundsRefused) {
  const U ptrs{1000, 1016}, items{16, 16}, strides{32, 32};
  const U lens{32 * 4 - 16, 32 * 4 - 16};
  const std::vector<std::vector<int64_t>> layers{{0, 1}};
  // Page 4 of a 4-page strided buffer.
  const BufferTable table{ptrs, ptrs, items, lens, lens, strides, strides};
  EXPECT_EQ(kv_blocks(table, layers, V{4}, V{0}, 0, 1, {}).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(kv_blocks(table, layers, V{0}, V{4}, 0, 1, {}).status().code(),
            StatusCode::kOutOfRange);
  // A length one byte short of the last page's end.
  const U short_lens{32 * 3 + 15, 32 * 4 - 16};
  const BufferTable short_table{ptrs, ptrs, items, short_lens, short_lens, strides, strides};
  EXPECT_EQ(kv_blocks(short_table, layers, V{3}, V{0}, 0, 1, {}).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_TRUE(kv_blocks(short_table, layers, V{2}, V{0}, 0, 1, {}).ok());
  // A stride below the item is refused before any block.
  const U small{8, 32};
  const BufferTable bad{ptrs, ptrs, items, lens, lens, small, strides};
  EXPECT_EQ(kv_blocks(bad, layers, V{0}, V{0}, 0, 1, {}).status().code(),
            StatusCode::kInvalidArgument);
  // A fragment stepping by the stride stays checked too (head-sliced strided pages).
  Fragment f;
  f.kind = BufferKind::kTargetK;
  f.buffer_index = 0;
  f.src_page_stride_bytes = 32;
  f.dst_page_stride_bytes = 32;
  f.bytes_per_page = 8;
  f.src_byte_offset = 8;
  const std::vector<Fragment> frags{f};
  EXPECT_EQ(kv_blocks(table, layers, V{4}, V{0}, 0, 1, frags).status().code(),
            StatusCode::kOutOfRange);
}

TEST(StridedPages, PlannerRefusesStrideBelowThePage) {
  Side s = make_side(kH, false, 0);
  SideLayout pre = layout_of(1, PageLayout::kNHD, s);
  SideLayout dec = pre;
  dec.kv_page_strides = {s.item - 1, 0};
  EXPECT_EQ(plan_fragments(pre, dec, 0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdkv::plan
