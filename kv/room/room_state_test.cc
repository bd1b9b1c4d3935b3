#include "kv/room/room_state.h"

#include <gtest/gtest.h>

namespace pdkv::kv {
namespace {

constexpr RoomState kAll[] = {RoomState::kFailed, RoomState::kBootstrapping,
                              RoomState::kWaitingForInput, RoomState::kTransferring,
                              RoomState::kSuccess};

TEST(RoomStateTest, ValuesMatchKVPoll) {
  EXPECT_EQ(static_cast<int>(RoomState::kFailed), 0);
  EXPECT_EQ(static_cast<int>(RoomState::kBootstrapping), 1);
  EXPECT_EQ(static_cast<int>(RoomState::kWaitingForInput), 2);
  EXPECT_EQ(static_cast<int>(RoomState::kTransferring), 3);
  EXPECT_EQ(static_cast<int>(RoomState::kSuccess), 4);
}

TEST(RoomStateTest, FailedIsStickyAndWins) {
  for (RoomState s : kAll) {
    EXPECT_EQ(merge_room_state(RoomState::kFailed, s), RoomState::kFailed);
    EXPECT_EQ(merge_room_state(s, RoomState::kFailed), RoomState::kFailed);
  }
}

TEST(RoomStateTest, NeverGoesBackwards) {
  for (RoomState a : kAll) {
    for (RoomState b : kAll) {
      if (a == RoomState::kFailed || b == RoomState::kFailed) continue;
      EXPECT_GE(merge_room_state(a, b), a);
    }
  }
}

TEST(RoomStateTest, SuccessIsTerminal) {
  EXPECT_EQ(merge_room_state(RoomState::kSuccess, RoomState::kBootstrapping), RoomState::kSuccess);
  EXPECT_TRUE(is_terminal(RoomState::kSuccess));
  EXPECT_TRUE(is_terminal(RoomState::kFailed));
  EXPECT_FALSE(is_terminal(RoomState::kTransferring));
}

TEST(RoomStateTest, Names) {
  EXPECT_EQ(room_state_name(RoomState::kWaitingForInput), "WaitingForInput");
}

}  // namespace
}  // namespace pdkv::kv
