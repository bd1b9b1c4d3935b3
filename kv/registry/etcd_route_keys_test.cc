#include "kv/registry/etcd_route_keys.h"

#include <gtest/gtest.h>

#include "kv/registry/etcd_client.h"

namespace pdkv::kv {
namespace {

TEST(EtcdRouteKeys, RankKeyRoundTrips) {
  const std::string key = etcd_rank_key("/pdkv", "10.0.0.1:8998", 7);
  EXPECT_EQ(key, "/pdkv/instances/10.0.0.1:8998/ranks/7");
  auto parsed = parse_etcd_rank_key("/pdkv", key);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->instance, "10.0.0.1:8998");
  EXPECT_EQ(parsed->engine_rank, 7);
}

TEST(EtcdRouteKeys, ForeignOrMalformedKeysAreNotRankKeys) {
  for (const char* key :
       {"/other/instances/a/ranks/1", "/pdkv/instances/a/ranks/", "/pdkv/instances/a/ranks/x",
        "/pdkv/instances/a/ranks/-1", "/pdkv/instances/a/ranks/1x", "/pdkv/instances//ranks/1",
        "/pdkv/instances/a", "/pdkv"}) {
    EXPECT_FALSE(parse_etcd_rank_key("/pdkv", key).has_value()) << key;
  }
}

TEST(EtcdRouteKeys, PrefixEndIsTheFirstKeyAfterThePrefix) {
  EXPECT_EQ(etcd_prefix_end("/pdkv/"), "/pdkv0");
  EXPECT_EQ(etcd_prefix_end(std::string("a\xff", 2)), "b");
}

}  // namespace
}  // namespace pdkv::kv
