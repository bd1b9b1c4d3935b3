// HostileControlTest: a prefill/decode pair over real ZeroMQ sockets on loopback, without
// a cluster secret, and a stranger with a control socket of its own that sends them forged
// messages (kv/control/hostile_control_test.cc, hostile_registration_test.cc). Fails tests
// through GoogleTest: test binaries only.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "kv/control/control_channel.h"
#include "kv/testing/room_pair.h"
#include "proto/messages.h"

namespace pdkv::kv::testing {

class HostileControlTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  static RoomPairOptions pair_options();

  // Sends `reg` to the prefill (again, up to 20 times) until its RegistrationResult
  // reaches `listener`, the endpoint the registration names; nullopt if none did.
  std::optional<proto::RegistrationResult> register_and_read_answer(
      const proto::BufferRegistration& reg, zmq::socket_t& listener);

  // A registration in the decode's name: its layout and buffers, with these endpoints
  // and incarnation (what a stranger who read them off the network can send).
  proto::BufferRegistration registration_as_decode(const std::string& control_endpoint,
                                                   const std::string& engine_endpoint,
                                                   uint64_t incarnation);

  // The stranger's own control socket on an ephemeral port, where the prefill answers
  // the registrations that name it.
  static zmq::socket_t stranger_listener(zmq::context_t& ctx);

  // What a forgery must leave as it was: the open room still waits for its pages at both
  // ends, then succeeds with the real prefill's bytes.
  void expect_room_unharmed();

  RoomPair pair_{pair_options()};
  std::unique_ptr<ControlChannel> stranger_;
};

}  // namespace pdkv::kv::testing
