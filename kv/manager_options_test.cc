#include "kv/manager_options.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace pdkv::kv {
namespace {

using std::chrono::milliseconds;

class ManagerOptionsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("PDKV_BOOTSTRAP_TIMEOUT_S");
    unsetenv("PDKV_WAITING_TIMEOUT_S");
  }
};

TEST_F(ManagerOptionsTest, DefaultsWithoutEnvironmentOrSettings) {
  config::Settings none;
  none.use_environment(false);
  auto o = KvManagerOptions::from(none);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->bootstrap_timeout, milliseconds(120'000));
  EXPECT_EQ(o->transfer_window_bytes, 64ull << 20);
  EXPECT_EQ(o->metrics_port, -1);
}

TEST_F(ManagerOptionsTest, ExplicitBeatsEnvironmentBeatsDefault) {
  setenv("PDKV_BOOTSTRAP_TIMEOUT_S", "7", 1);
  setenv("PDKV_WAITING_TIMEOUT_S", "8", 1);
  config::Settings s;
  s.set("PDKV_BOOTSTRAP_TIMEOUT_S", 1.5);
  auto o = KvManagerOptions::from(s);
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->bootstrap_timeout, milliseconds(1500));   // explicit
  EXPECT_EQ(o->waiting_timeout, milliseconds(8000));     // environment
  EXPECT_EQ(o->metadata_timeout, milliseconds(10'000));  // default
  bool saw_explicit = false;
  for (const auto& r : s.readings()) {
    if (r.name == "PDKV_BOOTSTRAP_TIMEOUT_S") {
      saw_explicit = r.origin == config::Origin::kExplicit;
    }
    if (r.name == "PDKV_WAITING_TIMEOUT_S") {
      EXPECT_EQ(r.origin, config::Origin::kEnvironment);
    }
    if (r.name == "PDKV_METADATA_TIMEOUT_S") {
      EXPECT_EQ(r.origin, config::Origin::kDefault);
    }
  }
  EXPECT_TRUE(saw_explicit);
}

TEST_F(ManagerOptionsTest, RouteResolutionSettingsReachTheOptions) {
  config::Settings none;
  none.use_environment(false);
  auto d = KvManagerOptions::from(none);
  ASSERT_TRUE(d.ok());
  const KvManagerOptions defaults;  // the struct's defaults are the settings' defaults
  EXPECT_EQ(d->route_attempt_timeout, defaults.route_attempt_timeout);
  EXPECT_EQ(d->route_breaker_failures, defaults.route_breaker_failures);
  EXPECT_EQ(d->route_breaker_backoff, defaults.route_breaker_backoff);
  EXPECT_EQ(d->max_resolving_instances, defaults.max_resolving_instances);
  config::Settings s;
  s.use_environment(false);
  s.set("PDKV_ROUTE_ATTEMPT_TIMEOUT_S", 0.5);
  s.set("PDKV_ROUTE_BREAKER_FAILURES", int64_t{7});
  s.set("PDKV_ROUTE_BREAKER_BACKOFF_S", 1.25);
  s.set("PDKV_MAX_RESOLVING_INSTANCES", int64_t{9});
  auto o = KvManagerOptions::from(s);
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->route_attempt_timeout, milliseconds(500));
  EXPECT_EQ(o->route_breaker_failures, 7);
  EXPECT_EQ(o->route_breaker_backoff, milliseconds(1250));
  EXPECT_EQ(o->max_resolving_instances, 9);
}

TEST_F(ManagerOptionsTest, BadExplicitValueNamesTheSetting) {
  config::Settings s;
  s.set("PDKV_TRANSFER_ATTEMPTS", int64_t{0});
  auto o = KvManagerOptions::from(s);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("PDKV_TRANSFER_ATTEMPTS=0 (set in code)"), std::string::npos)
      << o.status().message();
}

}  // namespace
}  // namespace pdkv::kv
