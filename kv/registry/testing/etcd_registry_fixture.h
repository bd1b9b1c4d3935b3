// What the etcd registry tests (kv/registry/etcd_*_test.cc) share: a prefill rank's route,
// registry options and directories over a test's etcd members, the cluster secret the
// sealing tests use, and EtcdRegistryTest, the fixture that starts the members (and skips
// where etcd is not installed). Fails tests through GoogleTest: test binaries only.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/cluster_key.h"
#include "kv/registry/etcd_route_directory.h"
#include "kv/registry/testing/etcd_cluster.h"

namespace pdkv::kv::testing {

// Rank `engine_rank` of a TP `tp_size` instance (8 KV heads in all, page size 16), its
// control endpoint on loopback `port`.
PrefillRankInfo rank_info(int64_t engine_rank, int64_t tp_size, int port);

// The etcd registry over `cluster`'s members under `prefix`, with a 2 s lease TTL.
RegistryOptions etcd_options(const EtcdCluster& cluster, const std::string& prefix = "/test");

// A directory over `o`, sealing and verifying with `key` when one is given; one that
// fails to start fails the test (EXPECT).
std::shared_ptr<EtcdRouteDirectory> directory(const RegistryOptions& o,
                                              std::shared_ptr<const ClusterKey> key = nullptr);

// A cluster key from a 32-byte secret of `fill` bytes: another fill, another secret.
std::shared_ptr<const ClusterKey> test_secret(uint8_t fill = 7);

// The plain (unsealed) JSON of `info`'s route, as a rank without a secret stores it.
std::string route_json(const PrefillRankInfo& info);

class EtcdRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override;
  // `members` etcd members, or null (and the test failed) when they did not start.
  std::unique_ptr<EtcdCluster> start(int members);
  // start(members), then a prefill's and a decode's directory over it under /test.
  void start_with_directories(int members);
  // start_with_directories(members), then rank 0 of a TP `tp_size` instance published at
  // `instance` (control port 5000), and the decode's lookup of it answered.
  void start_with_a_published_rank(int members, const std::string& instance, int64_t tp_size);

  // Declared in the order the tests' locals were, so destroyed in the same order.
  std::unique_ptr<EtcdCluster> cluster_;
  std::shared_ptr<EtcdRouteDirectory> prefill_;
  std::shared_ptr<EtcdRouteDirectory> decode_;
};

}  // namespace pdkv::kv::testing
