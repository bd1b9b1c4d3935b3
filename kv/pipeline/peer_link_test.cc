#include "kv/pipeline/peer_link.h"

#include <gtest/gtest.h>

namespace pdkv::kv {
namespace {

// A piece of `n` blocks of `len` bytes each, at distinct addresses per room.
WritePiece piece(uint64_t room, size_t n, uint64_t len) {
  auto blocks = std::make_shared<std::vector<engine::WriteBlock>>();
  for (size_t i = 0; i < n; ++i) {
    blocks->push_back(engine::WriteBlock{room << 32 | (i * len), room << 32 | (i * len), len});
  }
  return WritePiece{RoomKey{room, 1}, blocks, 0, n, n * len, nullptr};
}

bool all_alive(const RoomKey&) { return true; }

TEST(PeerLinkTest, RoomsReadyTogetherShareOneBatch) {
  PeerLink link("decode:1");
  link.add(piece(1, 4, 512));
  link.add(piece(2, 4, 512));
  link.add(piece(3, 4, 512));
  auto batch = link.next_batch(1 << 20, 1000, now(), all_alive, nullptr);
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->blocks.size(), 12u);
  EXPECT_EQ(batch->bytes, 12u * 512);
  ASSERT_EQ(batch->segments.size(), 3u);
  EXPECT_EQ(batch->segments[1].key.room, 2u);
  EXPECT_EQ(batch->segments[1].begin, 4u);
  EXPECT_EQ(batch->segments[1].end, 8u);
  EXPECT_FALSE(link.has_work());
  EXPECT_EQ(link.pending_bytes(), 0u);
}

TEST(PeerLinkTest, ABigRoomIsCutIntoSeveralBatchesAndItsBytesAddUp) {
  PeerLink link("decode:1");
  link.add(piece(7, 10, 1000));
  uint64_t total = 0;
  int batches = 0;
  while (auto b = link.next_batch(3000, 1000, now(), all_alive, nullptr)) {
    EXPECT_LE(b->bytes, 3000u);
    ASSERT_EQ(b->segments.size(), 1u);
    EXPECT_EQ(b->segments[0].bytes, b->bytes);
    total += b->bytes;
    ++batches;
  }
  EXPECT_EQ(total, 10'000u);
  EXPECT_EQ(batches, 4);  // 3 + 3 + 3 + 1 blocks
}

TEST(PeerLinkTest, TheBlockCountBoundsABatchAndOneHugeBlockStillGoes) {
  PeerLink link("decode:1");
  link.add(piece(1, 5, 10));
  auto b = link.next_batch(1 << 20, 2, now(), all_alive, nullptr);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->blocks.size(), 2u);
  PeerLink big("decode:2");
  big.add(piece(2, 1, 1 << 30));
  auto h = big.next_batch(4096, 10, now(), all_alive, nullptr);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->bytes, 1u << 30);  // never stuck behind the byte bound
}

TEST(PeerLinkTest, PiecesOfEndedRoomsAreDropped) {
  PeerLink link("decode:1");
  link.add(piece(1, 2, 100));
  link.add(piece(2, 2, 100));
  auto only_two = [](const RoomKey& k) { return k.room == 2; };
  auto b = link.next_batch(1 << 20, 100, now(), only_two, nullptr);
  ASSERT_TRUE(b);
  ASSERT_EQ(b->segments.size(), 1u);
  EXPECT_EQ(b->segments[0].key.room, 2u);
  EXPECT_EQ(b->bytes, 200u);
  EXPECT_EQ(link.pending_bytes(), 0u);
}

TEST(PeerLinkTest, ARequeuedBatchWaitsForItsBackoffThenGoesFirst) {
  PeerLink link("decode:1");
  link.add(piece(1, 1, 100));
  auto first = link.next_batch(1 << 20, 100, now(), all_alive, nullptr);
  ASSERT_TRUE(first);
  const TimePoint t0 = now();
  first->not_before = t0 + std::chrono::milliseconds(50);
  link.requeue(std::move(*first));
  link.add(piece(2, 1, 100));
  std::optional<TimePoint> wake;
  auto early = link.next_batch(1 << 20, 100, t0, all_alive, &wake);
  ASSERT_TRUE(early);  // new work is not held up by a backoff
  EXPECT_EQ(early->segments[0].key.room, 2u);
  ASSERT_TRUE(wake);
  EXPECT_EQ(*wake, t0 + std::chrono::milliseconds(50));
  auto later =
      link.next_batch(1 << 20, 100, t0 + std::chrono::milliseconds(60), all_alive, nullptr);
  ASSERT_TRUE(later);
  EXPECT_EQ(later->segments[0].key.room, 1u);
}

TEST(PeerLinkTest, ARequeuedBatchLosesTheSegmentsOfRoomsThatEnded) {
  PeerLink link("decode:1");
  link.add(piece(1, 2, 100));
  link.add(piece(2, 3, 100));
  auto b = link.next_batch(1 << 20, 100, now(), all_alive, nullptr);
  ASSERT_TRUE(b);
  link.requeue(std::move(*b));
  auto only_two = [](const RoomKey& k) { return k.room == 2; };
  auto again = link.next_batch(1 << 20, 100, now(), only_two, nullptr);
  ASSERT_TRUE(again);
  ASSERT_EQ(again->segments.size(), 1u);
  EXPECT_EQ(again->segments[0].begin, 0u);
  EXPECT_EQ(again->segments[0].end, 3u);
  EXPECT_EQ(again->blocks.size(), 3u);
  EXPECT_EQ(again->bytes, 300u);
}

TEST(PeerLinkTest, TakeAllRoomsNamesEachRoomOnce) {
  PeerLink link("decode:1");
  link.add(piece(1, 2, 100));
  link.add(piece(1, 2, 100));
  link.add(piece(2, 1, 100));
  auto rooms = link.take_all_rooms();
  ASSERT_EQ(rooms.size(), 2u);
  EXPECT_FALSE(link.has_work());
}

}  // namespace
}  // namespace pdkv::kv
