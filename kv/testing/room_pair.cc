#include "kv/testing/room_pair.h"

#include <gtest/gtest.h>

#include "kv/testing/environment_channels.h"

namespace pdkv::kv::testing {

ManagerMaker::ManagerMaker(std::string bootstrap_addr, Channels channels)
    : bootstrap_addr_(std::move(bootstrap_addr)) {
  if (channels == Channels::kInProcess) {
    bus_ = std::make_unique<InProcessBus>();
    channels_ = bus_->factory();
  } else {
    channels_ = zmq_channels_from_environment();
  }
}

namespace {

// The fields PrefillManagerConfig and DecodeManagerConfig share.
template <typename Config>
Config base_config(const KvArgs& args, const std::string& bootstrap_addr,
                   const KvManagerOptions& options) {
  Config config;
  config.args = args;
  config.bootstrap_addr = bootstrap_addr;
  config.engine = loopback_engine();
  config.options = options;
  return config;
}

}  // namespace

PrefillManagerConfig ManagerMaker::prefill_config(const KvArgs& args,
                                                  const KvManagerOptions& options) const {
  return base_config<PrefillManagerConfig>(args, bootstrap_addr_, options);
}

DecodeManagerConfig ManagerMaker::decode_config(const KvArgs& args,
                                                const KvManagerOptions& options) const {
  return base_config<DecodeManagerConfig>(args, bootstrap_addr_, options);
}

ManagerFactory ManagerMaker::factory(const engine::EngineOptions& engine,
                                     const KvManagerOptions& options) const {
  ManagerSettings settings;
  settings.engine = engine;
  settings.options = options;
  return ManagerFactory(std::move(settings), channels_, directory_);
}

Result<std::unique_ptr<PrefillManager>> ManagerMaker::create_prefill(PrefillManagerConfig config) {
  const ManagerFactory made = factory(config.engine, config.options);
  return made.prefill(manager_spec(std::move(config)));
}

std::unique_ptr<PrefillManager> ManagerMaker::prefill(PrefillManagerConfig config) {
  auto m = create_prefill(std::move(config));
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::unique_ptr<DecodeManager> ManagerMaker::decode(DecodeManagerConfig config) {
  const ManagerFactory made = factory(config.engine, config.options);
  auto m = made.decode(manager_spec(std::move(config)));
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

RoomMove::~RoomMove() {
  sender_.reset();
  receiver_.reset();
}

void RoomMove::open(uint64_t room, std::vector<int64_t> src, std::vector<int64_t> dst, Wait wait,
                    int64_t salt) {
  src_ = std::move(src);
  dst_ = std::move(dst);
  salt_ = salt;
  sides_.prefill_buffers.fill_request(src_, salt_);
  sender_ = std::make_unique<KVSender>(sides_.prefill, room);
  ASSERT_TRUE(sender_->init(static_cast<int64_t>(src_.size()), 0).ok());
  receiver_ = std::make_unique<KVReceiver>(sides_.decode, room);
  ASSERT_TRUE(receiver_->init().ok());
  ASSERT_TRUE(receiver_->send_metadata({dst_, 0, {}, 0, std::nullopt}).ok());
  if (wait == Wait::kForPreAllocation) {
    ASSERT_TRUE(eventually([&] { return sender_->poll() == RoomState::kWaitingForInput; }))
        << sender_->failure().to_string();
  }
}

void RoomMove::finish_and_check() {
  ASSERT_TRUE(sender_ && receiver_) << "no room is open";
  ASSERT_TRUE(sender_->send(src_).ok());
  ASSERT_TRUE(eventually([&] { return receiver_->poll() == RoomState::kSuccess; }))
      << receiver_->failure().to_string();
  EXPECT_TRUE(sides_.decode_buffers.holds_request(dst_, 0, salt_));
  EXPECT_TRUE(eventually([&] { return sender_->poll() == RoomState::kSuccess; }))
      << sender_->failure().to_string();
}

RoomPair::RoomPair(RoomPairOptions options)
    : maker_(options.bootstrap_addr, options.channels),
      pbuf_(options.shape, 1, 0, options.num_pages),
      dbuf_(options.shape, 1, 0, options.num_pages),
      prefill_(maker_.prefill(pbuf_.args(0), options.prefill_options)),
      decode_(maker_.decode(dbuf_.args(0), options.decode_options)) {
  if (ok()) room_ = std::make_unique<RoomMove>(RoomSides{*prefill_, pbuf_, *decode_, dbuf_});
}

void RoomPair::open(uint64_t room, std::vector<int64_t> src, std::vector<int64_t> dst, Wait wait,
                    int64_t salt) {
  ASSERT_TRUE(ok()) << "a manager did not start";
  room_->open(room, std::move(src), std::move(dst), wait, salt);
}

void RoomPair::finish_and_check() {
  ASSERT_TRUE(room_) << "no room is open";
  room_->finish_and_check();
}

}  // namespace pdkv::kv::testing
