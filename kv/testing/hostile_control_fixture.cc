#include "kv/testing/hostile_control_fixture.h"

#include <iterator>
#include <string_view>
#include <variant>
#include <vector>
#include <zmq_addon.hpp>

#include "kv/kv_sender.h"
#include "kv/testing/environment_channels.h"
#include "proto/codec.h"

namespace pdkv::kv::testing {

void HostileControlTest::SetUp() {
  ASSERT_TRUE(pair_.ok());
  auto stranger =
      zmq_channels_from_environment()("127.0.0.1", ChannelCallbacks{[](proto::Message) {}, {}});
  ASSERT_TRUE(stranger.ok()) << stranger.status().to_string();
  stranger_ = std::move(stranger).value();
}

void HostileControlTest::TearDown() {
  if (stranger_) stranger_->stop();
}

RoomPairOptions HostileControlTest::pair_options() {
  RoomPairOptions o;
  o.channels = Channels::kZmq;
  o.num_pages = 32;
  return o;
}

std::optional<proto::RegistrationResult> HostileControlTest::register_and_read_answer(
    const proto::BufferRegistration& reg, zmq::socket_t& listener) {
  for (int i = 0; i < 20; ++i) {
    if (!stranger_->send(pair_.prefill().control_endpoint(), reg).ok()) continue;
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(listener, std::back_inserter(frames))) continue;
    std::vector<std::string> owned;
    for (auto& f : frames) owned.push_back(f.to_string());
    std::vector<std::string_view> views(owned.begin(), owned.end());
    auto decoded = proto::decode_message(views);
    if (!decoded.ok()) continue;
    if (auto* r = std::get_if<proto::RegistrationResult>(&*decoded)) return *r;
  }
  return std::nullopt;
}

proto::BufferRegistration HostileControlTest::registration_as_decode(
    const std::string& control_endpoint, const std::string& engine_endpoint, uint64_t incarnation) {
  const KvArgs a = pair_.decode_buffers().args(0);
  proto::BufferRegistration reg;
  reg.decode.control_endpoint = control_endpoint;
  reg.decode.engine_endpoint = engine_endpoint;
  reg.decode.incarnation = incarnation;
  reg.layout = a.layout();
  reg.kv = {a.kv_data_ptrs, a.kv_data_lens, a.kv_item_lens};
  return reg;
}

zmq::socket_t HostileControlTest::stranger_listener(zmq::context_t& ctx) {
  zmq::socket_t listener(ctx, zmq::socket_type::pull);
  listener.set(zmq::sockopt::rcvtimeo, 500);
  listener.bind("tcp://127.0.0.1:*");
  return listener;
}

void HostileControlTest::expect_room_unharmed() {
  EXPECT_EQ(pair_.sender().poll(), RoomState::kWaitingForInput)
      << pair_.sender().failure().to_string();
  EXPECT_EQ(pair_.receiver().poll(), RoomState::kWaitingForInput)
      << pair_.receiver().failure().to_string();
  ASSERT_NO_FATAL_FAILURE(pair_.finish_and_check());
}

}  // namespace pdkv::kv::testing
