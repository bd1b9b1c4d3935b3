// The decode and a watching route directory (RouteDirectory::subscribe): a prefill rank
// whose route vanishes fails the rooms still bootstrapping with it at once, spares those
// already handed to it, and new rooms resolve the rank again instead of using the cached
// endpoint. In one process over the in-memory directory; kv/registry/etcd_decode_test.cc
// runs the same against real etcd.
#include <gtest/gtest.h>

#include "kv/kv_sender.h"
#include "kv/testing/room_pair.h"
#include "kv/testing/route_change_rooms.h"

// In kv::testing, whose helpers (room_pair.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

using std::chrono::milliseconds;

constexpr char kAddr[] = "watched-instance:7000";

// Liveness that cannot fire within a test: whatever fails a room here is the route change.
KvManagerOptions slow_liveness() {
  KvManagerOptions o = testing::fast_options();
  o.heartbeat_interval = milliseconds(5000);
  o.heartbeat_max_failures = 5;
  o.bootstrap_timeout = milliseconds(30000);
  o.waiting_timeout = milliseconds(30000);
  return o;
}

class DecodeRouteChangeTest : public ::testing::Test {
 protected:
  std::unique_ptr<PrefillManager> make_prefill(RankBuffers& buffers) {
    return maker_.prefill(buffers.args(0), slow_liveness());
  }
  std::unique_ptr<DecodeManager> make_decode(RankBuffers& buffers) {
    return maker_.decode(buffers.args(0), slow_liveness());
  }

  testing::ManagerMaker maker_{kAddr};
  ModelShape shape_;
};

TEST_F(DecodeRouteChangeTest, VanishedRouteFailsBootstrappingRoomsAndSparesHandedOverOnes) {
  RankBuffers pbuf(shape_, 1, 0, 16), dbuf(shape_, 1, 0, 16);
  auto prefill = make_prefill(pbuf);
  auto decode = make_decode(dbuf);
  ASSERT_TRUE(prefill && decode);
  // Room 1: resolved and registered, but the engine has not called send_metadata().
  // Room 2: its pre-allocation reached the prefill (which holds it until its KVSender).
  RoomsAtARouteChange rooms({*prefill, pbuf, *decode, dbuf});
  ASSERT_NO_FATAL_FAILURE(rooms.open(1, 2, {4, 5}, {9, 3}));
  KVReceiver& waiting = rooms.bootstrapping();

  const TimePoint removed = now();
  maker_.directory().remove_rank(kAddr, 0);
  ASSERT_TRUE(eventually([&] { return waiting.poll() == RoomState::kFailed; }, milliseconds(2000)));
  EXPECT_LT(now() - removed, milliseconds(1000));
  const RoomStatus st = waiting.status();
  EXPECT_EQ(st.failure_cause, FailureCause::kBootstrapFailed);
  EXPECT_EQ(st.failure_stage, FailureStage::kBootstrap);
  EXPECT_NE(st.failure_reason.find("prefill rank 0 of instance watched-instance:7000"),
            std::string::npos)
      << st.failure_reason;
  EXPECT_NE(st.failure_reason.find("left the route registry"), std::string::npos);
  EXPECT_NE(st.failure_reason.find("removed from the in-memory directory"), std::string::npos);

  // The handed-over room is the live prefill's to finish.
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(rooms.handed_over().poll(), RoomState::kWaitingForInput);
  ASSERT_NO_FATAL_FAILURE(rooms.finish_handed_over());
  EXPECT_TRUE(eventually([&] { return decode->active_rooms() == 0; }));
}

TEST_F(DecodeRouteChangeTest, NewRoomsFollowARankThatMovedInsteadOfTheCachedEndpoint) {
  RankBuffers pbuf(shape_, 1, 0, 16), dbuf(shape_, 1, 0, 16);
  auto first = make_prefill(pbuf);
  auto decode = make_decode(dbuf);
  ASSERT_TRUE(first && decode);
  // A room through the first prefill: the decode caches its instance and endpoint.
  const std::vector<int64_t> src = {1, 2}, dst = {7, 8};
  {
    RoomMove room({*first, pbuf, *decode, dbuf});
    ASSERT_NO_FATAL_FAILURE(room.open(11, src, dst, RoomMove::Wait::kNo));
    ASSERT_NO_FATAL_FAILURE(room.finish_and_check());
  }
  // A room bootstrapping with the first prefill when rank 0 moves.
  KVReceiver stranded(*decode, 12);
  ASSERT_TRUE(stranded.init().ok());
  ASSERT_TRUE(eventually([&] { return stranded.poll() == RoomState::kWaitingForInput; }));

  // Rank 0 of the instance registers anew at another endpoint (a restarted process; the
  // old one lives on here, so nothing but the directory tells the decode).
  RankBuffers pbuf2(shape_, 1, 0, 16);
  auto second = make_prefill(pbuf2);
  ASSERT_TRUE(second);
  ASSERT_NE(second->control_endpoint(), first->control_endpoint());
  ASSERT_TRUE(
      eventually([&] { return stranded.poll() == RoomState::kFailed; }, milliseconds(2000)));
  EXPECT_NE(stranded.status().failure_reason.find(first->control_endpoint()), std::string::npos)
      << stranded.status().failure_reason;

  RoomMove room({*second, pbuf2, *decode, dbuf});
  ASSERT_NO_FATAL_FAILURE(room.open(13, src, dst, RoomMove::Wait::kNo, /*salt=*/13));
  ASSERT_NO_FATAL_FAILURE(room.finish_and_check());
}

TEST_F(DecodeRouteChangeTest, ARankThatRegistersForTheFirstTimeChangesNothing) {
  RankBuffers pbuf(shape_, 1, 0, 16), dbuf(shape_, 1, 0, 16);
  auto decode = make_decode(dbuf);
  ASSERT_TRUE(decode);
  KVReceiver early(*decode, 21);  // opened before any prefill registered: it waits
  ASSERT_TRUE(early.init().ok());
  auto prefill = make_prefill(pbuf);
  ASSERT_TRUE(prefill);
  ASSERT_TRUE(eventually([&] { return early.poll() == RoomState::kWaitingForInput; }));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(early.poll(), RoomState::kWaitingForInput);
}

}  // namespace
}  // namespace pdkv::kv::testing
