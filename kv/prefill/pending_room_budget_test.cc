#include "kv/prefill/pending_room_budget.h"

#include <gtest/gtest.h>

namespace pdkv::kv {
namespace {

bool names(const Status& s, const std::string& setting) {
  return !s.ok() && s.message().find(setting) != std::string::npos;
}

TEST(PendingRoomBudgetTest, OneDecodeCannotTakeTheRoomsOfAll) {
  PendingRoomBudget b(PendingRoomLimits{4, 2, 1 << 20});
  EXPECT_TRUE(b.charge(1, "a", 100).ok());
  EXPECT_TRUE(b.charge(2, "a", 100).ok());
  EXPECT_TRUE(names(b.charge(3, "a", 100), "PDKV_MAX_PENDING_ROOMS_PER_DECODE"));
  EXPECT_EQ(b.rooms_of("a"), 2u);
  EXPECT_EQ(b.bytes_of("a"), 200u);  // the refused charge changed nothing
  EXPECT_TRUE(b.charge(3, "b", 100).ok());
  EXPECT_TRUE(b.charge(4, "b", 100).ok());
  EXPECT_TRUE(names(b.charge(5, "c", 100), "PDKV_MAX_PENDING_ROOMS)"));
  EXPECT_EQ(b.rooms_of("c"), 0u);
  b.release(1);
  EXPECT_EQ(b.rooms_of("a"), 1u);
  EXPECT_TRUE(b.charge(5, "c", 100).ok());
  EXPECT_EQ(b.rooms(), 4u);
}

TEST(PendingRoomBudgetTest, BytesAreChargedPerDecodeAndAResendReplacesItsCharge) {
  PendingRoomBudget b(PendingRoomLimits{100, 100, 1000});
  EXPECT_TRUE(b.charge(1, "a", 600).ok());
  EXPECT_TRUE(b.charge(1, "a", 700).ok());  // the same room again: 700, not 1300
  EXPECT_EQ(b.bytes_of("a"), 700u);
  EXPECT_TRUE(names(b.charge(2, "a", 301), "PDKV_MAX_PENDING_BYTES_PER_DECODE"));
  EXPECT_EQ(b.rooms(), 1u);  // the refused room was not counted
  // A second decode rank of the same room is charged its own bytes, not a room.
  EXPECT_TRUE(b.charge(1, "b", 900).ok());
  EXPECT_EQ(b.rooms_of("b"), 0u);
  EXPECT_EQ(b.bytes_of("b"), 900u);
  b.release(1);
  EXPECT_EQ(b.bytes_of("a"), 0u);
  EXPECT_EQ(b.bytes_of("b"), 0u);
  EXPECT_EQ(b.rooms(), 0u);
  b.release(1);  // unknown now: ignored
  EXPECT_TRUE(b.charge(2, "a", 1000).ok());
}

TEST(PendingRoomBudgetTest, CostGrowsWithTheListsAPreAllocationCarries) {
  proto::PreAllocation small, big;
  small.dst_kv_pages = {1};
  big.dst_kv_pages.assign(1000, 1);
  big.fragments.resize(10);
  EXPECT_GT(pre_allocation_cost(big), pre_allocation_cost(small) + 8000);
}

}  // namespace
}  // namespace pdkv::kv
