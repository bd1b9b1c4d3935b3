#include "kv/room/room_change_feed.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "kv/room/room_status_board.h"

namespace pdkv::kv {
namespace {

using std::chrono::milliseconds;
using Rooms = std::vector<uint64_t>;

TEST(RoomChangeFeedTest, RecordsNothingUntilTheFirstTakeWhichSaysPollEverything) {
  RoomChangeFeed feed;
  feed.note(1);
  EXPECT_FALSE(feed.take().has_value());  // first call: poll every room
  EXPECT_EQ(feed.take(), Rooms{});        // room 1's change came before the feed started
  feed.note(3);
  feed.note(2);
  feed.note(3);  // once per take, in the order of the first change
  EXPECT_EQ(feed.take(), (Rooms{3, 2}));
  EXPECT_EQ(feed.take(), Rooms{});
}

TEST(RoomChangeFeedTest, MoreChangesThanItKeepsAskForAFullPollThenResume) {
  RoomChangeFeed feed(/*capacity=*/3);
  EXPECT_FALSE(feed.take().has_value());
  for (uint64_t r = 1; r <= 4; ++r) feed.note(r);
  EXPECT_FALSE(feed.take().has_value());  // forgotten: poll every room
  feed.note(9);
  EXPECT_EQ(feed.take(), Rooms{9});
}

TEST(RoomChangeFeedTest, TheBoardNotesEveryVisibleChangeOfARoom) {
  RoomStatusBoard board;
  EXPECT_FALSE(board.changed_rooms().has_value());
  auto h1 = board.open(1, now() + milliseconds(10000), FailureCause::kBootstrapTimeout, "t");
  auto h2 = board.open(2, now() + milliseconds(10000), FailureCause::kBootstrapTimeout, "t");
  EXPECT_EQ(board.changed_rooms(), Rooms{});  // opened in Bootstrapping: nothing to see
  board.advance(2, RoomState::kWaitingForInput);
  board.advance(2, RoomState::kBootstrapping);  // merge keeps WaitingForInput: no change
  board.fail(1, FailureCause::kInternal, "gone");
  EXPECT_EQ(board.changed_rooms(), (Rooms{2, 1}));
  EXPECT_EQ(board.changed_rooms(), Rooms{});
}

TEST(RoomChangeFeedTest, AHeldEndIsNotedWhenItBecomesVisible) {
  RoomStatusBoard board;
  EXPECT_FALSE(board.changed_rooms().has_value());
  board.open(5, now() + milliseconds(10000), FailureCause::kBootstrapTimeout, "t");
  std::shared_ptr<RoomHandle> handle = board.handle(5);
  board.advance(5, RoomState::kTransferring);
  handle->hold_terminal();  // writes still landing: the end is not shown yet
  EXPECT_EQ(board.changed_rooms(), Rooms{5});
  board.advance(5, RoomState::kSuccess);
  EXPECT_EQ(handle->status().state, RoomState::kTransferring);
  EXPECT_EQ(board.changed_rooms(), Rooms{});  // nothing visible changed
  handle->release_terminal();
  EXPECT_EQ(handle->status().state, RoomState::kSuccess);
  EXPECT_EQ(board.changed_rooms(), Rooms{5});
}

TEST(RoomChangeFeedTest, ConcurrentNotesAreNeverLost) {
  RoomChangeFeed feed;
  EXPECT_FALSE(feed.take().has_value());
  constexpr uint64_t kPerThread = 20000;
  std::thread a([&] {
    for (uint64_t r = 0; r < kPerThread; ++r) feed.note(r);
  });
  std::thread b([&] {
    for (uint64_t r = kPerThread; r < 2 * kPerThread; ++r) feed.note(r);
  });
  std::vector<bool> seen(2 * kPerThread, false);
  auto collect = [&] {
    std::optional<Rooms> got = feed.take();
    ASSERT_TRUE(got.has_value());
    for (uint64_t r : *got) seen[r] = true;
  };
  while (std::count(seen.begin(), seen.end(), true) < static_cast<long>(kPerThread)) collect();
  a.join();
  b.join();
  collect();
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), static_cast<long>(2 * kPerThread));
}

}  // namespace
}  // namespace pdkv::kv
