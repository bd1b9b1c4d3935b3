#include "kv/page_ownership.h"

#include <gtest/gtest.h>

#include <limits>

namespace pdkv::kv {
namespace {

using Mask = std::vector<uint8_t>;
using Ints = std::vector<int64_t>;

TEST(PageOwnershipTest, CapacityIsTheSmallestBuffer) {
  KvArgs a;
  EXPECT_EQ(kv_page_capacity(a), std::numeric_limits<int64_t>::max());
  a.kv_data_lens = {256 * 10, 512 * 4};
  a.kv_item_lens = {256, 512};
  EXPECT_EQ(kv_page_capacity(a), 4);
}

TEST(PageOwnershipTest, ChunkOwnershipAcceptsOneLocalPagePerOwnedPage) {
  EXPECT_TRUE(check_chunk_ownership(Mask{1, 0, 1}, Ints{7, 3}, 3, 8).ok());
  EXPECT_TRUE(check_chunk_ownership(Mask{}, Ints{}, 0, 8).ok());
  EXPECT_TRUE(check_chunk_ownership(Mask{0, 0}, Ints{}, 2, 8).ok());
}

TEST(PageOwnershipTest, ChunkMaskMustCoverTheChunk) {
  Status s = check_chunk_ownership(Mask{1, 1}, Ints{1, 2}, 3, 8);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("one entry per page of the chunk"), std::string::npos);
}

TEST(PageOwnershipTest, ChunkLocalIndicesMustMatchTheOwnedCount) {
  EXPECT_EQ(check_chunk_ownership(Mask{1, 0, 1}, Ints{1}, 3, 8).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(check_chunk_ownership(Mask{1, 0, 1}, Ints{1, 2, 3}, 3, 8).code(),
            StatusCode::kInvalidArgument);
}

TEST(PageOwnershipTest, ChunkLocalIndicesMustBeInsideTheBuffers) {
  EXPECT_EQ(check_chunk_ownership(Mask{1}, Ints{8}, 1, 8).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(check_chunk_ownership(Mask{1}, Ints{-1}, 1, 8).code(), StatusCode::kOutOfRange);
}

TEST(PageOwnershipTest, CumsumMappingKeepsTheLocalOrder) {
  auto r = mask_ordered_local_indices(Mask{1, 0, 1, 1}, Ints{0, 0, 1, 2}, Ints{5, 6, 7}, 4, 8);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, (Ints{5, 6, 7}));
}

TEST(PageOwnershipTest, PermutedMappingIsAppliedAndUnownedEntriesIgnored) {
  auto r = mask_ordered_local_indices(Mask{1, 0, 1, 1}, Ints{2, -9, 0, 1}, Ints{5, 6, 7}, 4, 8);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, (Ints{7, 5, 6}));
}

TEST(PageOwnershipTest, RequestOwnershipRejectsBadShapes) {
  // mask shorter than the request, mapping shorter, too few / too many local pages
  EXPECT_EQ(mask_ordered_local_indices(Mask{1}, Ints{0}, Ints{5}, 2, 8).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(mask_ordered_local_indices(Mask{1, 1}, Ints{0}, Ints{5, 6}, 2, 8).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(mask_ordered_local_indices(Mask{1, 1}, Ints{0, 1}, Ints{5}, 2, 8).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(mask_ordered_local_indices(Mask{1, 0}, Ints{0, 0}, Ints{5, 6}, 2, 8).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(PageOwnershipTest, RequestOwnershipRejectsBadIndices) {
  // mapping outside the local list, two pages on one local entry, a page outside the buffers
  EXPECT_EQ(mask_ordered_local_indices(Mask{1, 1}, Ints{0, 2}, Ints{5, 6}, 2, 8).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(mask_ordered_local_indices(Mask{1, 1}, Ints{1, 1}, Ints{5, 6}, 2, 8).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(mask_ordered_local_indices(Mask{1, 1}, Ints{0, 1}, Ints{5, 8}, 2, 8).status().code(),
            StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace pdkv::kv
