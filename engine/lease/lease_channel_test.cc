// LeaseServer and LeaseClient over loopback in one process: the handshake, a granted and
// a refused lease, done, and a sender that names another backend.
#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

#include "engine/lease/lease_client.h"
#include "engine/lease/lease_server.h"
#include "engine/memory_registry.h"

namespace pdkv::engine::lease {
namespace {

class FakeHooks final : public LeaseServerHooks {
 public:
  Result<std::unique_ptr<LeaseSession>> open_session() override {
    return std::unique_ptr<LeaseSession>(std::make_unique<FixedLeaseSession>("extra"));
  }
  Status regions_payload(std::vector<uint8_t>* out) override {
    encode_regions(RegionTable{7, {{0x1000, 4096, "rk"}}}, out);
    return Status();
  }
  uint64_t regions_epoch() override { return 7; }
};

class LeaseChannel : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(registry_.add(0x10000, 0x10000).ok());
    auto ep = server_.listen("127.0.0.1", 0);
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();
    endpoint_ = *ep;
  }
  TimePoint deadline() const { return now() + Millis(3000); }

  MemoryRegistry registry_;
  FakeHooks hooks_;
  LeaseServer server_{LeaseServerOptions{"shm", 2000, 2000, nullptr}, &registry_, &hooks_};
  std::string endpoint_;
};

TEST_F(LeaseChannel, HandshakeCarriesPidLeaseAndExtra) {
  LeaseClient client;
  ASSERT_TRUE(client.connect(endpoint_, "shm", 2000, nullptr).ok());
  EXPECT_EQ(client.hello().pid, static_cast<uint32_t>(::getpid()));
  EXPECT_EQ(client.hello().lease_ms, 2000);
  EXPECT_EQ(client.hello().extra, "extra");
  EXPECT_EQ(client.hello().host_identity, host_identity());
}

TEST_F(LeaseChannel, GrantsRegisteredRangesAndReleasesOnDone) {
  LeaseClient client;
  ASSERT_TRUE(client.connect(endpoint_, "shm", 2000, nullptr).ok());
  const uint64_t ranges[] = {0x10000, 4096, 0, 0x1f000, 4096, 0};  // (dst, length, grant)
  auto grant = client.lease(1, ranges, deadline());
  ASSERT_TRUE(grant.ok()) << grant.status().to_string();
  EXPECT_TRUE(grant->ok);
  EXPECT_EQ(grant->regions_epoch, 7u);
  auto table = client.regions(deadline());  // allowed while the lease is held
  ASSERT_TRUE(table.ok()) << table.status().to_string();
  EXPECT_EQ(table->regions.size(), 1u);
  EXPECT_TRUE(client.done(1, deadline()).ok());
}

TEST_F(LeaseChannel, RefusesARangeOutsideRegisteredMemoryNamingIt) {
  LeaseClient client;
  ASSERT_TRUE(client.connect(endpoint_, "shm", 2000, nullptr).ok());
  const uint64_t ranges[] = {0x10000, 4096, 0, 0x1f000, 0x2000, 0};
  auto grant = client.lease(2, ranges, deadline());
  ASSERT_TRUE(grant.ok()) << grant.status().to_string();
  EXPECT_FALSE(grant->ok);
  EXPECT_EQ(grant->bad_index, 1u);
  EXPECT_EQ(grant->first_bad, 0x20000u);
  // The channel stays usable after a refusal.
  const uint64_t good[] = {0x10000, 16, 0};
  auto next = client.lease(3, good, deadline());
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  EXPECT_TRUE(next->ok);
  EXPECT_TRUE(client.done(3, deadline()).ok());
}

TEST_F(LeaseChannel, AnotherBackendIsFailedPrecondition) {
  LeaseClient client;
  EXPECT_EQ(client.connect(endpoint_, "ucx", 2000, nullptr).code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace pdkv::engine::lease
