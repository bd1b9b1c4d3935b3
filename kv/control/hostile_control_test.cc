// A stranger on the control plane, without a cluster secret (nothing authenticates a
// message's sender field then): the managers run over real ZeroMQ sockets on loopback and
// the stranger sends forged messages from its own real socket. Whatever it sends, the
// legitimate room succeeds with its own bytes and the victims open no socket for it.
#include <dirent.h>
#include <gtest/gtest.h>

#include <future>
#include <iterator>
#include <optional>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "engine/transfer_engine.h"
#include "kv/control/zmq_control_channel.h"
#include "kv/kv_sender.h"
#include "kv/pipeline/status_note.h"
#include "kv/testing/room_pair.h"
#include "proto/codec.h"

// In kv::testing, whose helpers (room_pair.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

using std::chrono::milliseconds;

int open_descriptors() {
  int n = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n;
}

class HostileControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(pair_.ok());
    auto stranger = zmq_channel_factory()("127.0.0.1", ChannelCallbacks{[](proto::Message) {}, {}});
    ASSERT_TRUE(stranger.ok()) << stranger.status().to_string();
    stranger_ = std::move(stranger).value();
  }
  void TearDown() override {
    if (stranger_) stranger_->stop();
  }

  static testing::RoomPairOptions pair_options() {
    testing::RoomPairOptions o;
    o.channels = testing::Channels::kZmq;
    o.num_pages = 32;
    return o;
  }

  // Sends `reg` to the prefill (again, up to 20 times) until its RegistrationResult
  // reaches `listener`, the endpoint the registration names; nullopt if none did.
  std::optional<proto::RegistrationResult> register_and_read_answer(
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

  // A registration in the decode's name: its layout and buffers, with these endpoints
  // and incarnation (what a stranger who read them off the network can send).
  proto::BufferRegistration registration_as_decode(const std::string& control_endpoint,
                                                   const std::string& engine_endpoint,
                                                   uint64_t incarnation) {
    const KvArgs a = pair_.decode_buffers().args(0);
    proto::BufferRegistration reg;
    reg.decode.control_endpoint = control_endpoint;
    reg.decode.engine_endpoint = engine_endpoint;
    reg.decode.incarnation = incarnation;
    reg.layout = a.layout();
    reg.kv = {a.kv_data_ptrs, a.kv_data_lens, a.kv_item_lens};
    return reg;
  }

  // The stranger's own control socket on an ephemeral port, where the prefill answers
  // the registrations that name it.
  static zmq::socket_t stranger_listener(zmq::context_t& ctx) {
    zmq::socket_t listener(ctx, zmq::socket_type::pull);
    listener.set(zmq::sockopt::rcvtimeo, 500);
    listener.bind("tcp://127.0.0.1:*");
    return listener;
  }

  testing::RoomPair pair_{pair_options()};
  std::unique_ptr<ControlChannel> stranger_;
};

TEST_F(HostileControlTest, ForgedPongsClaimingAPrefillRestartFailNoRoom) {
  const std::vector<int64_t> src{3, 9, 4}, dst{7, 1, 20};
  ASSERT_NO_FATAL_FAILURE(pair_.open(61, src, dst));
  // Let the decode hear the real prefill's Pongs first: it knows its incarnation now, so
  // a Pong naming the same endpoint with another incarnation reads as a restart.
  std::this_thread::sleep_for(4 * testing::fast_options().heartbeat_interval);
  proto::Pong forged;
  forged.sender.control_endpoint = pair_.prefill().control_endpoint();
  forged.sender.engine_rank = 0;
  forged.sender.incarnation = 0x5eed;
  for (uint64_t seq = 0; seq < 64; ++seq) {
    forged.seq = seq < 32 ? seq : seq * 0x9e3779b97f4a7c15ull;  // small and scattered guesses
    ASSERT_TRUE(stranger_->send(pair_.decode().control_endpoint(), forged).ok());
  }
  std::this_thread::sleep_for(4 * testing::fast_options().heartbeat_interval);
  EXPECT_EQ(pair_.receiver().poll(), RoomState::kWaitingForInput)
      << pair_.receiver().failure().to_string();
  ASSERT_NO_FATAL_FAILURE(pair_.finish_and_check());
}

TEST_F(HostileControlTest, PingsFromStrangersGetNoAnswerAndNoSocket) {
  const std::vector<int64_t> src{1, 2}, dst{30, 31};
  ASSERT_NO_FATAL_FAILURE(pair_.open(62, src, dst));
  const int before = open_descriptors();
  proto::Ping ping;
  ping.sender.engine_rank = 0;
  ping.sender.incarnation = 1;
  for (int i = 0; i < 200; ++i) {
    // Reply addresses nobody listens on: answering would open a socket each, and a send
    // towards each could stall the victim's receive thread.
    ping.sender.control_endpoint = "tcp://127.0.0.1:" + std::to_string(1 + i);
    ping.seq = static_cast<uint64_t>(i);
    ASSERT_TRUE(stranger_->send(pair_.decode().control_endpoint(), ping).ok());
    ASSERT_TRUE(stranger_->send(pair_.prefill().control_endpoint(), ping).ok());
  }
  // The stranger's own channel holds sockets to the two victims only.
  std::this_thread::sleep_for(milliseconds(1000));
  EXPECT_LT(open_descriptors() - before, 40) << "the victims opened sockets for strangers";
  ASSERT_NO_FATAL_FAILURE(pair_.finish_and_check());
}

TEST_F(HostileControlTest, AbortsFromRanksThatDoNotServeTheRoomAreDropped) {
  const std::vector<int64_t> src{5, 6, 7}, dst{10, 11, 12};
  ASSERT_NO_FATAL_FAILURE(pair_.open(63, src, dst));
  proto::Abort abort;
  abort.room = 63;
  abort.reason = "forged";
  abort.cause = static_cast<uint8_t>(FailureCause::kAbortedLocally);
  // As itself (a rank that never registered) and under a made-up rank's name.
  for (const std::string& name : {stranger_->endpoint(), std::string("tcp://127.0.0.1:9")}) {
    abort.sender.control_endpoint = name;
    abort.sender.incarnation = 77;
    ASSERT_TRUE(stranger_->send(pair_.decode().control_endpoint(), abort).ok());
    ASSERT_TRUE(stranger_->send(pair_.prefill().control_endpoint(), abort).ok());
  }
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(pair_.receiver().poll(), RoomState::kWaitingForInput)
      << pair_.receiver().failure().to_string();
  EXPECT_EQ(pair_.sender().poll(), RoomState::kWaitingForInput)
      << pair_.sender().failure().to_string();
  ASSERT_NO_FATAL_FAILURE(pair_.finish_and_check());
}

// A TransferStatus names its room and the prefill's TP rank, both easy to learn; an
// Abort names the prefill's (public) endpoint. Neither counts without the room's ticket,
// which only the ranks its pre-allocation reached know.
TEST_F(HostileControlTest, StatusesAndAbortsWithoutTheRoomTicketAreDropped) {
  const std::vector<int64_t> src{2, 4, 6}, dst{9, 3, 5};
  ASSERT_NO_FATAL_FAILURE(pair_.open(66, src, dst));
  proto::TransferStatus status;
  status.room = 66;
  status.prefill_attn_tp_rank = 0;  // the room's real target
  status.bootstrap_token = 666;
  for (uint64_t ticket : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}}) {
    status.ticket = ticket;
    status.state = proto::TransferState::kSuccess;
    ASSERT_TRUE(stranger_->send(pair_.decode().control_endpoint(), status).ok());
    status.state = proto::TransferState::kFailed;
    status.failure_reason = "forged";
    ASSERT_TRUE(stranger_->send(pair_.decode().control_endpoint(), status).ok());
  }
  proto::Abort abort;
  abort.room = 66;
  abort.sender.control_endpoint = pair_.prefill().control_endpoint();
  abort.reason = "forged";
  abort.ticket = 12345;
  ASSERT_TRUE(stranger_->send(pair_.decode().control_endpoint(), abort).ok());
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(pair_.receiver().poll(), RoomState::kWaitingForInput)
      << pair_.receiver().failure().to_string();
  ASSERT_NO_FATAL_FAILURE(pair_.finish_and_check());
  // The token is the real prefill's (none was published), not the forger's 666.
  EXPECT_NE(pair_.receiver().bootstrap_token(), 666);
}

// A Success status can also ride a data batch as its note (kv/pipeline/status_note.h). A stranger
// that reaches the decode's transfer engine but holds none of the room's write grant
// writes nothing there, and its note is never handed over: the part is refused before a
// byte lands, whatever the note claims (tickets guessed or not). The room still succeeds
// with the real prefill's bytes.
TEST_F(HostileControlTest, BatchNotesFromAStrangerWithoutTheRoomsGrantAreNeverHandled) {
  const std::vector<int64_t> src{1, 3}, dst{7, 2};
  ASSERT_NO_FATAL_FAILURE(pair_.open(67, src, dst));
  auto stranger = engine::TransferEngine::create(engine::EngineOptions{});
  ASSERT_TRUE(stranger.ok()) << stranger.status().to_string();
  auto session = (*stranger)->open_session(pair_.decode().engine_endpoint());
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  std::string note;
  proto::TransferStatus status;
  status.room = 67;
  status.state = proto::TransferState::kSuccess;
  status.prefill_attn_tp_rank = 0;  // the room's real target
  status.bootstrap_token = 667;
  for (uint64_t ticket : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}}) {
    status.ticket = ticket;
    ASSERT_TRUE(append_status(&note, status));
  }
  // Bytes aimed at the room's first destination page, under grants it does not hold.
  const KvArgs args = pair_.decode_buffers().args(0);
  std::vector<uint8_t> junk(64, 0xee);
  const uint64_t target =
      args.kv_data_ptrs[0] + static_cast<uint64_t>(dst[0]) * args.kv_item_lens[0];
  for (uint64_t grant : {uint64_t{0}, uint64_t{0x5eed}}) {
    engine::WriteBlock block{reinterpret_cast<uint64_t>(junk.data()), target, junk.size(), grant};
    std::promise<Status> done;
    ASSERT_TRUE((*stranger)
                    ->submit_async(*session, std::span(&block, 1),
                                   [&](Status st) { done.set_value(std::move(st)); },
                                   {reinterpret_cast<const uint8_t*>(note.data()), note.size()})
                    .ok());
    auto fut = done.get_future();
    ASSERT_EQ(fut.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    EXPECT_EQ(fut.get().code(), StatusCode::kOutOfRange);
  }
  EXPECT_EQ(pair_.decode().metrics().statuses_in_band, 0u);
  EXPECT_EQ(pair_.receiver().poll(), RoomState::kWaitingForInput)
      << pair_.receiver().failure().to_string();
  ASSERT_NO_FATAL_FAILURE(pair_.finish_and_check());
  EXPECT_NE(pair_.receiver().bootstrap_token(), 667);
}

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
  EXPECT_EQ(pair_.sender().poll(), RoomState::kWaitingForInput)
      << pair_.sender().failure().to_string();
  EXPECT_EQ(other.poll(), RoomState::kBootstrapping) << other.failure().to_string();
  ASSERT_NO_FATAL_FAILURE(pair_.finish_and_check());

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
  ASSERT_NO_FATAL_FAILURE(pair_.finish_and_check());
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

TEST_F(HostileControlTest, PreAllocationsFromUnregisteredRanksTouchNoRoom) {
  const std::vector<int64_t> src{8, 9}, dst{2, 3};
  ASSERT_NO_FATAL_FAILURE(pair_.open(64, src, dst));
  proto::PreAllocation pre;
  pre.room = 64;
  pre.dst_kv_pages = {0, 1};  // another request's pages, were it accepted
  for (const std::string& name : {stranger_->endpoint(), pair_.decode().control_endpoint()}) {
    // As itself, then as the real decode with another incarnation.
    pre.decode.control_endpoint = name;
    pre.decode.incarnation = 0xbad;
    ASSERT_TRUE(stranger_->send(pair_.prefill().control_endpoint(), pre).ok());
  }
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(pair_.sender().poll(), RoomState::kWaitingForInput)
      << pair_.sender().failure().to_string();
  ASSERT_NO_FATAL_FAILURE(pair_.finish_and_check());
}

// Bounded resources (docs/SECURITY.md): what decodes alone can make a prefill rank hold.
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
