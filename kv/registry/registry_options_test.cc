// The etcd registry's options refused before any etcd is reached: instance names that
// would break its keys, a prefix without its leading slash.
#include "kv/registry/registry_options.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "kv/registry/etcd_route_directory.h"
#include "kv/registry/testing/etcd_registry_fixture.h"

// In kv::testing, whose helpers (etcd_registry_fixture.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

using namespace std::chrono_literals;

TEST(RegistryOptions, InstanceNamesThatWouldBreakKeysAreRefused) {
  RegistryOptions o;
  o.kind = RegistryKind::kEtcd;
  o.etcd_endpoints = "127.0.0.1:1";  // never reached: the name is checked first
  auto d = EtcdRouteDirectory::create(o);
  ASSERT_TRUE(d.ok());
  for (const char* bad : {"", "a/b", "a b", "host:1\n"}) {
    EXPECT_EQ((*d)->register_prefill_rank(bad, rank_info(0, 1, 5000), now() + 1s).code(),
              StatusCode::kInvalidArgument)
        << bad;
    EXPECT_EQ((*d)->lookup_instance(bad, now() + 1s).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(RegistryOptions, BadPrefixIsRefused) {
  setenv("PDKV_ETCD_PREFIX", "no-slash", 1);
  EXPECT_EQ(RegistryOptions::from_env().status().code(), StatusCode::kInvalidArgument);
  unsetenv("PDKV_ETCD_PREFIX");
  EXPECT_TRUE(RegistryOptions::from_env().ok());
}

}  // namespace
}  // namespace pdkv::kv::testing
