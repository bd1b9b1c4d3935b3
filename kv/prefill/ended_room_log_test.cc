#include "kv/prefill/ended_room_log.h"

#include <gtest/gtest.h>

namespace pdkv::kv {
namespace {

using std::chrono::seconds;

RoomFailure failure(std::string reason) {
  return {FailureCause::kAbortedLocally, FailureStage::kTransfer, std::move(reason)};
}

std::optional<std::string> reason_of(const EndedRoomLog& log, uint64_t room, TimePoint at) {
  auto found = log.find(room, at);
  if (!found) return std::nullopt;
  return found->reason;
}

TEST(EndedRoomLogTest, RemembersTheFirstReasonUntilItExpires) {
  EndedRoomLog log;
  const TimePoint t0 = now();
  log.record(7, failure("aborted by the engine"), t0 + seconds(10));
  log.record(7, failure("a later reason"), t0 + seconds(20));
  EXPECT_EQ(reason_of(log, 7, t0), "aborted by the engine");
  EXPECT_EQ(log.find(7, t0)->cause, FailureCause::kAbortedLocally);
  EXPECT_EQ(log.find(7, t0)->stage, FailureStage::kTransfer);
  EXPECT_EQ(reason_of(log, 8, t0), std::nullopt);
  EXPECT_EQ(reason_of(log, 7, t0 + seconds(10)), std::nullopt);
  log.purge(t0 + seconds(11));
  EXPECT_EQ(log.size(), 0u);
}

TEST(EndedRoomLogTest, KeepsAtMostCapacityEntriesDroppingTheOldest) {
  EndedRoomLog log(3);
  const TimePoint t0 = now();
  for (uint64_t room = 1; room <= 5; ++room) log.record(room, failure("r"), t0 + seconds(60));
  EXPECT_EQ(log.size(), 3u);
  EXPECT_EQ(reason_of(log, 1, t0), std::nullopt);
  EXPECT_EQ(reason_of(log, 2, t0), std::nullopt);
  EXPECT_EQ(reason_of(log, 5, t0), "r");
}

TEST(EndedRoomLogTest, PurgeStopsAtTheFirstLiveEntry) {
  EndedRoomLog log;
  const TimePoint t0 = now();
  log.record(1, failure("a"), t0 + seconds(1));
  log.record(2, failure("b"), t0 + seconds(5));
  log.purge(t0 + seconds(2));
  EXPECT_EQ(log.size(), 1u);
  EXPECT_EQ(reason_of(log, 2, t0 + seconds(2)), "b");
}

}  // namespace
}  // namespace pdkv::kv
