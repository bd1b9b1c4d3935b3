// The lease channel's bounds against a flood of connections (docs/SECURITY.md): a LeaseServer
// serves at most max_connections at once and closes the rest at accept (logged,
// rate-limited); a connection that sends no first frame within the handshake deadline is
// closed and frees its slot; a member is served again as soon as slots free, and a member
// already connected keeps working while strangers are refused.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/log_capture.h"
#include "engine/lease/lease_client.h"
#include "engine/lease/lease_server.h"
#include "engine/lease/testing/test_lease_server.h"

namespace pdkv::engine::lease {
namespace {

constexpr uint64_t kRegion = testing::kTestRegion;

// A real LeaseServer for "shm" over a registered range.
class Server : public testing::TestLeaseServer {
 public:
  Server(int max_connections, int handshake_timeout_ms,
         std::shared_ptr<const ClusterKey> key = nullptr)
      : TestLeaseServer(std::move(key), handshake_timeout_ms, max_connections) {
    EXPECT_TRUE(status().ok()) << status().to_string();
  }
};

// A TCP connection to `endpoint` that never sends a byte.
Socket raw_connection(const std::string& endpoint) {
  Result<Socket> s = connect_to(endpoint, 2000);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : Socket();
}

// True if the peer closed `sock` (EOF or reset) within `timeout`; bytes it sent first
// (with a secret, the server's challenge) are read and dropped.
bool closed_within(const Socket& sock, std::chrono::milliseconds timeout) {
  const TimePoint deadline = now() + timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - now()).count();
    pollfd p{sock.fd(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0))) <= 0) return false;
    char buf[256];
    const ssize_t n = ::recv(sock.fd(), buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
  }
}

// A member's whole cycle: handshake, a lease on registered memory, done.
Status member_round_trip(const std::string& endpoint, LeaseClient& client) {
  PDKV_RETURN_IF_ERROR(client.connect(endpoint, "shm", 2000, nullptr));
  const uint64_t ranges[] = {kRegion, 4096, 0};
  PDKV_ASSIGN_OR_RETURN(Grant grant, client.lease(1, ranges, now() + Millis(3000)));
  if (!grant.ok) return internal_error("lease refused: " + grant.message);
  return client.done(1, now() + Millis(3000));
}

// Retries `member_round_trip` on fresh clients until it succeeds or `timeout` passes: a
// slot frees once the server's thread for a closed connection has ended.
Result<std::unique_ptr<LeaseClient>> member_within(const std::string& endpoint,
                                                   std::chrono::milliseconds timeout) {
  const TimePoint deadline = now() + timeout;
  Status st;
  do {
    auto client = std::make_unique<LeaseClient>();
    st = member_round_trip(endpoint, *client);
    if (st.ok()) return client;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (now() < deadline);
  return st;
}

TEST(LeaseLimits, ConnectionsBeyondTheCapAreClosedAndFreedSlotsServeMembers) {
  constexpr int kCap = 16;
  constexpr int kPerAddress = kCap / 8;  // unproven connections from one address
  constexpr int kExtra = 6;
  log_capture::enable(256, true);
  // A long first-frame deadline: the silent connections keep their slots for the test.
  Server server(kCap, 30000);
  // Everything here comes from 127.0.0.1: its silent connections may hold kPerAddress
  // slots (engine/connection_slots.h).
  std::vector<Socket> held;
  for (int i = 0; i < kPerAddress; ++i) held.push_back(raw_connection(server.endpoint()));
  // Connected after those, so accepted after them (the accept queue is FIFO).
  std::vector<Socket> extra;
  for (int i = 0; i < kExtra; ++i) extra.push_back(raw_connection(server.endpoint()));
  for (int i = 0; i < kExtra; ++i) {
    EXPECT_TRUE(closed_within(extra[i], std::chrono::milliseconds(5000))) << "extra " << i;
  }
  for (int i = 0; i < kPerAddress; ++i) {
    EXPECT_FALSE(closed_within(held[i], std::chrono::milliseconds(100))) << "held " << i;
  }
  bool logged = false;
  for (const log_capture::Line& line : log_capture::take(std::chrono::milliseconds(1000))) {
    if (line.message.find("refused a control connection from 127.0.0.1") != std::string::npos &&
        line.message.find("awaiting their handshake") != std::string::npos) {
      logged = true;
    }
  }
  EXPECT_TRUE(logged);

  // A member on the strangers' address is refused too (closed before any hello ack).
  LeaseClient refused;
  EXPECT_FALSE(refused.connect(server.endpoint(), "shm", 2000, nullptr).ok());

  // The strangers leave: members fill every slot (each proven before the next connects),
  // and the cap holds for one more.
  held.clear();
  std::vector<std::unique_ptr<LeaseClient>> members;
  for (int i = 0; i < kCap; ++i) {
    auto m = member_within(server.endpoint(), std::chrono::seconds(5));
    ASSERT_TRUE(m.ok()) << i << ": " << m.status().to_string();
    members.push_back(std::move(*m));
  }
  LeaseClient over;
  EXPECT_FALSE(over.connect(server.endpoint(), "shm", 2000, nullptr).ok());
  logged = false;
  for (const log_capture::Line& line : log_capture::take(std::chrono::milliseconds(1000))) {
    if (line.message.find("16 connections already open") != std::string::npos) logged = true;
  }
  log_capture::disable();
  EXPECT_TRUE(logged);
  // The members' connections stay usable.
  const uint64_t ranges[] = {kRegion, 16, 0};
  auto grant = members.front()->lease(2, ranges, now() + Millis(3000));
  ASSERT_TRUE(grant.ok()) << grant.status().to_string();
  EXPECT_TRUE(grant->ok);
  EXPECT_TRUE(members.front()->done(2, now() + Millis(3000)).ok());
}

TEST(LeaseLimits, AConnectedMemberKeepsWorkingWhileStrangersAreRefused) {
  Server server(1, 30000);
  LeaseClient member;
  ASSERT_TRUE(member_round_trip(server.endpoint(), member).ok());
  for (int i = 0; i < 20; ++i) {
    Socket stranger = raw_connection(server.endpoint());
    EXPECT_TRUE(closed_within(stranger, std::chrono::milliseconds(5000))) << i;
  }
  const uint64_t ranges[] = {kRegion, 16, 0};
  auto grant = member.lease(2, ranges, now() + Millis(3000));
  ASSERT_TRUE(grant.ok()) << grant.status().to_string();
  EXPECT_TRUE(grant->ok);
  EXPECT_TRUE(member.done(2, now() + Millis(3000)).ok());
}

class FirstFrameDeadline : public ::testing::TestWithParam<bool> {};

TEST_P(FirstFrameDeadline, ASilentConnectionIsClosedAndFreesItsSlot) {
  std::shared_ptr<const ClusterKey> key;
  if (GetParam()) {
    auto k = ClusterKey::from_secret(std::vector<uint8_t>(32, 7));
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    key = *k;
  }
  constexpr auto kDeadline = std::chrono::milliseconds(300);
  Server server(1, static_cast<int>(kDeadline.count()), key);
  const TimePoint start = now();
  Socket silent = raw_connection(server.endpoint());
  EXPECT_TRUE(closed_within(silent, std::chrono::milliseconds(5000)));
  EXPECT_GE(now() - start, kDeadline - std::chrono::milliseconds(50));
  // The only slot is free again: a member is served.
  const TimePoint until = now() + Millis(5000);
  Status st;
  do {
    LeaseClient member;
    st = member.connect(server.endpoint(), "shm", 2000, key.get());
  } while (!st.ok() && now() < until);
  EXPECT_TRUE(st.ok()) << st.to_string();
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutSecret, FirstFrameDeadline, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Secret" : "NoSecret"; });

}  // namespace
}  // namespace pdkv::engine::lease
