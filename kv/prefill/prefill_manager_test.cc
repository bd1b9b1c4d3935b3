// The prefill side of a room, in one process: real TCP engines over loopback, messages
// through the real codecs on an in-process bus (kv/testing/room_pair.h). What the
// prefill holds, waits for, detects and tells the decode; the decode's side is in
// kv/decode/decode_manager_test.cc, whole-pair transfers in kv/manager_pair_*_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <variant>

#include "kv/kv_sender.h"
#include "kv/testing/room_pair.h"

// In kv::testing, whose helpers (room_pair.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

using std::chrono::milliseconds;
using Wait = RoomPair::Wait;

TEST(PrefillManagerTest, ChunksSentBeforeThePreAllocationWaitForIt) {
  RoomPair pair;
  ASSERT_TRUE(pair.ok());
  const std::vector<int64_t> src = {3, 4, 5}, dst = {9, 1, 2};
  pair.prefill_buffers().fill_request(src);
  KVSender sender(pair.prefill(), 7);
  ASSERT_TRUE(sender.init(3, 0).ok());
  ASSERT_TRUE(sender.send(src).ok());
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(sender.poll(), RoomState::kBootstrapping);
  KVReceiver receiver(pair.decode(), 7);
  ASSERT_TRUE(receiver.init().ok());
  ASSERT_TRUE(receiver.send_metadata({dst, 0, {}, 0, std::nullopt}).ok());
  ASSERT_TRUE(eventually([&] { return receiver.poll() == RoomState::kSuccess; }));
  EXPECT_TRUE(pair.decode_buffers().holds_request(dst));
}

TEST(PrefillManagerTest, PreAllocationBeforeTheSenderExists) {
  RoomPair pair;
  ASSERT_TRUE(pair.ok());
  const std::vector<int64_t> src = {0, 1}, dst = {5, 6};
  pair.prefill_buffers().fill_request(src);
  KVReceiver receiver(pair.decode(), 8);
  ASSERT_TRUE(receiver.init().ok());
  ASSERT_TRUE(receiver.send_metadata({dst, 0, {}, 0, std::nullopt}).ok());
  ASSERT_TRUE(eventually([&] { return pair.prefill().active_rooms() == 1; }));
  KVSender sender(pair.prefill(), 8);
  ASSERT_TRUE(sender.init(2, 0).ok());
  ASSERT_TRUE(sender.send(src).ok());
  ASSERT_TRUE(eventually([&] { return receiver.poll() == RoomState::kSuccess; }));
  EXPECT_TRUE(pair.decode_buffers().holds_request(dst));
}

TEST(PrefillManagerTest, PrefillAbortReachesTheDecode) {
  RoomPair pair;
  ASSERT_NO_FATAL_FAILURE(pair.open(12, {0, 1}, {1, 2}));
  pair.sender().abort("embedding never arrived");
  ASSERT_TRUE(eventually([&] { return pair.receiver().poll() == RoomState::kFailed; }));
  EXPECT_NE(pair.receiver().failure().message().find("embedding never arrived"), std::string::npos);
  EXPECT_EQ(pair.sender().status().failure_cause, FailureCause::kAbortedLocally);
  EXPECT_EQ(pair.receiver().status().failure_cause, FailureCause::kAbortedByPeer);
  EXPECT_EQ(pair.receiver().status().failure_stage, FailureStage::kWaiting);  // the prefill's
}

TEST(PrefillManagerTest, LayerwiseStreamsGroupsAsTheForwardMarksThem) {
  ManagerMaker maker;
  ModelShape shape;
  RankBuffers pbuf(shape, 1, 0, 16), dbuf(shape, 1, 0, 16);
  PrefillManagerConfig config = maker.prefill_config(pbuf.args(0));
  config.layerwise_interval = 1;
  auto prefill = maker.prefill(std::move(config));
  auto decode = maker.decode(dbuf.args(0));
  ASSERT_TRUE(prefill && decode);
  const std::vector<int64_t> src = {2, 3}, dst = {7, 8};
  RoomMove room({*prefill, pbuf, *decode, dbuf});
  ASSERT_NO_FATAL_FAILURE(room.open(15, src, dst, Wait::kNo));
  KVReceiver& receiver = room.receiver();
  prefill->reserve_layerwise_cache_steps();
  ASSERT_TRUE(room.sender().send(src).ok());
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_NE(receiver.poll(), RoomState::kSuccess);  // no layer is ready yet
  prefill->mark_layers_ready(1);
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_NE(receiver.poll(), RoomState::kSuccess);
  prefill->mark_layers_ready(1);
  ASSERT_TRUE(eventually([&] { return receiver.poll() == RoomState::kSuccess; }));
  EXPECT_TRUE(dbuf.holds_request(dst));
}

TEST(PrefillManagerTest, DeadDecodeIsDetectedByTheHeartbeat) {
  RoomPair pair;
  ASSERT_NO_FATAL_FAILURE(pair.open(16, {0, 1}, {1, 2}));
  // The decode goes silent: nothing it sends reaches the prefill any more.
  TimePoint killed = now();
  pair.maker().bus().set_unreachable(pair.prefill().control_endpoint(), true);
  ASSERT_TRUE(eventually([&] { return pair.sender().poll() == RoomState::kFailed; }));
  EXPECT_LT(now() - killed, milliseconds(2000));
  EXPECT_NE(pair.sender().failure().message().find("stopped answering"), std::string::npos);
  EXPECT_EQ(pair.sender().status().failure_cause, FailureCause::kPeerDead);
  // The prefill tells the decode, whose room fails too.
  ASSERT_TRUE(eventually([&] { return pair.receiver().poll() == RoomState::kFailed; }));
}

TEST(PrefillManagerTest, LayoutMismatchIsRefusedWithAClearReason) {
  ManagerMaker maker;
  ModelShape shape;
  RankBuffers pbuf(shape, 1, 0, 16);
  ModelShape other = shape;
  other.page_size = 8;
  RankBuffers dbuf(other, 1, 0, 16);
  auto prefill = maker.prefill(pbuf.args(0));
  auto decode = maker.decode(dbuf.args(0));
  ASSERT_TRUE(prefill && decode);
  KVReceiver receiver(*decode, 88);
  ASSERT_TRUE(receiver.init().ok());
  ASSERT_TRUE(eventually([&] { return receiver.poll() == RoomState::kFailed; }));
  EXPECT_NE(receiver.failure().message().find("page_size is 4 on prefill but 8 on decode"),
            std::string::npos)
      << receiver.failure().message();
  EXPECT_EQ(receiver.status().failure_cause, FailureCause::kLayoutMismatch);
}

TEST(PrefillManagerTest, WaitingForMetadataTimesOutWithAReason) {
  ManagerMaker maker;
  ModelShape shape;
  RankBuffers pbuf(shape, 1, 0, 16), dbuf(shape, 1, 0, 16);
  KvManagerOptions options = testing::fast_options();
  options.metadata_timeout = milliseconds(200);
  PrefillManagerConfig config = maker.prefill_config(pbuf.args(0), options);
  config.wait_for_prefill_metadata = true;
  auto prefill = maker.prefill(std::move(config));
  auto decode = maker.decode(dbuf.args(0));
  ASSERT_TRUE(prefill && decode);
  RoomMove room({*prefill, pbuf, *decode, dbuf});
  ASSERT_NO_FATAL_FAILURE(room.open(99, {1}, {3}, Wait::kNo));
  KVSender& sender = room.sender();
  KVReceiver& receiver = room.receiver();
  ASSERT_TRUE(sender.send(std::vector<int64_t>{1}).ok());
  ASSERT_TRUE(eventually([&] { return receiver.poll() == RoomState::kFailed; }));
  EXPECT_NE(receiver.failure().message().find("first token"), std::string::npos);
  EXPECT_EQ(sender.status().failure_cause, FailureCause::kMetadataTimeout);
  EXPECT_EQ(sender.status().failure_stage, FailureStage::kCompletion);
  EXPECT_EQ(receiver.status().failure_cause, FailureCause::kMetadataTimeout);
}

// A Success status whose send fails (the decode's socket not connected for a moment) is
// retried by the prefill's timer; before, it was dropped and the finished room failed on
// the decode's waiting timeout.
TEST(PrefillManagerTest, AStatusThatCannotBeSentYetIsRetried) {
  RoomPairOptions options;
  options.prefill_options.heartbeat_interval = milliseconds(300);  // the outage must stay
  options.decode_options.heartbeat_interval = milliseconds(300);   // below liveness
  // The status must take the control channel (in band it would not need it at all: the
  // next test).
  options.prefill_options.status_in_band = false;
  RoomPair pair(options);
  const std::vector<int64_t> src = {0, 2}, dst = {5, 3};
  ASSERT_NO_FATAL_FAILURE(pair.open(64, src, dst));
  KVReceiver& receiver = pair.receiver();
  pair.maker().bus().set_refusing(pair.decode().control_endpoint(), true);
  ASSERT_TRUE(pair.sender().send(src).ok());
  ASSERT_TRUE(eventually([&] { return pair.sender().poll() == RoomState::kSuccess; }));
  std::this_thread::sleep_for(milliseconds(250));  // a few retries, all refused
  EXPECT_NE(receiver.poll(), RoomState::kSuccess);
  EXPECT_NE(receiver.poll(), RoomState::kFailed) << receiver.failure().to_string();
  pair.maker().bus().set_refusing(pair.decode().control_endpoint(), false);
  ASSERT_TRUE(eventually([&] { return receiver.poll() == RoomState::kSuccess; }))
      << receiver.failure().to_string();
  EXPECT_TRUE(pair.decode_buffers().holds_request(dst));
}

// The Success status rides the room's last batch (kv/pipeline/status_note.h): the decode's engine
// hands it over once the bytes landed, so the room succeeds on the decode while its
// control channel refuses every message, and the prefill sends no status there at all.
TEST(PrefillManagerTest, ASuccessStatusRidesTheLastBatchSoTheDecodeNeedsNoControlMessage) {
  RoomPairOptions options;
  options.prefill_options.heartbeat_interval = milliseconds(300);
  options.decode_options.heartbeat_interval = milliseconds(300);
  RoomPair pair(options);
  const std::vector<int64_t> src = {0, 2}, dst = {5, 3};
  ASSERT_NO_FATAL_FAILURE(pair.open(66, src, dst));
  auto statuses = std::make_shared<std::atomic<int>>(0);
  pair.maker().bus().set_tap([statuses](const std::string&, const proto::Message& m, size_t) {
    if (std::holds_alternative<proto::TransferStatus>(m)) ++*statuses;
  });
  pair.maker().bus().set_refusing(pair.decode().control_endpoint(), true);
  ASSERT_TRUE(pair.sender().send(src).ok());
  ASSERT_TRUE(eventually([&] { return pair.receiver().poll() == RoomState::kSuccess; }))
      << pair.receiver().failure().to_string();
  EXPECT_TRUE(pair.decode_buffers().holds_request(dst));
  ASSERT_TRUE(eventually([&] { return pair.sender().poll() == RoomState::kSuccess; }));
  EXPECT_EQ(pair.prefill().metrics().statuses_in_band, 1u);
  EXPECT_EQ(pair.decode().metrics().statuses_in_band, 1u);
  EXPECT_EQ(statuses->load(), 0);
  pair.maker().bus().set_tap(nullptr);
  pair.maker().bus().set_refusing(pair.decode().control_endpoint(), false);
}

// A bootstrap server that restarts comes back empty; the prefill registers again every
// bootstrap_refresh, so a decode that resolves afresh finds it. Before, the new decode's
// rooms failed on the bootstrap timeout until the prefill itself restarted.
TEST(PrefillManagerTest, APrefillRegistersAgainWithARestartedBootstrapServer) {
  ManagerMaker maker;
  ModelShape shape;
  RankBuffers pbuf(shape, 1, 0, 16), dbuf(shape, 1, 0, 16);
  KvManagerOptions options = testing::fast_options();
  options.bootstrap_refresh = milliseconds(200);
  auto prefill = maker.prefill(pbuf.args(0), options);
  maker.directory().forget(maker.bootstrap_addr());  // the server restarted
  KvManagerOptions decode_options = testing::fast_options();
  decode_options.bootstrap_timeout = milliseconds(3000);
  auto decode = maker.decode(dbuf.args(0), decode_options);
  ASSERT_TRUE(prefill && decode);
  RoomMove room({*prefill, pbuf, *decode, dbuf});
  ASSERT_NO_FATAL_FAILURE(room.open(65, {1, 3}, {2, 6}, Wait::kNo));
  ASSERT_NO_FATAL_FAILURE(room.finish_and_check());
}

// A prefill that shuts down with rooms in flight tells their decodes why, before its
// channel closes; they do not wait for the heartbeat to notice.
TEST(PrefillManagerTest, PrefillShutdownTellsTheDecodeOfEveryOpenRoom) {
  RoomPairOptions options;
  options.prefill_options.heartbeat_interval = milliseconds(5000);
  options.decode_options.heartbeat_interval = milliseconds(5000);
  RoomPair pair(options);
  ASSERT_NO_FATAL_FAILURE(pair.open(57, {0, 1}, {1, 2}));
  const TimePoint t0 = now();
  pair.prefill().shutdown();
  ASSERT_TRUE(
      eventually([&] { return pair.receiver().poll() == RoomState::kFailed; }, milliseconds(3000)));
  EXPECT_LT(now() - t0, milliseconds(3000));
  EXPECT_NE(pair.receiver().failure().message().find("shut down"), std::string::npos)
      << pair.receiver().failure().to_string();
  EXPECT_EQ(pair.receiver().status().failure_cause, FailureCause::kShutdown);
  EXPECT_TRUE(eventually([&] { return pair.decode().active_rooms() == 0; }));
}

}  // namespace
}  // namespace pdkv::kv::testing
