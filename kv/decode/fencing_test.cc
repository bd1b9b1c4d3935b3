// Fencing (docs/SECURITY.md): a decode's engine admits a room's bytes only under the room's write
// grant, which it revokes when the room ends. Here a stale prefill (this test, with its
// own real ZeroMQ socket and its own TCP engine, registered in the route directory as a
// prefill instance) takes a room, writes part of it, and keeps writing after the decode
// aborted the room and reused its pages for a new room served by a real prefill: every
// late write is refused, and the new room's pages hold exactly the new room's bytes.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <deque>
#include <optional>
#include <thread>

#include "common/mutex.h"
#include "common/unique_fd.h"
#include "engine/backends/tcp/socket_util.h"
#include "engine/backends/tcp/tcp_frame.h"
#include "engine/transfer_engine.h"
#include "kv/kv_sender.h"
#include "kv/testing/environment_channels.h"
#include "kv/testing/room_pair.h"

namespace pdkv::kv {
namespace {

using testing::eventually;
using testing::RankBuffers;

constexpr char kAddr[] = "real-prefill:8998";
constexpr char kStaleAddr[] = "stale-prefill:8998";

// What the stale prefill's control socket received, in order.
class Inbox {
 public:
  void push(proto::Message m) {
    MutexLock lock(mu_);
    messages_.push_back(std::move(m));
  }
  template <typename T>
  std::optional<T> take() {
    std::optional<T> found;
    eventually([&] {
      MutexLock lock(mu_);
      for (auto it = messages_.begin(); it != messages_.end(); ++it) {
        if (auto* m = std::get_if<T>(&*it)) {
          found = *m;
          messages_.erase(it);
          return true;
        }
      }
      return false;
    });
    return found;
  }

 private:
  Mutex mu_;
  std::deque<proto::Message> messages_ PDKV_GUARDED_BY(mu_);
};

class FencingTest : public ::testing::Test {
 protected:
  FencingTest() = default;
  explicit FencingTest(const testing::RoomPairOptions& options) : pair_(options) {}

  void SetUp() override {
    ASSERT_TRUE(pair_.ok());
    auto stale = testing::zmq_channels_from_environment()(
        "127.0.0.1", ChannelCallbacks{[this](proto::Message m) { inbox_.push(std::move(m)); }, {}});
    ASSERT_TRUE(stale.ok()) << stale.status().to_string();
    stale_ = std::move(stale).value();
    auto engine = engine::TransferEngine::create(testing::loopback_engine());
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    stale_engine_ = std::move(engine).value();
    // The stale prefill announces itself as an instance of the same layout.
    const KvArgs args = pbuf_.args(0);
    PrefillRankInfo info;
    info.control_endpoint = stale_->endpoint();
    info.layout = args.layout();
    info.kv_item_lens = args.kv_item_lens;
    info.state_item_lens = args.state_item_lens;
    ASSERT_TRUE(pair_.maker()
                    .directory()
                    .register_prefill_rank(kStaleAddr, info, now() + std::chrono::seconds(5))
                    .ok());
  }
  void TearDown() override {
    if (stale_) stale_->stop();
  }

  // The stale prefill answers the decode's registration and waits for the room's
  // pre-allocation, as a prefill rank does.
  proto::PreAllocation take_room_as_stale_prefill() {
    auto reg = inbox_.take<proto::BufferRegistration>();
    EXPECT_TRUE(reg.has_value()) << "the decode never registered with the stale prefill";
    if (!reg) return {};
    proto::RegistrationResult accepted;
    accepted.prefill.role = proto::Role::kPrefill;
    accepted.prefill.control_endpoint = stale_->endpoint();
    accepted.prefill.engine_endpoint = stale_engine_->endpoint();
    accepted.prefill.incarnation = 0x57a1e;
    accepted.decode_incarnation = reg->decode.incarnation;
    accepted.accepted = true;
    EXPECT_TRUE(stale_->send(reg->decode.control_endpoint, accepted).ok());
    auto pre = inbox_.take<proto::PreAllocation>();
    EXPECT_TRUE(pre.has_value()) << "no pre-allocation reached the stale prefill";
    return pre.value_or(proto::PreAllocation{});
  }

  // Writes `value` over every byte of the given decode pages (all buffers) under `grant`.
  Status stale_write(const std::vector<int64_t>& pages, uint64_t grant, uint8_t value) {
    const KvArgs dargs = dbuf_.args(0);
    junk_.assign(dargs.kv_item_lens[0], value);
    std::vector<engine::WriteBlock> blocks;
    for (size_t b = 0; b < dargs.kv_data_ptrs.size(); ++b) {
      for (int64_t page : pages) {
        blocks.push_back(
            {reinterpret_cast<uint64_t>(junk_.data()),
             dargs.kv_data_ptrs[b] + static_cast<uint64_t>(page) * dargs.kv_item_lens[b],
             dargs.kv_item_lens[b], grant});
      }
    }
    auto session = stale_engine_->open_session(pair_.decode().engine_endpoint());
    if (!session.ok()) return session.status();
    Status st = stale_engine_->transfer(*session, blocks);
    (void)stale_engine_->close_session(*session);
    return st;
  }

  bool page_is(int64_t page, uint8_t value) {
    for (auto& buffer : dbuf_.buffers()) {
      const uint64_t item = dbuf_.item_bytes();
      for (uint64_t i = 0; i < item; ++i) {
        if (buffer[static_cast<uint64_t>(page) * item + i] != value) return false;
      }
    }
    return true;
  }

  static testing::RoomPairOptions pair_options() {
    testing::RoomPairOptions o;
    o.bootstrap_addr = kAddr;
    o.channels = testing::Channels::kZmq;
    o.num_pages = 32;
    return o;
  }

  testing::RoomPair pair_{pair_options()};
  RankBuffers& pbuf_ = pair_.prefill_buffers();
  RankBuffers& dbuf_ = pair_.decode_buffers();
  Inbox inbox_;
  std::unique_ptr<ControlChannel> stale_;
  std::unique_ptr<engine::TransferEngine> stale_engine_;
  std::vector<uint8_t> junk_;
};

TEST_F(FencingTest, LateWritesOfAnAbortedRoomAreRefusedAndTheNextRoomKeepsItsBytes) {
  const std::vector<int64_t> dst{7, 8, 9, 10};
  for (int64_t page : dst) {
    for (auto& buffer : dbuf_.buffers()) {
      std::fill_n(buffer.begin() + page * static_cast<int64_t>(dbuf_.item_bytes()),
                  dbuf_.item_bytes(), 0);
    }
  }
  // Room 1 goes to the stale prefill.
  KVReceiver first(pair_.decode(), 1, kStaleAddr);
  ASSERT_TRUE(first.init().ok());
  ASSERT_TRUE(first.send_metadata({dst, 0, {}, 0, std::nullopt}).ok());
  const proto::PreAllocation pre = take_room_as_stale_prefill();
  ASSERT_EQ(pre.room, 1u);
  ASSERT_NE(pre.write_grant, 0u) << "the pre-allocation carries no write grant";
  ASSERT_EQ(pre.dst_kv_pages, dst);

  // While the room is live: its own pages under its grant land; a page it was not given,
  // or its pages without the grant, do not.
  ASSERT_TRUE(stale_write({7, 8}, pre.write_grant, 0xE1).ok());
  EXPECT_TRUE(page_is(7, 0xE1) && page_is(8, 0xE1));
  EXPECT_EQ(stale_write({11}, pre.write_grant, 0xE2).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(stale_write({9}, 0, 0xE3).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(stale_write({9}, pre.write_grant + 1, 0xE4).code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(page_is(9, 0) && page_is(11, 0));

  // The decode aborts the room mid-transfer: the rest of its writes are refused.
  first.abort("the engine preempted the request");
  ASSERT_TRUE(eventually([&] { return first.poll() == RoomState::kFailed; }));
  EXPECT_EQ(stale_write({9, 10}, pre.write_grant, 0xE5).code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(page_is(9, 0) && page_is(10, 0));

  // The same pages go to room 2, served by the real prefill.
  ASSERT_NO_FATAL_FAILURE(pair_.open(2, {3, 1, 4, 5}, dst,
                                     testing::RoomPair::Wait::kForPreAllocation,
                                     /*salt=*/2));
  // A late write before, and one after the new room's bytes landed: both refused.
  EXPECT_EQ(stale_write(dst, pre.write_grant, 0xE6).code(), StatusCode::kOutOfRange);
  ASSERT_NO_FATAL_FAILURE(pair_.finish_and_check());
  EXPECT_EQ(stale_write(dst, pre.write_grant, 0xE7).code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(dbuf_.holds_request(dst, 0, /*salt=*/2)) << "the new room's pages were overwritten";
}

// A writer holding a room's grant that trickles the payload of one part a byte at a time
// (every 100 ms) into a page it may write, over a raw connection to the decode's TCP
// engine (no cluster secret here); `told` turns true once a send fails (the decode closed
// the connection). The part never completes on its own.
class Trickle {
 public:
  Trickle(const std::string& engine_endpoint, uint64_t page_addr, uint64_t page_bytes,
          uint64_t grant) {
    std::string endpoint = engine_endpoint;
    if (endpoint.rfind("tcp://", 0) == 0) endpoint = endpoint.substr(6);
    auto fd = engine::tcp::connect_tcp(endpoint, 2000);
    EXPECT_TRUE(fd.ok()) << fd.status().to_string();
    if (!fd.ok()) return;
    fd_ = std::move(fd).value();
    engine::tcp::WireEntry entry;
    entry.addr = page_addr;
    entry.length = page_bytes;
    entry.grant = grant;
    engine::tcp::FrameHeader header;
    header.type = engine::tcp::FrameType::kPart;
    header.part_id = 1;
    header.count = 1;
    header.payload_bytes = page_bytes;
    std::vector<uint8_t> frame(engine::tcp::kHeaderSize + engine::tcp::kEntrySize);
    engine::tcp::encode_header(header, frame.data());
    engine::tcp::encode_entry(entry, frame.data() + engine::tcp::kHeaderSize);
    EXPECT_TRUE(engine::tcp::write_full(fd_.get(), frame.data(), frame.size(), -1, 2000).ok());
    thread_ = std::thread([this, page_bytes] {
      const uint8_t byte = 0xEE;
      for (uint64_t i = 0; i + 1 < page_bytes && !stop_.load(); ++i) {
        if (::send(fd_.get(), &byte, 1, MSG_NOSIGNAL) != 1) {
          told_ = true;
          return;
        }
        ++sent_;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  ~Trickle() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t sent() const { return sent_.load(); }
  bool told() const { return told_.load(); }

 private:
  UniqueFd fd_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> told_{false};
  std::atomic<uint64_t> sent_{0};
  std::thread thread_;
};

// A room ends at its deadline (or its abort) whatever a writer trickles into it: its end
// used to stay hidden (and its pages held) for as long as the writer went on, since the
// decode waits for the writes admitted under a revoked grant to land. Now the part is cut
// a second after the room ended: the room is Failed, the writer's connection is closed
// (it is told), and a resend under the grant is refused.
void expect_trickle_does_not_keep_the_room(KVReceiver& room, Trickle& trickle,
                                           std::chrono::milliseconds bound) {
  const TimePoint t0 = now();
  const bool ended = eventually([&] { return room.poll() == RoomState::kFailed; }, bound);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(now() - t0);
  EXPECT_TRUE(ended) << "the room stayed non-terminal while bytes trickled in (" << trickle.sent()
                     << " bytes)";
  EXPECT_LT(took.count(), bound.count());
  EXPECT_TRUE(eventually([&] { return trickle.told(); }, std::chrono::milliseconds(5000)))
      << "the writer's connection stayed open";
}

TEST_F(FencingTest, ATrickledPartDoesNotKeepAnAbortedRoomAlive) {
  const std::vector<int64_t> dst{7, 8};
  KVReceiver first(pair_.decode(), 1, kStaleAddr);
  ASSERT_TRUE(first.init().ok());
  ASSERT_TRUE(first.send_metadata({dst, 0, {}, 0, std::nullopt}).ok());
  const proto::PreAllocation pre = take_room_as_stale_prefill();
  ASSERT_NE(pre.write_grant, 0u);
  const KvArgs dargs = dbuf_.args(0);
  Trickle trickle(pair_.decode().engine_endpoint(),
                  dargs.kv_data_ptrs[0] + 7 * dargs.kv_item_lens[0], dargs.kv_item_lens[0],
                  pre.write_grant);
  ASSERT_TRUE(eventually([&] { return trickle.sent() >= 3; }));
  first.abort("the engine preempted the request");
  // The grace of a part under an ended room is 1 s; 5 s leaves room for a loaded CI
  // machine, and is far less than the writer would keep it alive (a byte per 100 ms).
  expect_trickle_does_not_keep_the_room(first, trickle, std::chrono::milliseconds(5000));
  EXPECT_EQ(stale_write({8}, pre.write_grant, 0xE8).code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(page_is(8, 0xE8));
}

// The waiting timeout fires whatever a writer trickles (docs/CONFIG.md says it actually
// fires).
class FencingWaitingTimeoutTest : public FencingTest {
 protected:
  FencingWaitingTimeoutTest() : FencingTest(short_waiting()) {}
  static testing::RoomPairOptions short_waiting() {
    testing::RoomPairOptions o = pair_options();
    o.decode_options.waiting_timeout = std::chrono::milliseconds(1500);
    // The stale prefill answers no ping: liveness (10 s here) must not end the room first.
    o.decode_options.heartbeat_interval = std::chrono::milliseconds(2000);
    o.decode_options.heartbeat_max_failures = 5;
    return o;
  }
};

TEST_F(FencingWaitingTimeoutTest, ATrickledPartDoesNotKeepATimedOutRoomAlive) {
  const std::vector<int64_t> dst{7, 8};
  KVReceiver first(pair_.decode(), 1, kStaleAddr);
  ASSERT_TRUE(first.init().ok());
  ASSERT_TRUE(first.send_metadata({dst, 0, {}, 0, std::nullopt}).ok());
  const proto::PreAllocation pre = take_room_as_stale_prefill();
  ASSERT_NE(pre.write_grant, 0u);
  const KvArgs dargs = dbuf_.args(0);
  Trickle trickle(pair_.decode().engine_endpoint(),
                  dargs.kv_data_ptrs[0] + 7 * dargs.kv_item_lens[0], dargs.kv_item_lens[0],
                  pre.write_grant);
  // The waiting timeout (1.5 s from bootstrapped) + the 1 s grace, with room for a loaded
  // machine; the writer would go on for 25 s.
  expect_trickle_does_not_keep_the_room(first, trickle, std::chrono::milliseconds(7000));
  EXPECT_EQ(first.status().failure_cause, FailureCause::kWaitingTimeout)
      << first.status().failure_reason;
}

TEST_F(FencingTest, APrefillRankAcceptsNoWriteAtAll) {
  // Its KV pool is registered read-only and it never grants: even a write naming nothing
  // into its own buffers is refused.
  const KvArgs pargs = pbuf_.args(0);
  std::vector<uint8_t> junk(pargs.kv_item_lens[0], 0xAB);
  const uint8_t before = pbuf_.buffers()[0][0];
  auto session = stale_engine_->open_session(pair_.prefill().engine_endpoint());
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  std::vector<engine::WriteBlock> blocks = {
      {reinterpret_cast<uint64_t>(junk.data()), pargs.kv_data_ptrs[0], junk.size(), 0}};
  EXPECT_EQ(stale_engine_->transfer(*session, blocks).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(pbuf_.buffers()[0][0], before);
}

}  // namespace
}  // namespace pdkv::kv
