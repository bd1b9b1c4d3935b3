// The decode side of a room, in one process: real TCP engines over loopback, messages
// through the real codecs on an in-process bus (kv/testing/room_pair.h). What the decode
// asks for, resends, checks and detects; the prefill's side is in
// kv/prefill/prefill_manager_test.cc, whole-pair transfers in kv/manager_pair_*_test.cc.
#include <gtest/gtest.h>

#include <thread>

#include "kv/kv_sender.h"
#include "kv/testing/room_pair.h"

// In kv::testing, whose helpers (room_pair.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

using std::chrono::milliseconds;
using Wait = RoomPair::Wait;

TEST(DecodeManagerTest, DecodePrefixIsNotResent) {
  RoomPair pair;
  ASSERT_TRUE(pair.ok());
  const std::vector<int64_t> src = {0, 1, 2, 3, 4};
  pair.prefill_buffers().fill_request(src);
  // The decode already holds 2 pages (8 tokens) and allocates only the last three.
  const std::vector<int64_t> tail = {10, 11, 12};
  KVSender sender(pair.prefill(), 9);
  ASSERT_TRUE(sender.init(5, 0).ok());
  KVReceiver receiver(pair.decode(), 9);
  ASSERT_TRUE(receiver.init().ok());
  ASSERT_TRUE(receiver.send_metadata({tail, 0, {}, 8, std::nullopt}).ok());
  ASSERT_TRUE(sender.send(src).ok());
  ASSERT_TRUE(eventually([&] { return receiver.poll() == RoomState::kSuccess; }));
  const std::vector<int64_t> as_request = {-1, -1, 10, 11, 12};
  EXPECT_TRUE(pair.decode_buffers().holds_request(as_request, 2));
}

TEST(DecodeManagerTest, DecodeAbortFailsThePrefillRoomWithTheReason) {
  RoomPair pair;
  ASSERT_NO_FATAL_FAILURE(pair.open(11, {0, 1}, {1, 2}));
  KVSender& sender = pair.sender();
  KVReceiver& receiver = pair.receiver();
  receiver.abort("client went away");
  EXPECT_EQ(receiver.poll(), RoomState::kFailed);
  ASSERT_TRUE(eventually([&] { return sender.poll() == RoomState::kFailed; }));
  EXPECT_NE(sender.failure().message().find("client went away"), std::string::npos);
  EXPECT_EQ(receiver.status().failure_cause, FailureCause::kAbortedLocally);
  EXPECT_EQ(sender.status().failure_cause, FailureCause::kAbortedByPeer);
  EXPECT_EQ(sender.status().failure_stage, FailureStage::kWaiting);
  EXPECT_TRUE(sender.send(std::vector<int64_t>{0, 1}).ok());  // ignored: the room ended
  EXPECT_TRUE(eventually(
      [&] { return pair.prefill().active_rooms() == 0 && pair.decode().active_rooms() == 0; }));
}

TEST(DecodeManagerTest, BootstrapTimeoutWhenNoPrefillRegisters) {
  ManagerMaker maker;
  RankBuffers dbuf(ModelShape{}, 1, 0, 16);
  KvManagerOptions options = testing::fast_options();
  options.bootstrap_timeout = milliseconds(500);
  auto decode = maker.decode(dbuf.args(0), options);
  ASSERT_TRUE(decode);
  TimePoint start = now();
  KVReceiver receiver(*decode, 13, "nobody-home:1");
  ASSERT_TRUE(receiver.init().ok());
  ASSERT_TRUE(eventually([&] { return receiver.poll() == RoomState::kFailed; }));
  const double waited_ms = std::chrono::duration<double, std::milli>(now() - start).count();
  EXPECT_GE(waited_ms, 400);
  EXPECT_LE(waited_ms, 2000);
  EXPECT_NE(receiver.failure().message().find("13"), std::string::npos);
  EXPECT_EQ(receiver.status().failure_cause, FailureCause::kBootstrapTimeout);
  EXPECT_EQ(receiver.status().failure_stage, FailureStage::kBootstrap);
  EXPECT_TRUE(eventually([&] { return decode->active_rooms() == 0; }));
}

TEST(DecodeManagerTest, OutOfRangeDestinationPageFailsBothSides) {
  RoomPair pair;
  // Page 16 is one past the end of the decode's buffers.
  ASSERT_NO_FATAL_FAILURE(pair.open(14, {0}, {16}, Wait::kNo));
  ASSERT_TRUE(pair.sender().send(std::vector<int64_t>{0}).ok());
  ASSERT_TRUE(eventually([&] { return pair.receiver().poll() == RoomState::kFailed; }));
  ASSERT_TRUE(eventually([&] { return pair.sender().poll() == RoomState::kFailed; }));
  EXPECT_EQ(pair.sender().status().failure_cause, FailureCause::kOutOfRange);
  EXPECT_EQ(pair.receiver().status().failure_cause, FailureCause::kOutOfRange);
}

TEST(DecodeManagerTest, DeadPrefillIsDetectedByTheHeartbeat) {
  RoomPair pair;
  ASSERT_NO_FATAL_FAILURE(pair.open(17, {0, 1}, {1, 2}));
  TimePoint killed = now();
  pair.maker().bus().set_unreachable(pair.decode().control_endpoint(), true);
  ASSERT_TRUE(eventually([&] { return pair.receiver().poll() == RoomState::kFailed; }));
  // heartbeat_interval x max_failures = 300 ms, plus one timer tick and scheduling slack.
  EXPECT_LT(now() - killed, milliseconds(1500));
  EXPECT_NE(pair.receiver().failure().message().find("stopped answering"), std::string::npos);
  EXPECT_EQ(pair.receiver().status().failure_cause, FailureCause::kPeerDead);
}

// A registration lost on the wire is sent again until it is answered;
// before, every later pre-allocation to that prefill rank was refused ("never registered").
TEST(DecodeManagerTest, ALostRegistrationIsResentAndLaterRoomsSucceed) {
  RoomPair pair;
  ASSERT_TRUE(pair.ok());
  testing::InProcessBus& bus = pair.maker().bus();
  bus.set_unreachable(pair.prefill().control_endpoint(), true);
  KVReceiver lost(pair.decode(), 61);  // its registration and pre-allocation are dropped
  ASSERT_TRUE(lost.init().ok());
  ASSERT_TRUE(lost.send_metadata({{1}, 0, {}, 0, std::nullopt}).ok());
  std::this_thread::sleep_for(milliseconds(50));
  bus.set_unreachable(pair.prefill().control_endpoint(), false);
  std::this_thread::sleep_for(milliseconds(400));  // a few heartbeats
  ASSERT_NO_FATAL_FAILURE(pair.open(62, {2, 3}, {7, 9}, Wait::kNo));
  ASSERT_NO_FATAL_FAILURE(pair.finish_and_check());
  lost.abort("test over");
  EXPECT_TRUE(eventually([&] { return pair.decode().active_rooms() == 0; }));
}

// The room whose registration (and, before, pre-allocation) is lost is not lost itself:
// its pre-allocation waits for the prefill to accept the resent registration, then goes.
// Before, it was sent at once, dropped, and the room failed on the waiting timeout.
TEST(DecodeManagerTest, ARoomOpenedWhileItsRegistrationIsLostSucceedsOnceItGetsThrough) {
  RoomPairOptions options;
  options.prefill_options.heartbeat_interval = milliseconds(300);  // the outage must stay
  options.decode_options.heartbeat_interval = milliseconds(300);   // below liveness
  RoomPair pair(options);
  ASSERT_TRUE(pair.ok());
  const std::vector<int64_t> src = {4, 5, 6}, dst = {1, 8, 11};
  pair.prefill_buffers().fill_request(src);
  pair.maker().bus().set_unreachable(pair.prefill().control_endpoint(), true);
  KVReceiver receiver(pair.decode(), 63);
  ASSERT_TRUE(receiver.init().ok());
  ASSERT_TRUE(receiver.send_metadata({dst, 0, {}, 0, std::nullopt}).ok());
  KVSender sender(pair.prefill(), 63);
  ASSERT_TRUE(sender.init(3, 0).ok());
  std::this_thread::sleep_for(milliseconds(450));  // registration sent and resent, all lost
  EXPECT_EQ(sender.poll(), RoomState::kBootstrapping);
  pair.maker().bus().set_unreachable(pair.prefill().control_endpoint(), false);
  ASSERT_TRUE(eventually([&] { return sender.poll() == RoomState::kWaitingForInput; }))
      << sender.failure().to_string();
  ASSERT_TRUE(sender.send(src).ok());
  ASSERT_TRUE(eventually([&] { return receiver.poll() == RoomState::kSuccess; }))
      << receiver.failure().to_string();
  EXPECT_TRUE(pair.decode_buffers().holds_request(dst));
  EXPECT_TRUE(eventually(
      [&] { return pair.decode().active_rooms() == 0 && pair.prefill().active_rooms() == 0; }));
}

// A byte that changes between landing and the status (a stray writer, a transport that
// reported success for bytes it did not deliver) fails the room instead of decoding junk.
TEST(DecodeManagerTest, ChecksumTurnsCorruptionAfterLandingIntoAFailedRoom) {
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
  // The test flips a decode byte between the engine's write and the status. The order is
  // real (the write is acknowledged over the socket before the prefill counts the bytes)
  // but TSan does not see that hand-off through the kernel, so it would report the flip
  // as a race with the engine. The plain and ASan suites run it.
  GTEST_SKIP() << "writes into engine-owned memory mid-room; see comment";
#endif
#endif
  ManagerMaker maker;
  ModelShape shape;
  RankBuffers pbuf(shape, 1, 0, 16), dbuf(shape, 1, 0, 16);
  PrefillManagerConfig config = maker.prefill_config(pbuf.args(0), testing::checksum_options());
  config.wait_for_prefill_metadata = true;
  auto prefill = maker.prefill(std::move(config));
  auto decode = maker.decode(dbuf.args(0), testing::checksum_options());
  ASSERT_TRUE(prefill && decode);
  const std::vector<int64_t> src = {3, 4, 5}, dst = {9, 1, 2};
  RoomMove room({*prefill, pbuf, *decode, dbuf});
  ASSERT_NO_FATAL_FAILURE(room.open(55, src, dst, Wait::kNo));
  KVSender& sender = room.sender();
  KVReceiver& receiver = room.receiver();
  ASSERT_TRUE(sender.send(src).ok());
  // The status waits for the first token. The prefill counts the bytes once the decode's
  // engine acknowledged them (written); reading the decode's pages before that would race
  // with the engine.
  ASSERT_TRUE(eventually([&] { return prefill->metrics().bytes_written > 0; }));
  ASSERT_TRUE(dbuf.holds_request(dst));
  dbuf.at(1, 1, 2, 0, 3) ^= 0x40;
  prefill->set_prefill_metadata(55, 12, {});
  ASSERT_TRUE(eventually([&] { return receiver.poll() == RoomState::kFailed; }));
  EXPECT_NE(receiver.failure().message().find("checksum mismatch"), std::string::npos)
      << receiver.failure().to_string();
  EXPECT_EQ(receiver.status().failure_cause, FailureCause::kChecksumMismatch);
  EXPECT_EQ(receiver.status().failure_stage, FailureStage::kCompletion);
  EXPECT_TRUE(
      eventually([&] { return prefill->active_rooms() == 0 && decode->active_rooms() == 0; }));
  EXPECT_EQ(decode->metrics().failures_by_cause.count("checksum_mismatch"), 1u);
}

TEST(DecodeManagerTest, DecodeCheckingAPrefillThatDoesNotSumFailsClosed) {
  RoomPairOptions options;
  options.decode_options = testing::checksum_options();
  RoomPair pair(options);
  ASSERT_NO_FATAL_FAILURE(pair.open(56, {0}, {7}, Wait::kNo));
  ASSERT_TRUE(pair.sender().send(std::vector<int64_t>{0}).ok());
  ASSERT_TRUE(eventually([&] { return pair.receiver().poll() == RoomState::kFailed; }));
  EXPECT_NE(pair.receiver().failure().message().find("turn it on on the prefill"),
            std::string::npos)
      << pair.receiver().failure().to_string();
}

}  // namespace
}  // namespace pdkv::kv::testing
