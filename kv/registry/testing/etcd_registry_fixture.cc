#include "kv/registry/testing/etcd_registry_fixture.h"

#include <chrono>
#include <vector>

#include "kv/route/bootstrap_route_directory.h"

namespace pdkv::kv::testing {

using namespace std::chrono_literals;

PrefillRankInfo rank_info(int64_t engine_rank, int64_t tp_size, int port) {
  PrefillRankInfo info;
  info.engine_rank = engine_rank;
  info.tp_size = tp_size;
  info.dp_size = 1;
  info.control_endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  info.layout.page_size = 16;
  info.layout.kv_head_num = 8 / static_cast<uint32_t>(tp_size);
  info.layout.total_kv_head_num = 8;
  info.layout.head_dim = 64;
  info.layout.dtype_bytes = 2;
  info.kv_item_lens = {4096, 4096};
  return info;
}

RegistryOptions etcd_options(const EtcdCluster& cluster, const std::string& prefix) {
  RegistryOptions o;
  o.kind = RegistryKind::kEtcd;
  o.etcd_endpoints = cluster.endpoints();
  o.etcd_prefix = prefix;
  o.etcd_lease_ttl_s = 2;
  return o;
}

std::shared_ptr<EtcdRouteDirectory> directory(const RegistryOptions& o,
                                              std::shared_ptr<const ClusterKey> key) {
  auto d = EtcdRouteDirectory::create(o, std::move(key));
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return *d;
}

std::shared_ptr<const ClusterKey> test_secret(uint8_t fill) {
  const std::vector<uint8_t> secret(32, fill);
  auto key = ClusterKey::from_secret(secret);
  EXPECT_TRUE(key.ok());
  return *key;
}

std::string route_json(const PrefillRankInfo& info) {
  auto reg = to_registration(info);
  EXPECT_TRUE(reg.ok());
  return bootstrap::registration_to_json(*reg);
}

void EtcdRegistryTest::SetUp() {
  if (EtcdCluster::binary().empty()) GTEST_SKIP() << "etcd is not installed (/usr/bin/etcd)";
}

std::unique_ptr<EtcdCluster> EtcdRegistryTest::start(int members) {
  auto c = EtcdCluster::start(members);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(*c) : nullptr;
}

void EtcdRegistryTest::start_with_directories(int members) {
  cluster_ = start(members);
  ASSERT_NE(cluster_, nullptr);
  prefill_ = directory(etcd_options(*cluster_));
  decode_ = directory(etcd_options(*cluster_));
}

void EtcdRegistryTest::start_with_a_published_rank(int members, const std::string& instance,
                                                   int64_t tp_size) {
  ASSERT_NO_FATAL_FAILURE(start_with_directories(members));
  ASSERT_TRUE(
      prefill_->register_prefill_rank(instance, rank_info(0, tp_size, 5000), now() + 5s).ok());
  ASSERT_TRUE(decode_->lookup_prefill_rank(instance, 0, 0, now() + 5s).ok());
}

}  // namespace pdkv::kv::testing
