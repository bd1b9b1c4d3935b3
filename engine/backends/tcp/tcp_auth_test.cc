// The TCP data plane's session handshake (tcp_auth.h), between real engines over loopback
// sockets: members move bytes; strangers, wrong secrets and half-configured pairs move none.
#include "engine/backends/tcp/tcp_auth.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "engine/backends/tcp/socket_util.h"
#include "engine/backends/tcp/tcp_frame.h"
#include "engine/testing/guarded_buffer.h"
#include "engine/transfer_engine.h"

namespace pdkv::engine {
namespace {

using std::chrono::seconds;

std::shared_ptr<const ClusterKey> key_of(uint8_t fill) {
  std::vector<uint8_t> secret(32, fill);
  auto key = ClusterKey::from_secret(secret);
  EXPECT_TRUE(key.ok());
  return *key;
}

std::unique_ptr<TransferEngine> make_engine(std::shared_ptr<const ClusterKey> key,
                                            int io_timeout_ms = 5000) {
  EngineOptions o;
  o.tcp.streams = 2;
  o.tcp.io_timeout_ms = io_timeout_ms;
  o.connect_timeout_ms = 2000;
  o.cluster_key = std::move(key);
  auto e = TransferEngine::create(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return std::move(e).value();
}

uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// Pushes `src` into `dst` through a fresh session; the session's status, or the batch's.
Status push(TransferEngine& sender, TransferEngine& receiver, const std::vector<uint8_t>& src,
            std::vector<uint8_t>& dst) {
  PDKV_RETURN_IF_ERROR(receiver.register_memory(addr(dst.data()), dst.size()));
  auto session = sender.open_session(receiver.endpoint());
  if (!session.ok()) return session.status();
  WriteBlock block{addr(src.data()), addr(dst.data()), src.size()};
  auto batch = sender.submit(*session, std::span(&block, 1));
  if (!batch.ok()) return batch.status();
  auto st = sender.wait(*batch, seconds(30));
  if (!st.ok()) return st.status();
  return st->state == BatchState::kSucceeded ? Status() : st->error;
}

bool all_zero(const std::vector<uint8_t>& v) {
  return std::all_of(v.begin(), v.end(), [](uint8_t b) { return b == 0; });
}

TEST(TcpAuth, MembersWithTheSameSecretMoveBytes) {
  auto key = key_of(1);
  auto sender = make_engine(key), receiver = make_engine(key);
  std::vector<uint8_t> src(1 << 20), dst(1 << 20, 0);
  testing::fill_pattern(src.data(), src.size(), 3);
  Status st = push(*sender, *receiver, src, dst);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(src, dst);
}

TEST(TcpAuth, AnotherSecretIsRefusedBeforeAnyByteMoves) {
  auto sender = make_engine(key_of(1)), receiver = make_engine(key_of(2));
  std::vector<uint8_t> src(64 << 10, 7), dst(64 << 10, 0);
  Status st = push(*sender, *receiver, src, dst);
  EXPECT_EQ(st.code(), StatusCode::kUnauthenticated) << st.to_string();
  EXPECT_NE(st.message().find("does not hold this cluster's secret"), std::string::npos)
      << st.to_string();
  EXPECT_TRUE(all_zero(dst));
}

TEST(TcpAuth, AKeylessSenderWritesNothingIntoAMember) {
  auto sender = make_engine(nullptr), receiver = make_engine(key_of(1));
  std::vector<uint8_t> src(64 << 10, 7), dst(64 << 10, 0);
  Status st = push(*sender, *receiver, src, dst);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(all_zero(dst));
}

TEST(TcpAuth, AMemberSendsNothingToAKeylessReceiver) {
  // A stranger posing as a decode (no secret) must not be handed KV bytes.
  auto sender = make_engine(key_of(1)), receiver = make_engine(nullptr);
  std::vector<uint8_t> src(64 << 10, 7), dst(64 << 10, 0);
  Status st = push(*sender, *receiver, src, dst);
  EXPECT_EQ(st.code(), StatusCode::kUnauthenticated) << st.to_string();
  EXPECT_TRUE(all_zero(dst));
}

// Reads until EOF or `timeout`; true on EOF/reset (the receiver closed the connection).
bool closed_within(int fd, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  uint8_t buf[256];
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;
  }
  return false;
}

TEST(TcpAuth, ARawPartFromAStrangerIsDroppedUnread) {
  auto receiver = make_engine(key_of(1));
  std::vector<uint8_t> dst(4096, 0);
  ASSERT_TRUE(receiver->register_memory(addr(dst.data()), dst.size()).ok());
  auto fd = tcp::connect_tcp(receiver->endpoint(), 2000);
  ASSERT_TRUE(fd.ok());
  // A well-formed PART into registered memory, without the handshake.
  std::vector<uint8_t> frame(tcp::kHeaderSize + tcp::kEntrySize + 4096, 0xAB);
  tcp::FrameHeader h;
  h.type = tcp::FrameType::kPart;
  h.count = 1;
  h.payload_bytes = 4096;
  tcp::encode_header(h, frame.data());
  tcp::encode_entry({addr(dst.data()), 4096, 1, 0}, frame.data() + tcp::kHeaderSize);
  ASSERT_TRUE(tcp::write_full(fd->get(), frame.data(), frame.size(), -1, 2000).ok());
  EXPECT_TRUE(closed_within(fd->get(), std::chrono::milliseconds(3000)));
  EXPECT_TRUE(all_zero(dst));
}

TEST(TcpAuth, ASilentConnectionIsClosedAfterTheFirstByteDeadline) {
  for (auto key : {key_of(1), std::shared_ptr<const ClusterKey>()}) {
    auto receiver = make_engine(key, /*io_timeout_ms=*/200);
    auto fd = tcp::connect_tcp(receiver->endpoint(), 2000);
    ASSERT_TRUE(fd.ok());
    EXPECT_TRUE(closed_within(fd->get(), std::chrono::milliseconds(3000)))
        << (key ? "with" : "without") << " a secret";
  }
}

TEST(TcpReceiverLimits, ConnectionsBeyondTheLimitAreClosedAtOnce) {
  EngineOptions o;
  o.tcp.max_connections = 1;
  o.tcp.io_timeout_ms = 10000;
  auto receiver = TransferEngine::create(o);
  ASSERT_TRUE(receiver.ok());
  auto first = tcp::connect_tcp((*receiver)->endpoint(), 2000);
  ASSERT_TRUE(first.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // accepted, being served
  auto second = tcp::connect_tcp((*receiver)->endpoint(), 2000);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(closed_within(second->get(), std::chrono::milliseconds(2000)));
  EXPECT_FALSE(closed_within(first->get(), std::chrono::milliseconds(200)));
}

}  // namespace
}  // namespace pdkv::engine
