#include "engine/write_grant.h"

#include <gtest/gtest.h>

#include <vector>

namespace pdkv::engine {
namespace {

// Two buffers of 4 items of 0x100 bytes (a KV pool of two layers); items 1, 2 and 3.
WriteGrant two_layer_grant() {
  auto buffers = std::make_shared<const std::vector<ItemBuffer>>(
      std::vector<ItemBuffer>{{0x9000, 0x400, 0x100}, {0x1000, 0x400, 0x100}});
  WriteGrant g;
  g.sets.push_back(ItemSet{buffers, {3, 1, 2, 2}});
  return g;
}

TEST(WriteGrant, NormalizeSortsItemsAndBuffersAndRejectsBadShapes) {
  WriteGrant g = two_layer_grant();
  ASSERT_TRUE(normalize_grant(g).ok());
  EXPECT_EQ(g.sets[0].items, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ((*g.sets[0].buffers)[0].base, 0x1000u);

  WriteGrant outside = two_layer_grant();
  outside.sets[0].items.push_back(4);  // a 0x400 buffer has items 0..3
  EXPECT_EQ(normalize_grant(outside).code(), StatusCode::kInvalidArgument);

  WriteGrant overlap;
  overlap.sets.push_back(
      ItemSet{std::make_shared<const std::vector<ItemBuffer>>(
                  std::vector<ItemBuffer>{{0x1000, 0x400, 0x100}, {0x1200, 0x400, 0x100}}),
              {0}});
  EXPECT_EQ(normalize_grant(overlap).code(), StatusCode::kInvalidArgument);

  WriteGrant zero;
  zero.sets.push_back(ItemSet{
      std::make_shared<const std::vector<ItemBuffer>>(std::vector<ItemBuffer>{{0x1000, 0x400, 0}}),
      {0}});
  EXPECT_EQ(normalize_grant(zero).code(), StatusCode::kInvalidArgument);

  WriteGrant wraps;
  wraps.sets.push_back(ItemSet{std::make_shared<const std::vector<ItemBuffer>>(
                                   std::vector<ItemBuffer>{{UINT64_MAX - 10, 0x400, 0x100}}),
                               {0}});
  EXPECT_EQ(normalize_grant(wraps).code(), StatusCode::kInvalidArgument);
}

TEST(WriteGrant, CoversGrantedItemsOfEveryBufferAndNothingElse) {
  WriteGrant g = two_layer_grant();
  ASSERT_TRUE(normalize_grant(g).ok());
  uint64_t bad = 0;
  // Item 1 of both buffers, and a range over consecutive items 1..3.
  EXPECT_TRUE(grant_covers(g, 0x1100, 0x100, &bad));
  EXPECT_TRUE(grant_covers(g, 0x9100, 0x100, &bad));
  EXPECT_TRUE(grant_covers(g, 0x1180, 0x280, &bad));
  EXPECT_TRUE(grant_covers(g, 0x1000, 0, &bad));  // empty
  // Item 0 is not granted: the first refused byte is named.
  EXPECT_FALSE(grant_covers(g, 0x10f0, 0x20, &bad));
  EXPECT_EQ(bad, 0x10f0u);
  // Past the buffer's end (item 3 is its last).
  EXPECT_FALSE(grant_covers(g, 0x1380, 0x100, &bad));
  EXPECT_EQ(bad, 0x1400u);
  // Between the buffers, and wrapping around.
  EXPECT_FALSE(grant_covers(g, 0x5000, 1, &bad));
  EXPECT_FALSE(grant_covers(g, UINT64_MAX - 4, 16, &bad));
}

TEST(WriteGrant, AnItemAfterAGapIsNotReachedFromTheItemBefore) {
  auto buffers = std::make_shared<const std::vector<ItemBuffer>>(
      std::vector<ItemBuffer>{{0x1000, 0x1000, 0x100}});
  WriteGrant g;
  g.sets.push_back(ItemSet{buffers, {2, 4}});
  ASSERT_TRUE(normalize_grant(g).ok());
  uint64_t bad = 0;
  EXPECT_TRUE(grant_covers(g, 0x1200, 0x100, &bad));
  EXPECT_TRUE(grant_covers(g, 0x1400, 0x100, &bad));
  EXPECT_FALSE(grant_covers(g, 0x1200, 0x300, &bad));
  EXPECT_EQ(bad, 0x1300u);
}

TEST(WriteGrant, OfRangeAndForEachGrantedRange) {
  WriteGrant g = WriteGrant::of_range(0x4000, 0x123);
  ASSERT_TRUE(normalize_grant(g).ok());
  uint64_t bad = 0;
  EXPECT_TRUE(grant_covers(g, 0x4000, 0x123, &bad));
  EXPECT_FALSE(grant_covers(g, 0x4000, 0x124, &bad));
  WriteGrant two = two_layer_grant();
  ASSERT_TRUE(normalize_grant(two).ok());
  uint64_t bytes = 0;
  int ranges = 0;
  for_each_granted_range(two, [&](uint64_t, uint64_t len) {
    bytes += len;
    ++ranges;
  });
  EXPECT_EQ(ranges, 6);
  EXPECT_EQ(bytes, 6u * 0x100);
}

}  // namespace
}  // namespace pdkv::engine
