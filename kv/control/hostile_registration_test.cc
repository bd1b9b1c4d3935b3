// A stranger on the control plane registering in another's name, without a cluster secret:
// a decode's endpoint under another incarnation, a fragment list that would read past one
// page, the victim decode's engine endpoint as its own. Over real ZeroMQ sockets on
// loopback (hostile_control_fixture.h); the legitimate room still succeeds with its bytes.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "kv/kv_sender.h"
#include "kv/testing/hostile_control_fixture.h"

// In kv::testing, whose helpers (room_pair.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

using std::chrono::milliseconds;

// A registration naming a registered decode's endpoint under another incarnation (a
// restart, or a stranger naming it) is answered at that endpoint with a challenge; it
// takes the decode's place only by echoing the challenge in a pre-allocation, which only
// a process receiving there can do. A stranger that merely names the endpoint changes
// nothing; a process that really listens there (the decode restarted) takes over.
TEST_F(HostileControlTest, AnotherIncarnationReplacesADecodeOnlyByProvingItListensThere) {
  const std::vector<int64_t> src{1, 2}, dst{4, 8};
  ASSERT_NO_FATAL_FAILURE(pair_.open(68, src, dst));
  const std::string decode_endpoint = pair_.decode().control_endpoint();
  proto::BufferRegistration reg =
      registration_as_decode(decode_endpoint, "tcp://127.0.0.1:9", 0xbad);
  ASSERT_TRUE(stranger_->send(pair_.prefill().control_endpoint(), reg).ok());
  // Without the challenge (sent to the real decode, which ignores an answer to another
  // incarnation) its pre-allocation is dropped and the decode's room goes on.
  proto::PreAllocation pre;
  pre.room = 69;
  pre.decode = reg.decode;
  pre.dst_kv_pages = {0};
  pre.ticket = 5;
  for (uint64_t guess : {uint64_t{0}, uint64_t{1}}) {
    pre.registration_challenge = guess;
    ASSERT_TRUE(stranger_->send(pair_.prefill().control_endpoint(), pre).ok());
  }
  KVSender other(pair_.prefill(), 69);
  ASSERT_TRUE(other.init(1, 0).ok());
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(other.poll(), RoomState::kBootstrapping) << other.failure().to_string();
  ASSERT_NO_FATAL_FAILURE(expect_room_unharmed());

  // The decode goes away and a process listens at its endpoint: it reads the answer to
  // its registration and proves itself with the challenge.
  pair_.end_receiver();
  pair_.decode().shutdown();
  zmq::context_t ctx;
  zmq::socket_t listener(ctx, zmq::socket_type::pull);
  listener.set(zmq::sockopt::rcvtimeo, 5000);
  ASSERT_TRUE(eventually([&] {
    try {
      listener.bind(decode_endpoint);
      return true;
    } catch (const zmq::error_t&) {
      return false;  // the decode's socket is still closing
    }
  }));
  std::optional<proto::RegistrationResult> answer = register_and_read_answer(reg, listener);
  ASSERT_TRUE(answer.has_value()) << "no answer reached the decode's endpoint";
  ASSERT_TRUE(answer->accepted) << answer->reason;
  EXPECT_EQ(answer->decode_incarnation, 0xbadu);
  ASSERT_NE(answer->challenge, 0u);
  pre.registration_challenge = answer->challenge;
  ASSERT_TRUE(stranger_->send(pair_.prefill().control_endpoint(), pre).ok());
  EXPECT_TRUE(eventually([&] { return other.poll() == RoomState::kWaitingForInput; }))
      << other.failure().to_string();
}

// The KV theft a hostile decode showed, sent the way a decode now sends its head fragments:
// once, in its registration, for all its rooms. A "fragment" with source stride 0 spanning
// a whole buffer would read every request's KV; the prefill refuses the registration and
// says why, so no room of it ever names that list.
TEST_F(HostileControlTest, RegisteredFragmentsReadingPastOnePageAreRefusedWithTheReason) {
  const std::vector<int64_t> src{3, 5}, dst{6, 7};
  ASSERT_NO_FATAL_FAILURE(pair_.open(70, src, dst));
  zmq::context_t ctx;
  zmq::socket_t listener = stranger_listener(ctx);
  proto::BufferRegistration reg =
      registration_as_decode(listener.get(zmq::sockopt::last_endpoint), "tcp://127.0.0.1:9", 0x7e);
  proto::Fragment whole;
  whole.buffer_kind = proto::BufferKind::kTargetK;
  whole.buffer_index = 0;
  whole.src_page_stride_bytes = 0;
  whole.bytes_per_page = pair_.prefill_buffers().args(0).kv_data_lens[0];
  whole.dst_page_stride_bytes = whole.bytes_per_page;
  reg.fragments = {whole};
  std::optional<proto::RegistrationResult> answer = register_and_read_answer(reg, listener);
  ASSERT_TRUE(answer.has_value()) << "the registration was never answered";
  EXPECT_FALSE(answer->accepted);
  EXPECT_EQ(answer->challenge, 0u);  // nothing to pre-allocate with
  EXPECT_NE(answer->reason.find("does not stay inside one page"), std::string::npos)
      << answer->reason;
  ASSERT_NO_FATAL_FAILURE(expect_room_unharmed());
}

// A stranger registers its own control endpoint with the victim decode's ENGINE endpoint
// and pre-allocates a room of its own there: the prefill's writes for that room go to the
// victim's engine, which refuses them (no grant of the victim's names them). A refusal is
// the decode's answer about those blocks, not its absence: it fails the stranger's room
// and leaves the victim's engine endpoint usable, so the victim's own room still succeeds.
TEST_F(HostileControlTest, WritesTheVictimsEngineRefusesFailOnlyTheirOwnRoom) {
  const std::vector<int64_t> src{2, 6}, dst{9, 12};
  ASSERT_NO_FATAL_FAILURE(pair_.open(71, src, dst));
  zmq::context_t ctx;
  zmq::socket_t listener = stranger_listener(ctx);
  proto::BufferRegistration reg = registration_as_decode(listener.get(zmq::sockopt::last_endpoint),
                                                         pair_.decode().engine_endpoint(), 0x7f);
  std::optional<proto::RegistrationResult> answer = register_and_read_answer(reg, listener);
  ASSERT_TRUE(answer.has_value()) << "the registration was never answered";
  ASSERT_TRUE(answer->accepted) << answer->reason;

  KVSender theirs(pair_.prefill(), 72);
  ASSERT_TRUE(theirs.init(static_cast<int64_t>(src.size()), 0).ok());
  proto::PreAllocation pre;
  pre.room = 72;
  pre.decode = reg.decode;
  pre.dst_kv_pages = {0, 1};
  pre.ticket = 5;
  pre.write_grant = 0x5eedf00d;
  pre.registration_challenge = answer->challenge;
  ASSERT_TRUE(stranger_->send(pair_.prefill().control_endpoint(), pre).ok());
  ASSERT_TRUE(eventually([&] { return theirs.poll() == RoomState::kWaitingForInput; }))
      << theirs.failure().to_string();
  ASSERT_TRUE(theirs.send(src).ok());
  ASSERT_TRUE(eventually([&] { return theirs.poll() == RoomState::kFailed; }));
  EXPECT_EQ(theirs.status().failure_cause, FailureCause::kOutOfRange)
      << theirs.failure().to_string();
  // At once: a breaker opened by the refusal would refuse this room for a second.
  ASSERT_NO_FATAL_FAILURE(pair_.finish_and_check());
}

}  // namespace
}  // namespace pdkv::kv::testing
