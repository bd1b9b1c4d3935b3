// RoomGrant: which bytes of this rank a room's prefill ranks may write, for buffers shared
// between KV cache groups (vLLM's hybrid allocator lays one layer of each group over one
// allocation) and for a state group's slots.
#include "kv/decode/room_grant.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

namespace pdkv::kv {
namespace {

// Every (address, length) the grant opens.
std::set<std::pair<uint64_t, uint64_t>> opened(const engine::WriteGrant& grant) {
  std::set<std::pair<uint64_t, uint64_t>> out;
  for (const engine::ItemSet& set : grant.sets) {
    for (const engine::ItemBuffer& b : *set.buffers) {
      for (uint64_t item : set.items) out.insert({b.base + item * b.item_bytes, b.item_bytes});
    }
  }
  return out;
}

// One K and one V buffer of 8 pages of 64 bytes, read by a chunked layer and by a layer of
// state group 0 (the same memory, each group's own pages); one state buffer in group 1.
KvArgs shared_buffers() {
  KvArgs a;
  a.kv_data_ptrs = {0x10000, 0x20000};
  a.kv_data_lens = {512, 512};
  a.kv_item_lens = {64, 64};
  a.layer_buffers = {{0, 1}, {0, 1}};
  a.kv_layer_groups = {-1, 0};
  a.state_data_ptrs = {0x30000};
  a.state_data_lens = {4 * 128};
  a.state_item_lens = {128};
  a.state_buffer_groups = {1};
  return a;
}

TEST(RoomGrant, ABufferSharedByTwoGroupsOpensEachGroupsPagesOnly) {
  const KvArgs args = shared_buffers();
  ASSERT_TRUE(args.validate().ok()) << args.validate().message();
  const RankGrantBuffers buffers(args);
  const std::vector<int64_t> pages = {2, 5};
  const std::vector<int64_t> slots = {7, -1, 3};  // group 0: pages 7 and 3 (-1 skipped)
  const std::vector<int64_t> state_slot = {1};
  std::vector<int64_t> lists = slots;
  lists.insert(lists.end(), state_slot.begin(), state_slot.end());
  const std::vector<uint32_t> ends = {3, 4};
  RoomWrites writes;
  writes.kv_pages = pages;
  writes.state = StateSlotLists{lists, ends};
  const auto got = opened(grant_for_room(buffers, writes));
  std::set<std::pair<uint64_t, uint64_t>> want;
  for (uint64_t base : {0x10000u, 0x20000u}) {
    for (uint64_t page : {2u, 5u, 7u, 3u}) want.insert({base + page * 64, 64});
  }
  want.insert({0x30000 + 128, 128});
  EXPECT_EQ(got, want);
}

TEST(RoomGrant, WithoutTheGroupsListOnlyTheChunkedPagesOpen) {
  const RankGrantBuffers buffers(shared_buffers());
  const std::vector<int64_t> pages = {0};
  RoomWrites writes;
  writes.kv_pages = pages;
  const auto got = opened(grant_for_room(buffers, writes));
  EXPECT_EQ(got, (std::set<std::pair<uint64_t, uint64_t>>{{0x10000, 64}, {0x20000, 64}}));
}

}  // namespace
}  // namespace pdkv::kv
