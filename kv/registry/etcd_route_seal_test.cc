// A sealed route entry (kv/registry/etcd_route_seal.h), without etcd: what verifies under
// which key, lease and secret, and what reads without a secret.
#include "kv/registry/etcd_route_seal.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kv/registry/testing/etcd_registry_fixture.h"

// In kv::testing, whose helpers (etcd_registry_fixture.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

// Sealed entries bind the etcd key, the lease and the secret: each change fails.
TEST(EtcdRouteSeal, EntryVerifiesOnlyForItsKeyLeaseAndSecret) {
  const auto key = test_secret();
  const std::string route = route_json(rank_info(1, 2, 5000));
  const std::string k = "/x/instances/i:1/ranks/1";
  EtcdKeyValue kv{k, seal_route_entry(key.get(), k, 42, route), 1, 42};
  auto opened = open_route_entry(key.get(), kv);
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  EXPECT_EQ(opened->rank_port, 5000);
  EtcdKeyValue moved = kv;
  moved.key = "/x/instances/i:1/ranks/0";
  EtcdKeyValue unleased = kv;
  unleased.lease = 0;
  EtcdKeyValue plain = kv;
  plain.value = route;
  for (const EtcdKeyValue& bad : {moved, unleased, plain})
    EXPECT_EQ(open_route_entry(key.get(), bad).status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(open_route_entry(test_secret(8).get(), kv).status().code(),
            StatusCode::kUnauthenticated);
  // Without a secret both forms read, unverified; garbage does not.
  EXPECT_TRUE(open_route_entry(nullptr, kv).ok());
  EXPECT_TRUE(open_route_entry(nullptr, plain).ok());
  EtcdKeyValue garbage = kv;
  garbage.value = "{\"mac\": 1}";
  EXPECT_FALSE(open_route_entry(nullptr, garbage).ok());
  EXPECT_FALSE(open_route_entry(key.get(), garbage).ok());
  EXPECT_EQ(seal_route_entry(nullptr, k, 42, route), route);
}

// The owner's run and expiry are sealed: a changed stamp fails, an expired entry is
// refused once kSealClockSkew has passed too, and an entry sealed without a stamp (the
// earlier form, which nothing bounds in time) does not verify.
TEST(EtcdRouteSeal, StampIsSealedAndAnExpiredEntryIsRefused) {
  const auto key = test_secret();
  const std::string route = route_json(rank_info(1, 2, 5000));
  const std::string k = "/x/instances/i:1/ranks/1";
  const SealStamp stamp{0xabcdef0123456789ull, 1000, 50'000};
  EtcdKeyValue kv{k, seal_route_entry(key.get(), k, 42, route, stamp), 1, 42};
  auto opened = open_sealed_route_entry(key.get(), kv, 50'000);
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  EXPECT_EQ(opened->stamp, stamp);
  const int64_t skew = kSealClockSkew.count();
  EXPECT_TRUE(open_sealed_route_entry(key.get(), kv, 50'000 + skew).ok());
  EXPECT_EQ(open_sealed_route_entry(key.get(), kv, 50'001 + skew).status().code(),
            StatusCode::kUnauthenticated);
  EtcdKeyValue stretched = kv;
  const auto at = stretched.value.find("50000");
  ASSERT_NE(at, std::string::npos);
  stretched.value.replace(at, 5, "90000");
  EXPECT_EQ(open_sealed_route_entry(key.get(), stretched, 50'000).status().code(),
            StatusCode::kUnauthenticated);
  EtcdKeyValue unstamped = kv;
  nlohmann::json old = {{"route", route}, {"mac", std::string(64, '0')}};
  unstamped.value = old.dump();
  EXPECT_EQ(open_sealed_route_entry(key.get(), unstamped, 50'000).status().code(),
            StatusCode::kUnauthenticated);
  EXPECT_TRUE(open_sealed_route_entry(nullptr, unstamped, 50'000).ok());
}

}  // namespace
}  // namespace pdkv::kv::testing
