#include "plan/blocks.h"

#include <gtest/gtest.h>

#include <functional>

#include "plan/test_fragments.h"

namespace pdkv::plan {
namespace {

using U = std::vector<uint64_t>;
using V = std::vector<int64_t>;
using Layers = std::vector<std::vector<int64_t>>;
using testing::frag;

struct KvFixture {
  U src_ptrs = {1000, 2000};
  U dst_ptrs = {5000, 6000};
  U items = {10, 10};
  U src_lens, dst_lens;
  Layers layers = {{0, 1}};
  Result<std::vector<Block>> run(const V& src, const V& dst, int64_t b, int64_t e,
                                 const std::vector<Fragment>& f = {}) {
    BufferTable t{src_ptrs, dst_ptrs, items, src_lens, dst_lens};
    return kv_blocks(t, layers, src, dst, b, e, f);
  }
};

TEST(KvBlocks, DefaultBlocksPerRunAndBuffer) {
  KvFixture k;
  auto r = k.run({0, 1, 2, 5}, {3, 4, 5, 9}, 0, 1);
  ASSERT_TRUE(r.ok());
  const std::vector<Block> want = {
      {1000, 5030, 30}, {1050, 5090, 10}, {2000, 6030, 30}, {2050, 6090, 10}};
  EXPECT_EQ(*r, want);
}

TEST(KvBlocks, AdjacentBuffersMergeLikeTheReferenceAfterMerging) {
  KvFixture k;
  k.src_ptrs = {0, 100};
  k.dst_ptrs = {1000, 1100};
  auto r = k.run({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, 1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<Block>{{0, 1000, 200}}));
}

TEST(KvBlocks, FragmentsPerPageWithCapAndMerge) {
  KvFixture k;
  // Buffer 0: half pages (not contiguous), buffer 1: whole pages (merge), cap 2 per run.
  std::vector<Fragment> f = {frag(0, 10, 5, 5, 0, 5), frag(1, 10, 10, 0, 0, 10, 2)};
  auto r = k.run({0, 1, 2, 7}, {4, 5, 6, 0}, 0, 1, f);
  ASSERT_TRUE(r.ok());
  const std::vector<Block> want = {{1005, 5020, 5}, {1015, 5025, 5},  {1025, 5030, 5},
                                   {1075, 5000, 5}, {2000, 6040, 20}, {2070, 6000, 10}};
  EXPECT_EQ(*r, want);
}

TEST(KvBlocks, StateOnlyFragmentsSkipKv) {
  KvFixture k;
  auto r = k.run({0}, {0}, 0, 1, {frag(0, 1, 1, 0, 0, 1, std::nullopt, BufferKind::kState)});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
}

TEST(KvBlocks, ReversedRangeIsEmpty) {
  KvFixture k;
  auto r = k.run({0}, {0}, 1, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
}

TEST(KvBlocks, BoundsAreCheckedWhenLengthsGiven) {
  KvFixture k;
  k.src_lens = {30, 30};
  k.dst_lens = {100, 100};
  EXPECT_TRUE(k.run({0, 1, 2}, {0, 1, 2}, 0, 1).ok());
  auto r = k.run({1, 2, 3}, {0, 1, 2}, 0, 1);
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  r = k.run({0}, {0}, 0, 1, {frag(0, 10, 10, 25, 0, 6)});
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  r = k.run({0}, {9}, 0, 1, {frag(0, 10, 10, 0, 95, 6)});
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
}

TEST(KvBlocks, InvalidInputsAreErrors) {
  struct Case {
    const char* name;
    std::function<void(KvFixture&)> change;
    V src, dst;
    int64_t b, e;
    std::vector<Fragment> frags;
  };
  const std::vector<Case> cases = {
      {"length mismatch", [](KvFixture&) {}, {0, 1}, {0}, 0, 1, {}},
      {"negative src page", [](KvFixture&) {}, {-1}, {0}, 0, 1, {}},
      {"negative dst page", [](KvFixture&) {}, {0}, {-1}, 0, 1, {}},
      {"end past layers", [](KvFixture&) {}, {0}, {0}, 0, 2, {}},
      {"negative begin", [](KvFixture&) {}, {0}, {0}, -1, 1, {}},
      {"buffer out of range",
       [](KvFixture& k) {
         k.layers = {{0, 2}};
       },
       {0},
       {0},
       0,
       1,
       {}},
      {"dst count", [](KvFixture& k) { k.dst_ptrs = {1}; }, {0}, {0}, 0, 1, {}},
      {"item count", [](KvFixture& k) { k.items = {1}; }, {0}, {0}, 0, 1, {}},
      {"lens count", [](KvFixture& k) { k.src_lens = {1}; }, {0}, {0}, 0, 1, {}},
      {"address overflow",
       [](KvFixture& k) {
         k.src_ptrs = {~uint64_t{0} - 5, 0};
       },
       {0},
       {0},
       0,
       1,
       {}},
      {"offset overflow", [](KvFixture&) {}, {int64_t{1} << 62}, {0}, 0, 1, {}},
      {"fragment buffer out of range", [](KvFixture&) {}, {0}, {0}, 0, 1, {frag(7, 1, 1, 0, 0, 1)}},
      {"fragment offset overflow",
       [](KvFixture&) {},
       {3},
       {0},
       0,
       1,
       {frag(0, ~uint64_t{0} / 2, 1, 0, 0, 1)}},
  };
  for (const auto& c : cases) {
    KvFixture k;
    c.change(k);
    auto r = k.run(c.src, c.dst, c.b, c.e, c.frags);
    EXPECT_FALSE(r.ok()) << c.name;
  }
}

TEST(KvBlocks, ReservesOnce) {
  KvFixture k;
  V src(1000), dst(1000);
  for (int i = 0; i < 1000; ++i) {
    src[i] = i;
    dst[i] = (i * 7919) % 1000;
  }
  auto r = k.run(src, dst, 0, 1, {frag(0, 10, 10, 0, 0, 5), frag(1, 10, 10, 5, 5, 5)});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 2000u);
  EXPECT_EQ(r->capacity(), 2000u);
}

}  // namespace
}  // namespace pdkv::plan

namespace pdkv::plan {
namespace {

TEST(KvBlockPlan, WritesIntoCallerMemory) {
  U src_ptrs = {0, 1000}, dst_ptrs = {5000, 6000}, items = {10, 10};
  Layers layers = {{0, 1}};
  V src = {0, 1, 5}, dst = {3, 4, 0};
  BufferTable t{src_ptrs, dst_ptrs, items, {}, {}};
  auto plan = KvBlockPlan::prepare(t, layers, src, dst, 0, 1, {});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->max_blocks(), 4u);
  std::vector<Block> out(4);
  auto n = plan->write(std::span<Block>(out).first(3));
  EXPECT_FALSE(n.ok());
  n = plan->write(out);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 4u);
  EXPECT_EQ(out[0], (Block{0, 5030, 20}));
  EXPECT_EQ(out[3], (Block{1050, 6000, 10}));
}

TEST(KvBlocks, ZeroItemLengthBlocksMergeLikeTheReference) {
  U src_ptrs = {0}, dst_ptrs = {0}, items = {0};
  Layers layers = {{0}};
  V src = {0, 5}, dst = {0, 9};
  BufferTable t{src_ptrs, dst_ptrs, items, {}, {}};
  auto r = kv_blocks(t, layers, src, dst, 0, 1, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<Block>{{0, 0, 0}}));
}

}  // namespace
}  // namespace pdkv::plan
