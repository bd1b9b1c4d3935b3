// A stranger on the control plane, without a cluster secret (nothing authenticates a
// message's sender field then): the managers run over real ZeroMQ sockets on loopback and
// the stranger sends forged Pongs, Pings, Aborts, statuses (on the control channel and as a
// data batch's note) and pre-allocations from its own real socket. Whatever it sends, the
// legitimate room succeeds with its own bytes and the victims open no socket for it.
// Registrations in another's name are in hostile_registration_test.cc.
#include <dirent.h>
#include <gtest/gtest.h>

#include <future>
#include <span>
#include <string>
#include <thread>

#include "engine/transfer_engine.h"
#include "kv/kv_sender.h"
#include "kv/pipeline/status_note.h"
#include "kv/testing/hostile_control_fixture.h"

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
  ASSERT_NO_FATAL_FAILURE(expect_room_unharmed());
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
  ASSERT_NO_FATAL_FAILURE(expect_room_unharmed());
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
  ASSERT_NO_FATAL_FAILURE(expect_room_unharmed());
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
  ASSERT_NO_FATAL_FAILURE(expect_room_unharmed());
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
  ASSERT_NO_FATAL_FAILURE(expect_room_unharmed());
  EXPECT_NE(pair_.receiver().bootstrap_token(), 667);
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
  ASSERT_NO_FATAL_FAILURE(expect_room_unharmed());
}

}  // namespace
}  // namespace pdkv::kv::testing
