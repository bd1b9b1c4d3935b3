#include "common/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <type_traits>

namespace pdkv::config {
namespace {

// Specs as a layer declares them (setting_spec.h): read<> takes default, range and choices
// from them.
inline constexpr SettingSpec kSpecInt = int_setting("PDKV_TEST_KNOB", 4, 1, 64);
inline constexpr SettingSpec kSpecDouble = double_setting("PDKV_TEST_KNOB", 0.5, 0.1, 2.0);
inline constexpr SettingSpec kSpecBool = bool_setting("PDKV_TEST_KNOB", true);
inline constexpr std::string_view kSpecChoices[] = {"a", "b"};
inline constexpr SettingSpec kSpecString = string_setting("PDKV_TEST_KNOB", "a", kSpecChoices);

class ConfigTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("PDKV_TEST_KNOB"); }
  void set(const char* value) { setenv("PDKV_TEST_KNOB", value, 1); }
};

TEST_F(ConfigTest, UnsetUsesDefault) {
  auto v = read_int("PDKV_TEST_KNOB", 4, 1, 64);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 4);
}

TEST_F(ConfigTest, SpecGivesTypeDefaultRangeAndChoices) {
  static_assert(std::is_same_v<decltype(read<kSpecInt>(Settings())), Result<int64_t>>);
  static_assert(std::is_same_v<decltype(read<kSpecDouble>(Settings())), Result<double>>);
  static_assert(std::is_same_v<decltype(read<kSpecBool>(Settings())), Result<bool>>);
  static_assert(std::is_same_v<decltype(read<kSpecString>(Settings())), Result<std::string>>);
  const Settings none = Settings().use_environment(false);
  EXPECT_EQ(read<kSpecInt>(none).value(), 4);
  EXPECT_EQ(read<kSpecDouble>(none).value(), 0.5);
  EXPECT_TRUE(read<kSpecBool>(none).value());
  EXPECT_EQ(read<kSpecString>(none).value(), "a");
  auto bad = read<kSpecInt>(Settings().set("PDKV_TEST_KNOB", 65));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("PDKV_TEST_KNOB=65 (set in code)"), std::string::npos);
  EXPECT_NE(bad.status().message().find("[1, 64]"), std::string::npos);
  EXPECT_FALSE(read<kSpecDouble>(Settings().set("PDKV_TEST_KNOB", 3.0)).ok());
  EXPECT_FALSE(read<kSpecString>(Settings().set("PDKV_TEST_KNOB", "c")).ok());
  EXPECT_EQ(read<kSpecString>(Settings().set("PDKV_TEST_KNOB", "b")).value(), "b");
}

TEST_F(ConfigTest, EmptyUsesDefault) {
  set("");
  EXPECT_EQ(read_int("PDKV_TEST_KNOB", 4, 1, 64).value(), 4);
}

TEST_F(ConfigTest, ParsesInRangeInteger) {
  set("17");
  EXPECT_EQ(read_int("PDKV_TEST_KNOB", 4, 1, 64).value(), 17);
}

TEST_F(ConfigTest, OutOfRangeIntegerNamesVariableAndRange) {
  set("65");
  auto v = read_int("PDKV_TEST_KNOB", 4, 1, 64);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("PDKV_TEST_KNOB=65"), std::string::npos);
  EXPECT_NE(v.status().message().find("[1, 64]"), std::string::npos);
}

TEST_F(ConfigTest, GarbageIntegerRejected) {
  for (const char* bad : {"12abc", "abc", "1.5", "99999999999999999999999"}) {
    set(bad);
    EXPECT_FALSE(read_int("PDKV_TEST_KNOB", 4, 1, 64).ok()) << bad;
  }
}

TEST_F(ConfigTest, DoubleRangeChecked) {
  set("2.5");
  EXPECT_DOUBLE_EQ(read_double("PDKV_TEST_KNOB", 5.0, 0.1, 60).value(), 2.5);
  set("0.01");
  EXPECT_FALSE(read_double("PDKV_TEST_KNOB", 5.0, 0.1, 60).ok());
  set("nan");
  EXPECT_FALSE(read_double("PDKV_TEST_KNOB", 5.0, 0.1, 60).ok());
}

TEST_F(ConfigTest, BoolSpellings) {
  for (const char* t : {"1", "true", "YES", "on"}) {
    set(t);
    EXPECT_TRUE(read_bool("PDKV_TEST_KNOB", false).value()) << t;
  }
  for (const char* f : {"0", "False", "no", "OFF"}) {
    set(f);
    EXPECT_FALSE(read_bool("PDKV_TEST_KNOB", true).value()) << f;
  }
  set("maybe");
  EXPECT_FALSE(read_bool("PDKV_TEST_KNOB", true).ok());
}

TEST_F(ConfigTest, StringAllowedSet) {
  set("shm");
  EXPECT_EQ(read_string("PDKV_TEST_KNOB", "tcp", {"tcp", "shm", "ucx"}).value(), "shm");
  set("rdma");
  auto v = read_string("PDKV_TEST_KNOB", "tcp", {"tcp", "shm", "ucx"});
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("'ucx'"), std::string::npos);
}

TEST_F(ConfigTest, ReadingsAreRecordedOncePerName) {
  set("3");
  ASSERT_TRUE(read_int("PDKV_TEST_KNOB", 4, 1, 64).ok());
  ASSERT_TRUE(read_int("PDKV_TEST_KNOB", 4, 1, 64).ok());
  int count = 0;
  for (const auto& r : knobs_read()) {
    if (r.name == "PDKV_TEST_KNOB") {
      ++count;
      EXPECT_EQ(r.value, "3");
      EXPECT_EQ(r.origin, Origin::kEnvironment);
    }
  }
  EXPECT_EQ(count, 1);
}

// The precedence rule, decided once in config.cc: explicit > environment > default.
TEST_F(ConfigTest, ExplicitValueBeatsEnvironment) {
  set("17");
  Settings s;
  s.set("PDKV_TEST_KNOB", int64_t{9});
  EXPECT_EQ(read_int(s, "PDKV_TEST_KNOB", 4, 1, 64).value(), 9);
  ASSERT_EQ(s.readings().size(), 1u);
  EXPECT_EQ(s.readings()[0].origin, Origin::kExplicit);
  EXPECT_EQ(s.readings()[0].value, "9");
}

TEST_F(ConfigTest, EnvironmentBeatsDefaultWhenNotSetInCode) {
  set("17");
  Settings s;
  s.set("PDKV_OTHER_KNOB", "1");
  EXPECT_EQ(read_int(s, "PDKV_TEST_KNOB", 4, 1, 64).value(), 17);
  EXPECT_EQ(s.readings()[0].origin, Origin::kEnvironment);
}

TEST_F(ConfigTest, EnvironmentIgnoredWhenTurnedOff) {
  set("17");
  Settings s;
  s.use_environment(false);
  EXPECT_EQ(read_int(s, "PDKV_TEST_KNOB", 4, 1, 64).value(), 4);
  EXPECT_EQ(s.readings()[0].origin, Origin::kDefault);
}

TEST_F(ConfigTest, ExplicitValueIsRangeCheckedAndSaysWhereItCameFrom) {
  Settings s;
  s.set("PDKV_TEST_KNOB", 0.01);
  auto v = read_double(s, "PDKV_TEST_KNOB", 5.0, 0.1, 60);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("PDKV_TEST_KNOB=0.01 (set in code)"), std::string::npos)
      << v.status().message();
  EXPECT_NE(v.status().message().find("[0.1, 60]"), std::string::npos) << v.status().message();
}

TEST_F(ConfigTest, TypedSettersParseBackToTheSameValue) {
  Settings s;
  s.set("PDKV_A", 0.1).set("PDKV_B", true).set("PDKV_C", int64_t{1} << 40).set("PDKV_D", "shm");
  EXPECT_DOUBLE_EQ(read_double(s, "PDKV_A", 5.0, 0.0, 1.0).value(), 0.1);
  EXPECT_TRUE(read_bool(s, "PDKV_B", false).value());
  EXPECT_EQ(read_int(s, "PDKV_C", 0, 0, int64_t{1} << 41).value(), int64_t{1} << 40);
  EXPECT_EQ(read_string(s, "PDKV_D", "tcp", {"tcp", "shm"}).value(), "shm");
}

TEST_F(ConfigTest, ReadingsAreSharedByCopies) {
  Settings s;
  Settings copy = s;
  ASSERT_TRUE(read_bool(copy, "PDKV_TEST_KNOB", true).ok());
  ASSERT_EQ(s.readings().size(), 1u);
  EXPECT_EQ(s.readings()[0].value, "true");
}

}  // namespace
}  // namespace pdkv::config
