// A decode and a prefill manager finding each other through real etcd members
// (testing/etcd_cluster.h): the decode watches the registry, so a prefill rank whose route
// vanishes fails the rooms still bootstrapping with it within a watch event, long before
// liveness or a timeout would; rooms already handed to the rank finish; and once the rank
// registers again new rooms resolve it afresh. Control messages travel real ZeroMQ (the
// registry takes only tcp:// control endpoints).
#include <gtest/gtest.h>

#include <thread>

#include "kv/kv_sender.h"
#include "kv/registry/etcd_client.h"
#include "kv/registry/etcd_route_directory.h"
#include "kv/registry/etcd_route_keys.h"
#include "kv/registry/testing/etcd_cluster.h"
#include "kv/testing/environment_channels.h"
#include "kv/testing/room_pair.h"
#include "kv/testing/route_change_rooms.h"

namespace pdkv::kv {
namespace {

using namespace std::chrono_literals;
using testing::EtcdCluster;
using testing::eventually;
using testing::ModelShape;
using testing::RankBuffers;

constexpr char kInstance[] = "prefill-w:0";
constexpr char kPrefix[] = "/decode-test";

// Liveness and timeouts far beyond the test: what fails a room here is the registry.
KvManagerOptions slow_liveness() {
  KvManagerOptions o = testing::fast_options();
  o.heartbeat_interval = 2000ms;
  o.heartbeat_max_failures = 5;  // 10 s
  o.bootstrap_timeout = 30000ms;
  o.waiting_timeout = 30000ms;
  return o;
}

class EtcdDecodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EtcdCluster::binary().empty()) GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd)";
    auto c = EtcdCluster::start(1);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    cluster_ = std::move(*c);
  }
  std::shared_ptr<EtcdRouteDirectory> directory() {
    RegistryOptions o;
    o.kind = RegistryKind::kEtcd;
    o.etcd_endpoints = cluster_->endpoints();
    o.etcd_prefix = kPrefix;
    o.etcd_lease_ttl_s = 2;
    auto d = EtcdRouteDirectory::create(o);
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    return *d;
  }
  // A manager for rank 0 of kInstance, over real ZeroMQ and this test's etcd; null (and
  // the test failed) when it did not start.
  template <typename Manager, typename Config>
  std::unique_ptr<Manager> make_manager(RankBuffers& buffers) {
    Config config;
    config.args = buffers.args(0);
    config.bootstrap_addr = kInstance;
    config.engine = testing::loopback_engine();
    config.options = slow_liveness();
    auto m =
        Manager::create(std::move(config), testing::zmq_channels_from_environment(), directory());
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(m).value() : nullptr;
  }
  std::unique_ptr<PrefillManager> make_prefill(RankBuffers& buffers) {
    return make_manager<PrefillManager, PrefillManagerConfig>(buffers);
  }
  std::unique_ptr<DecodeManager> make_decode(RankBuffers& buffers) {
    return make_manager<DecodeManager, DecodeManagerConfig>(buffers);
  }
  // The lease rank 0's key lives under (0 when it is not registered).
  int64_t lease_of_rank0() {
    auto client = EtcdClient::create(cluster_->endpoints());
    if (!client.ok()) return 0;
    auto range = (*client)->range_prefix(etcd_rank_key(kPrefix, kInstance, 0), now() + 2s);
    return range.ok() && !range->kvs.empty() ? range->kvs[0].lease : 0;
  }

  std::unique_ptr<EtcdCluster> cluster_;
  ModelShape shape_;
};

TEST_F(EtcdDecodeTest, RevokedLeaseFailsTheBootstrappingRoomAtOnceAndNewRoomsResolveAgain) {
  RankBuffers pbuf(shape_, 1, 0, 16), dbuf(shape_, 1, 0, 16);
  auto prefill = make_prefill(pbuf);
  auto decode = make_decode(dbuf);
  ASSERT_TRUE(prefill && decode);
  // Room 1 resolved its route through etcd and registered; the engine holds its
  // send_metadata() back (no free pages yet, say). Room 2 handed its pre-allocation to the
  // prefill, whose KVSender is held back.
  const std::vector<int64_t> src = {2, 3, 4}, dst = {8, 1, 6};
  testing::RoomsAtARouteChange rooms({*prefill, pbuf, *decode, dbuf});
  ASSERT_NO_FATAL_FAILURE(rooms.open(1, 2, src, dst));
  KVReceiver& bootstrapping = rooms.bootstrapping();

  // The rank's lease is revoked (its route vanishes; the process lives and answers pings).
  const int64_t lease = lease_of_rank0();
  ASSERT_NE(lease, 0);
  auto admin = EtcdClient::create(cluster_->endpoints());
  ASSERT_TRUE(admin.ok());
  const TimePoint revoked = now();
  ASSERT_TRUE((*admin)->revoke_lease(lease, now() + 2s).ok());
  ASSERT_TRUE(eventually([&] { return bootstrapping.poll() == RoomState::kFailed; }, 5000ms));
  const auto took = now() - revoked;
  EXPECT_LT(took, 1000ms) << "the heartbeat bound here is 10 s";
  const RoomStatus st = bootstrapping.status();
  EXPECT_EQ(st.failure_cause, FailureCause::kBootstrapFailed);
  EXPECT_EQ(st.failure_stage, FailureStage::kBootstrap);
  for (const std::string& part :
       {std::string("prefill rank 0 of instance prefill-w:0"),
        std::string("left the route registry"), etcd_rank_key(kPrefix, kInstance, 0),
        std::string("was deleted from etcd at")}) {
    EXPECT_NE(st.failure_reason.find(part), std::string::npos) << st.failure_reason;
  }

  // The handed-over room is left to the live prefill, which finishes it.
  ASSERT_NO_FATAL_FAILURE(rooms.finish_handed_over());

  // The prefill's keep-alive finds its lease gone and registers again (within TTL / 3);
  // a new room resolves the route from etcd again and succeeds.
  ASSERT_TRUE(eventually([&] { return lease_of_rank0() != 0; }, 5000ms));
  EXPECT_NE(lease_of_rank0(), lease);
  testing::RoomMove later({*prefill, pbuf, *decode, dbuf});
  ASSERT_NO_FATAL_FAILURE(later.open(3, src, dst, testing::RoomMove::Wait::kNo, /*salt=*/3));
  ASSERT_NO_FATAL_FAILURE(later.finish_and_check());
}

// shutdown() interrupts route lookups in flight: rooms naming an instance nobody
// registered (etcd answers, the key never appears), and rooms resolved while etcd is down
// (no member answers), used to keep it waiting until their bootstrap deadline (30 s here).
TEST_F(EtcdDecodeTest, ShutdownReturnsWithinASecondWhileRoomsAreStillResolving) {
  for (const bool etcd_down : {false, true}) {
    SCOPED_TRACE(etcd_down ? "etcd down" : "instance not registered");
    RankBuffers dbuf(shape_, 1, 0, 16);
    auto decode = make_decode(dbuf);
    ASSERT_TRUE(decode);
    if (etcd_down) cluster_->kill(0);
    std::vector<std::unique_ptr<KVReceiver>> rooms;
    for (uint64_t room = 1; room <= 3; ++room) {
      rooms.push_back(std::make_unique<KVReceiver>(*decode, room, "never-registered:0"));
      ASSERT_TRUE(rooms.back()->init().ok());
    }
    std::this_thread::sleep_for(500ms);  // the lookups are waiting
    const TimePoint t0 = now();
    decode->shutdown();
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(now() - t0);
    EXPECT_LT(took.count(), 1500) << "shutdown waited for the rooms' bootstrap deadline";
    for (auto& r : rooms) EXPECT_EQ(r->poll(), RoomState::kFailed);
    rooms.clear();
  }
}

}  // namespace
}  // namespace pdkv::kv
