// The lease channel's membership check (lease_auth.h) between a LeaseServer and
// LeaseClients in one process: members are served; a sender or a receiver without the
// secret, or with another, is Unauthenticated naming the mismatch and gets no hello ack,
// lease or region table; strangers (garbage, skipped handshake, a replayed transcript, a
// huge frame, silence) are closed within the handshake's step timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <vector>

#include "engine/lease/lease_client.h"
#include "engine/lease/lease_server.h"
#include "engine/lease/messages.h"
#include "engine/lease/testing/lease_stranger.h"
#include "engine/lease/testing/test_lease_server.h"
#include "engine/memory_registry.h"
#include "engine/session_auth.h"

namespace pdkv::engine::lease {
namespace {

using std::chrono::milliseconds;
using testing::Answer;

std::shared_ptr<const ClusterKey> key_of(uint8_t fill) {
  auto key = ClusterKey::from_secret(std::vector<uint8_t>(32, fill));
  EXPECT_TRUE(key.ok());
  return *key;
}

constexpr uint64_t kRegion = testing::kTestRegion;

// A LeaseServer for "shm" over a registered range, with or without a secret.
class Server : public testing::TestLeaseServer {
 public:
  explicit Server(std::shared_ptr<const ClusterKey> key, int handshake_timeout_ms = 2000)
      : TestLeaseServer(std::move(key), handshake_timeout_ms) {
    EXPECT_TRUE(status().ok()) << status().to_string();
  }
};

bool names_the_mismatch(const Status& st) {
  return st.message().find(kSecretMismatchHint) != std::string::npos;
}

TEST(LeaseAuth, MembersAreServed) {
  auto key = key_of(1);
  Server server(key);
  LeaseClient client;
  Status st = client.connect(server.endpoint(), "shm", 2000, key.get());
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(client.hello().extra, "extra");
  const uint64_t range[] = {kRegion, 4096, 0};
  auto grant = client.lease(1, range, now() + Millis(2000));
  ASSERT_TRUE(grant.ok()) << grant.status().to_string();
  EXPECT_TRUE(grant->ok);
  EXPECT_TRUE(client.done(1, now() + Millis(2000)).ok());
}

TEST(LeaseAuth, ASenderWithoutTheSecretOrWithAnotherIsRefused) {
  Server server(key_of(1));
  for (auto sender_key : {std::shared_ptr<const ClusterKey>(), key_of(2)}) {
    LeaseClient client;
    Status st = client.connect(server.endpoint(), "shm", 2000, sender_key.get());
    EXPECT_EQ(st.code(), StatusCode::kUnauthenticated) << st.to_string();
    EXPECT_TRUE(names_the_mismatch(st)) << st.to_string();
    EXPECT_TRUE(client.hello().extra.empty());  // no hello ack was accepted
  }
}

TEST(LeaseAuth, AMemberRefusesAReceiverWithoutTheSecretOrWithAnother) {
  for (auto receiver_key : {std::shared_ptr<const ClusterKey>(), key_of(2)}) {
    Server server(receiver_key);
    LeaseClient client;
    Status st = client.connect(server.endpoint(), "shm", 2000, key_of(1).get());
    EXPECT_EQ(st.code(), StatusCode::kUnauthenticated) << st.to_string();
    EXPECT_TRUE(names_the_mismatch(st)) << st.to_string();
  }
}

TEST(LeaseAuth, StrangersAreClosedWithoutAHelloAckLeaseOrRegions) {
  auto key = key_of(1);
  Server server(key);
  const auto requests = testing::hello_and_requests("shm", kRegion, 4096);

  std::vector<uint8_t> garbage(4096);
  std::mt19937 rng(5);
  for (auto& b : garbage) b = static_cast<uint8_t>(rng());
  Answer a = testing::send_raw(server.endpoint(), garbage, milliseconds(3000));
  EXPECT_TRUE(a.closed);
  EXPECT_FALSE(a.any_write_material());

  // The plain protocol of a keyless sender: refused with a reason, then closed.
  Answer skip =
      testing::send_raw(server.endpoint(), testing::encode_frames(requests), milliseconds(3000));
  EXPECT_TRUE(skip.closed);
  EXPECT_FALSE(skip.any_write_material());

  // A member's handshake recorded, then replayed with the requests behind it.
  auto recorded = testing::record_member_handshake(server.endpoint(), *key);
  ASSERT_TRUE(recorded.ok()) << recorded.status().to_string();
  std::vector<testing::Frame> replay = *recorded;
  replay.insert(replay.end(), requests.begin(), requests.end());
  Answer r =
      testing::send_raw(server.endpoint(), testing::encode_frames(replay), milliseconds(3000));
  EXPECT_TRUE(r.closed);
  EXPECT_FALSE(r.any_write_material());

  // A header declaring a huge first frame: refused before anything is allocated.
  std::vector<uint8_t> huge(kFrameHeaderBytes);
  encode_frame_header(MsgType::kAuthHello, kMaxPayloadBytes, huge.data());
  Answer h = testing::send_raw(server.endpoint(), huge, milliseconds(3000));
  EXPECT_TRUE(h.closed);
  EXPECT_FALSE(h.any_write_material());

  // The server still serves members.
  LeaseClient client;
  EXPECT_TRUE(client.connect(server.endpoint(), "shm", 2000, key.get()).ok());
}

TEST(LeaseAuth, ASilentStrangerIsClosedAfterTheStepTimeout) {
  for (auto key : {key_of(1), std::shared_ptr<const ClusterKey>()}) {
    Server server(key, /*handshake_timeout_ms=*/200);
    auto t0 = std::chrono::steady_clock::now();
    Answer a = testing::send_raw(server.endpoint(), {}, milliseconds(3000));
    EXPECT_TRUE(a.closed) << (key ? "with" : "without") << " a secret";
    EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(2000));
  }
}

}  // namespace
}  // namespace pdkv::engine::lease
