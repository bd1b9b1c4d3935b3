#include "kv/room/room_status_board.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace pdkv::kv {
namespace {

using std::chrono::milliseconds;

TEST(RoomStatusBoardTest, UnknownRoomIsNotRecreatedByLateMessages) {
  RoomStatusBoard board;
  EXPECT_FALSE(board.advance(7, RoomState::kSuccess).has_value());
  EXPECT_FALSE(board.fail(7, FailureCause::kInternal, "late failure"));
  EXPECT_EQ(board.size(), 0u);
}

TEST(RoomStatusBoardTest, AdvanceFollowsMergeRule) {
  RoomStatusBoard board;
  board.open(1, now() + milliseconds(10000), FailureCause::kBootstrapTimeout, "bootstrap timeout");
  EXPECT_EQ(*board.advance(1, RoomState::kWaitingForInput), RoomState::kWaitingForInput);
  EXPECT_EQ(*board.advance(1, RoomState::kBootstrapping), RoomState::kWaitingForInput);
  EXPECT_EQ(*board.advance(1, RoomState::kSuccess), RoomState::kSuccess);
  EXPECT_TRUE(board.fail(1, FailureCause::kInternal, "too late"));
  EXPECT_EQ(board.get(1)->state, RoomState::kSuccess);
}

TEST(RoomStatusBoardTest, StateFollowsTheRoomAndForgetsItOnErase) {
  RoomStatusBoard board;
  EXPECT_FALSE(board.state(5).has_value());
  board.open(5, now() + milliseconds(10000), FailureCause::kBootstrapTimeout, "x");
  EXPECT_EQ(board.state(5), RoomState::kBootstrapping);
  board.advance(5, RoomState::kTransferring);
  EXPECT_EQ(board.state(5), RoomState::kTransferring);
  board.fail(5, FailureCause::kPeerDead, "peer died");
  EXPECT_EQ(board.state(5), RoomState::kFailed);
  board.erase(5);
  EXPECT_FALSE(board.state(5).has_value());
}

TEST(RoomStatusBoardTest, FirstFailureReasonIsKept) {
  RoomStatusBoard board;
  board.open(2, now() + milliseconds(10000), FailureCause::kBootstrapTimeout, "x");
  board.fail(2, FailureCause::kPeerDead, "peer 10.0.0.1:5 died");
  board.fail(2, FailureCause::kLinkLost, "status send failed");
  EXPECT_EQ(board.get(2)->failure_reason, "peer 10.0.0.1:5 died");
  EXPECT_EQ(board.get(2)->failure_cause, FailureCause::kPeerDead);
  EXPECT_EQ(*board.advance(2, RoomState::kSuccess), RoomState::kFailed);
}

TEST(RoomStatusBoardTest, ExpireOverdueFailsWithDeadlineReason) {
  RoomStatusBoard board;
  TimePoint t0 = now();
  board.open(3, t0 + milliseconds(100), FailureCause::kBootstrapTimeout,
             "bootstrap timeout after 0.1 s");
  board.open(4, t0 + milliseconds(500), FailureCause::kBootstrapTimeout, "other");
  EXPECT_TRUE(board.expire_overdue(t0 + milliseconds(50)).empty());
  auto expired = board.expire_overdue(t0 + milliseconds(200));
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0], 3u);
  EXPECT_EQ(board.get(3)->state, RoomState::kFailed);
  EXPECT_EQ(board.get(3)->failure_reason, "bootstrap timeout after 0.1 s");
  EXPECT_EQ(board.get(3)->failure_cause, FailureCause::kBootstrapTimeout);
  EXPECT_EQ(board.get(3)->failure_stage, FailureStage::kBootstrap);
  EXPECT_EQ(board.get(4)->state, RoomState::kBootstrapping);
  EXPECT_EQ(*board.next_deadline(), t0 + milliseconds(500));
}

TEST(RoomStatusBoardTest, TerminalRoomsLoseTheirDeadline) {
  RoomStatusBoard board;
  TimePoint t0 = now();
  board.open(5, t0 + milliseconds(100), FailureCause::kBootstrapTimeout, "timeout");
  board.advance(5, RoomState::kSuccess);
  EXPECT_TRUE(board.expire_overdue(t0 + milliseconds(1000)).empty());
  EXPECT_FALSE(board.next_deadline().has_value());
  board.set_deadline(5, t0, FailureCause::kWaitingTimeout, "ignored for a terminal room");
  EXPECT_FALSE(board.next_deadline().has_value());
}

TEST(RoomStatusBoardTest, SetDeadlineReplacesTheArmedOne) {
  RoomStatusBoard board;
  TimePoint t0 = now();
  board.open(6, t0 + milliseconds(100), FailureCause::kBootstrapTimeout, "bootstrap timeout");
  board.set_deadline(6, t0 + milliseconds(900), FailureCause::kWaitingTimeout, "waiting timeout");
  EXPECT_TRUE(board.expire_overdue(t0 + milliseconds(200)).empty());
  ASSERT_EQ(board.expire_overdue(t0 + milliseconds(1000)).size(), 1u);
  EXPECT_EQ(board.get(6)->failure_reason, "waiting timeout");
  EXPECT_EQ(board.get(6)->failure_cause, FailureCause::kWaitingTimeout);
}

TEST(RoomStatusBoardTest, FailureStageIsTheStateTheRoomFailedIn) {
  RoomStatusBoard board;
  board.open(11, now() + milliseconds(60000), FailureCause::kBootstrapTimeout, "t");
  board.advance(11, RoomState::kTransferring);
  board.fail(11, FailureCause::kLinkLost, "connection reset");
  EXPECT_EQ(board.get(11)->failure_stage, FailureStage::kTransfer);
  board.open(12, now() + milliseconds(60000), FailureCause::kBootstrapTimeout, "t");
  board.advance(12, RoomState::kTransferring);
  board.fail(12, FailureCause::kMetadataTimeout, "no first token", FailureStage::kCompletion);
  EXPECT_EQ(board.get(12)->failure_stage, FailureStage::kCompletion);
  EXPECT_EQ(board.get(12)->failure_cause, FailureCause::kMetadataTimeout);
}

TEST(RoomStatusBoardTest, WaitForChangeWakesOnAdvanceAndTimesOut) {
  RoomStatusBoard board;
  board.open(8, now() + milliseconds(60000), FailureCause::kBootstrapTimeout, "t");
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(20));
    board.advance(8, RoomState::kSuccess);
  });
  auto status = board.wait_for_change(8, RoomState::kBootstrapping, now() + milliseconds(10000));
  t.join();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->state, RoomState::kSuccess);

  TimePoint before = now();
  status = board.wait_for_change(8, RoomState::kSuccess, now() + milliseconds(50));
  EXPECT_GE(now() - before, milliseconds(45));
  EXPECT_EQ(status->state, RoomState::kSuccess);
}

TEST(RoomStatusBoardTest, HandleKeepsFinalStateAfterErase) {
  RoomStatusBoard board;
  auto handle = board.open(10, now() + milliseconds(60000), FailureCause::kBootstrapTimeout, "t");
  EXPECT_EQ(handle->status().state, RoomState::kBootstrapping);
  EXPECT_EQ(board.open(10, now() + milliseconds(60000), FailureCause::kBootstrapTimeout, "t"),
            handle);
  board.fail(10, FailureCause::kAbortedByPeer, "decode aborted");
  board.erase(10);
  EXPECT_EQ(handle->status().state, RoomState::kFailed);
  EXPECT_EQ(handle->status().failure_reason, "decode aborted");
}

TEST(RoomStatusBoardTest, EraseRemovesAndWakesWaiters) {
  RoomStatusBoard board;
  board.open(9, now() + milliseconds(60000), FailureCause::kBootstrapTimeout, "t");
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(20));
    board.erase(9);
  });
  auto status = board.wait_for_change(9, RoomState::kBootstrapping, now() + milliseconds(10000));
  t.join();
  EXPECT_FALSE(status.has_value());
  EXPECT_EQ(board.size(), 0u);
}

// A KVSender's / KVReceiver's wait(): wakes when the room ends, not on a timer, and not
// while fencing holds the end back (the engine would reuse the pages too early).
TEST(RoomStatusBoardTest, HandleWaitWakesWhenTheEndIsShownAndNotBefore) {
  RoomStatusBoard board;
  auto handle = board.open(11, now() + milliseconds(60000), FailureCause::kBootstrapTimeout, "t");
  TimePoint before = now();
  EXPECT_EQ(handle->wait_terminal(now() + milliseconds(50)).state, RoomState::kBootstrapping);
  EXPECT_GE(now() - before, milliseconds(45));

  board.advance(11, RoomState::kWaitingForInput);  // not an end: the waiter sleeps on
  board.handle(11)->hold_terminal();
  std::atomic<bool> success_set{false}, released{false};
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(20));
    board.advance(11, RoomState::kSuccess);
    success_set = true;
    std::this_thread::sleep_for(milliseconds(50));
    released = true;
    board.handle(11)->release_terminal();
  });
  const RoomStatus seen = handle->wait_terminal(now() + milliseconds(10000));
  const bool was_released = released.load();
  t.join();
  EXPECT_EQ(seen.state, RoomState::kSuccess);
  EXPECT_TRUE(success_set.load());
  EXPECT_TRUE(was_released) << "woke while the end was held";
  // Already ended: returns at once.
  before = now();
  EXPECT_EQ(handle->wait_terminal(now() + milliseconds(10000)).state, RoomState::kSuccess);
  EXPECT_LT(now() - before, milliseconds(1000));
}

}  // namespace
}  // namespace pdkv::kv
