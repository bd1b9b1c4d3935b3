// Bounded resources (docs/SECURITY.md): what decodes alone can make a prefill rank hold,
// the rooms pre-allocated before their sender (PDKV_MAX_PENDING_ROOMS) and the decode
// ranks registered (PDKV_MAX_DECODE_PEERS). Over real ZeroMQ sockets on loopback; a room
// over the cap fails with the setting's name, those within it still succeed.
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "kv/kv_sender.h"
#include "kv/testing/room_pair.h"

// In kv::testing, whose helpers (room_pair.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

using std::chrono::milliseconds;

class PrefillCapsTest : public ::testing::Test {
 protected:
  std::unique_ptr<PrefillManager> make_prefill(KvManagerOptions options) {
    return maker_.prefill(pbuf_.args(0), options);
  }
  std::unique_ptr<DecodeManager> make_decode(RankBuffers& buffers) {
    return maker_.decode(buffers.args(0));
  }

  testing::ManagerMaker maker_{testing::kTestBootstrapAddr, testing::Channels::kZmq};
  ModelShape shape_;
  RankBuffers pbuf_{shape_, 1, 0, 32};
  RankBuffers dbuf_{shape_, 1, 0, 32};
  RankBuffers other_dbuf_{shape_, 1, 0, 32};
};

TEST_F(PrefillCapsTest, PreAllocationsBeyondThePendingRoomCapAreRefusedWithAReason) {
  KvManagerOptions options = testing::fast_options();
  options.max_pending_rooms = 4;
  auto prefill = make_prefill(options);
  auto decode = make_decode(dbuf_);
  ASSERT_TRUE(prefill && decode);
  // Ten rooms pre-allocated before any KVSender exists: four are held, six refused.
  std::vector<std::unique_ptr<KVReceiver>> receivers;
  for (uint64_t room = 100; room < 110; ++room) {
    receivers.push_back(std::make_unique<KVReceiver>(*decode, room));
    ASSERT_TRUE(receivers.back()->init().ok());
    ASSERT_TRUE(receivers.back()
                    ->send_metadata({{static_cast<int64_t>(room - 100)}, 0, {}, 0, std::nullopt})
                    .ok());
  }
  auto failed = [&] {
    int n = 0;
    for (auto& r : receivers) n += r->poll() == RoomState::kFailed ? 1 : 0;
    return n;
  };
  ASSERT_TRUE(eventually([&] { return failed() == 6; })) << failed() << " rooms failed";
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(failed(), 6);
  for (auto& r : receivers) {
    if (r->poll() == RoomState::kFailed) {
      EXPECT_NE(r->failure().message().find("PDKV_MAX_PENDING_ROOMS"), std::string::npos)
          << r->failure().to_string();
    }
  }
  // A held room is served once its sender opens; a room whose sender opens first is not
  // counted at all.
  size_t held = 0;
  while (receivers[held]->poll() == RoomState::kFailed) ++held;
  const uint64_t held_room = 100 + held;
  const std::vector<int64_t> src{9};
  pbuf_.fill_request(src);
  KVSender sender(*prefill, held_room);
  ASSERT_TRUE(sender.init(1, 0).ok());
  ASSERT_TRUE(sender.send(src).ok());
  ASSERT_TRUE(eventually([&] { return receivers[held]->poll() == RoomState::kSuccess; }))
      << receivers[held]->failure().to_string();
  EXPECT_TRUE(dbuf_.holds_request({static_cast<int64_t>(held)}));
  KVSender first(*prefill, 200);
  ASSERT_TRUE(first.init(1, 0).ok());
  KVReceiver late(*decode, 200);
  ASSERT_TRUE(late.init().ok());
  ASSERT_TRUE(late.send_metadata({{20}, 0, {}, 0, std::nullopt}).ok());
  ASSERT_TRUE(first.send(src).ok());
  ASSERT_TRUE(eventually([&] { return late.poll() == RoomState::kSuccess; }))
      << late.failure().to_string();
}

TEST_F(PrefillCapsTest, RegistrationsBeyondThePeerCapAreRefusedAndServedPeersKeepWorking) {
  KvManagerOptions options = testing::fast_options();
  options.max_decode_peers = 1;
  auto prefill = make_prefill(options);
  auto decode = make_decode(dbuf_);
  auto other = make_decode(other_dbuf_);
  ASSERT_TRUE(prefill && decode && other);
  const std::vector<int64_t> src{4};
  pbuf_.fill_request(src);
  KVSender sender(*prefill, 300);
  ASSERT_TRUE(sender.init(1, 0).ok());
  KVReceiver served(*decode, 300);
  ASSERT_TRUE(served.init().ok());
  ASSERT_TRUE(served.send_metadata({{5}, 0, {}, 0, std::nullopt}).ok());
  ASSERT_TRUE(eventually([&] { return sender.poll() == RoomState::kWaitingForInput; }));
  // The second decode rank is one too many: its room fails with the reason.
  KVReceiver refused(*other, 301);
  ASSERT_TRUE(refused.init().ok());
  ASSERT_TRUE(refused.send_metadata({{5}, 0, {}, 0, std::nullopt}).ok());
  ASSERT_TRUE(eventually([&] { return refused.poll() == RoomState::kFailed; }));
  EXPECT_NE(refused.failure().message().find("PDKV_MAX_DECODE_PEERS"), std::string::npos)
      << refused.failure().to_string();
  ASSERT_TRUE(sender.send(src).ok());
  ASSERT_TRUE(eventually([&] { return served.poll() == RoomState::kSuccess; }))
      << served.failure().to_string();
  EXPECT_TRUE(dbuf_.holds_request({5}));
}

}  // namespace
}  // namespace pdkv::kv::testing
