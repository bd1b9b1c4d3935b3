// The cluster secret on every one-sided backend (docs/SECURITY.md: data-plane sessions
// start with a challenge-response handshake before a single byte is accepted), across processes:
// the sender here, each receiver an engine_backend_peer with its own PDKV_SECRET_FILE.
//  * members with the same secret move random blocks exactly, through the public
//    TransferEngine (which refused shm and ucx with a secret before the lease channel
//    authenticated);
//  * a sender without the secret or with another gets no session (Unauthenticated, naming
//    the mismatch) and the receiver's region keeps every byte and canary;
//  * a member refuses a receiver without the secret or with another the same way: a
//    stranger posing as a decode is never written to;
//  * a stranger on the lease port (garbage, the plain protocol, a member's replayed
//    handshake) is closed without a hello ack, a lease or a region table (rkeys).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "engine/conformance/backend_harness.h"
#include "engine/conformance/backend_peer_process.h"
#include "engine/conformance/conformance_data.h"
#include "engine/lease/testing/lease_stranger.h"
#include "engine/session_auth.h"
#include "engine/transfer_engine.h"

namespace pdkv::engine::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class BackendAuthConformance : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new SecretFile(0x5c);
    other_ = new SecretFile(0x0f);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete other_;
  }
  void SetUp() override { apply_transports(GetParam()); }
  std::string backend() const { return backend_of(GetParam()); }

  // A sender backend in this process with `key` (null: none).
  std::unique_ptr<BackendBox> sender(std::shared_ptr<const ClusterKey> key) {
    auto box = make_named_backend(backend(), std::move(key));
    EXPECT_TRUE(box.ok()) << box.status().to_string();
    return box.ok() ? std::move(*box) : nullptr;
  }

  static SecretFile* cluster_;
  static SecretFile* other_;
};

SecretFile* BackendAuthConformance::cluster_ = nullptr;
SecretFile* BackendAuthConformance::other_ = nullptr;

bool names_the_mismatch(const Status& st) {
  return st.message().find(kSecretMismatchHint) != std::string::npos;
}

TEST_P(BackendAuthConformance, MembersWithTheSameSecretMoveRandomBlocksExactly) {
  const uint64_t kRegion = 8u << 20;
  BackendPeerProcess p(backend(), kRegion, cluster_->path());
  ASSERT_TRUE(p.ready()) << p.error();
  EngineOptions o;
  o.backend = backend();
  o.cluster_key = cluster_->key();
  auto engine = TransferEngine::create(o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto session = (*engine)->open_session(p.endpoint());
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  std::vector<uint8_t> model(kRegion, 0);
  auto src = random_bytes(kRegion, 21);
  for (uint64_t round = 0; round < 2; ++round) {
    auto blocks = random_blocks(200 + round, src, p.region_addr(), &model);
    auto batch = (*engine)->submit(*session, blocks);
    ASSERT_TRUE(batch.ok()) << batch.status().to_string();
    auto done = (*engine)->wait(*batch, seconds(60));
    ASSERT_TRUE(done.ok()) << done.status().to_string();
    ASSERT_EQ(done->state, BatchState::kSucceeded) << done->error.to_string();
  }
  expect_region(p, model);
}

TEST_P(BackendAuthConformance, ASenderWithoutTheSecretOrWithAnotherWritesNothing) {
  const uint64_t kRegion = 1u << 20;
  BackendPeerProcess p(backend(), kRegion, cluster_->path());
  ASSERT_TRUE(p.ready()) << p.error();
  for (auto key : {std::shared_ptr<const ClusterKey>(), other_->key()}) {
    auto box = sender(key);
    ASSERT_NE(box, nullptr);
    auto peer = box->backend->connect(p.endpoint());
    ASSERT_FALSE(peer.ok()) << (key ? "another secret" : "no secret") << " got a session";
    EXPECT_EQ(peer.status().code(), StatusCode::kUnauthenticated) << peer.status().to_string();
    EXPECT_TRUE(names_the_mismatch(peer.status())) << peer.status().to_string();
  }
  expect_region(p, std::vector<uint8_t>(kRegion, 0));
}

TEST_P(BackendAuthConformance, AMemberWritesNothingIntoAReceiverWithoutTheSecretOrWithAnother) {
  const uint64_t kRegion = 1u << 20;
  BackendPeerProcess keyless(backend(), kRegion), stranger(backend(), kRegion, other_->path());
  ASSERT_TRUE(keyless.ready() && stranger.ready()) << keyless.error() << stranger.error();
  auto box = sender(cluster_->key());
  ASSERT_NE(box, nullptr);
  for (BackendPeerProcess* p : {&keyless, &stranger}) {
    auto peer = box->backend->connect(p->endpoint());
    ASSERT_FALSE(peer.ok()) << "a member opened a session to a non-member";
    EXPECT_EQ(peer.status().code(), StatusCode::kUnauthenticated) << peer.status().to_string();
    EXPECT_TRUE(names_the_mismatch(peer.status())) << peer.status().to_string();
    expect_region(*p, std::vector<uint8_t>(kRegion, 0));
  }
}

TEST_P(BackendAuthConformance, AStrangerOnTheLeasePortIsClosedWithoutALease) {
  const uint64_t kRegion = 1u << 20;
  BackendPeerProcess p(backend(), kRegion, cluster_->path());
  ASSERT_TRUE(p.ready()) << p.error();
  const auto requests = lease::testing::hello_and_requests(backend(), p.region_addr(), 4096);

  std::vector<uint8_t> garbage(4096);
  std::mt19937 rng(17);
  for (auto& b : garbage) b = static_cast<uint8_t>(rng());
  auto a = lease::testing::send_raw(p.endpoint(), garbage, milliseconds(5000));
  EXPECT_TRUE(a.closed) << "garbage";
  EXPECT_FALSE(a.any_write_material()) << "garbage";

  auto plain = lease::testing::send_raw(p.endpoint(), lease::testing::encode_frames(requests),
                                        milliseconds(5000));
  EXPECT_TRUE(plain.closed) << "plain protocol";
  EXPECT_FALSE(plain.any_write_material()) << "plain protocol";

  // This process is a member: it records a real handshake, then replays it as a stranger.
  auto recorded = lease::testing::record_member_handshake(p.endpoint(), *cluster_->key());
  ASSERT_TRUE(recorded.ok()) << recorded.status().to_string();
  auto frames = *recorded;
  frames.insert(frames.end(), requests.begin(), requests.end());
  auto replay = lease::testing::send_raw(p.endpoint(), lease::testing::encode_frames(frames),
                                         milliseconds(5000));
  EXPECT_TRUE(replay.closed) << "replay";
  EXPECT_FALSE(replay.any_write_material()) << "replay";

  expect_region(p, std::vector<uint8_t>(kRegion, 0));
  // The receiver still serves members.
  auto box = sender(cluster_->key());
  ASSERT_NE(box, nullptr);
  auto peer = box->backend->connect(p.endpoint());
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  auto src = random_bytes(4096, 23);
  const std::vector<WriteBlock> blocks{
      {reinterpret_cast<uint64_t>(src.data()), p.region_addr(), 4096}};
  ASSERT_TRUE(box->backend->post(**peer, blocks, 1).ok());
  Status st = box->sink.wait(1, milliseconds(30000));
  EXPECT_TRUE(st.ok()) << st.to_string();
  peer->reset();
  std::vector<uint8_t> model(kRegion, 0);
  std::copy(src.begin(), src.end(), model.begin());
  expect_region(p, model);
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendAuthConformance,
                         ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return param_name(info.param); });

}  // namespace
}  // namespace pdkv::engine::testing
