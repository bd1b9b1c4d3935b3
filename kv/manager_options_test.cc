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
