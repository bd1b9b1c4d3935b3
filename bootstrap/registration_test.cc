#include "bootstrap/registration.h"

#include <gtest/gtest.h>

#include "bootstrap/route_table.h"
#include "bootstrap/test_util.h"

namespace pdkv::bootstrap {
namespace {

using nlohmann::json;
using testing::sample_json;
using testing::sample_registration;

TEST(RegistrationTest, ParsesWhatItWrites) {
  PrefillRegistration reg = sample_registration(3);
  auto back = parse_registration(registration_to_json(reg));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, reg);
}

struct BadCase {
  const char* field;
  json value;  // null json = remove the field
  bool remove;
};

TEST(RegistrationTest, EachMalformedFieldIsNamed) {
  const BadCase cases[] = {
      {"role", nullptr, true},
      {"role", "Decode", false},
      {"role", 7, false},
      {"world_size", nullptr, true},
      {"world_size", "4", false},
      {"world_size", 4.5, false},
      {"world_size", -4, false},
      {"world_size", 0, false},
      {"dp_size", 3, false},  // does not divide 4
      {"dp_size", 0, false},
      {"engine_rank", nullptr, true},
      {"engine_rank", -1, false},
      {"engine_rank", 4, false},  // >= world_size
      {"engine_rank", 18446744073709551615ull, false},
      {"rank_ip", nullptr, true},
      {"rank_ip", "", false},
      {"rank_ip", std::string(300, 'a'), false},
      {"rank_ip", json::array(), false},
      {"rank_ip", "*", false},  // ZeroMQ would bind-style interpret it
      {"rank_ip", "10.0.0.1:5000", false},
      {"rank_ip", "evil host", false},
      {"rank_ip", std::string("127.0.0.1\0evil", 14), false},  // inet_pton stops at the NUL
      {"rank_port", 0, false},
      {"rank_port", 70000, false},
      {"rank_port", true, false},
      {"enable_mla_l1_5_cache", nullptr, true},
      {"enable_mla_l1_5_cache", 1, false},
      {"kv_item_lens", nullptr, true},
      {"kv_item_lens", 5, false},
      {"kv_item_lens", json::array({1, -2}), false},
      {"kv_item_lens", json::array({1, "2"}), false},
      {"kv_unit_lens", json::array({1.5}), false},
      {"state_item_lens", nullptr, true},
      {"state_unit_lens", nullptr, true},
      {"page_size", 0, false},
      {"kv_head_num", 3, false},  // > total_kv_head_num
      {"head_dim", nullptr, true},
      {"dtype_bytes", 1000, false},
      {"page_layout", "XYZ", false},
      {"page_layout", "NHDX", false},
      {"is_mla", "no", false},
  };
  for (const BadCase& c : cases) {
    json j = sample_json(1);
    if (c.remove) {
      j.erase(c.field);
    } else {
      j[c.field] = c.value;
    }
    std::string field;
    auto r = parse_registration(j.dump(), &field);
    ASSERT_FALSE(r.ok()) << c.field << " = " << c.value.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(field, c.field) << r.status().message();
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << r.status().message();
  }
}

TEST(RegistrationTest, BodyLevelErrorsNameTheBody) {
  for (std::string body : {std::string("not json"), std::string("[1,2]"), std::string(""),
                           std::string(kMaxBodyBytes + 1, ' '), std::string(100, '[')}) {
    std::string field;
    auto r = parse_registration(body, &field);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(field, "body") << r.status().message();
  }
}

TEST(RegistrationTest, ListsOverTheLimitAreRejected) {
  json j = sample_json();
  j["kv_item_lens"] = json(std::vector<int>(kMaxListEntries + 1, 1));
  std::string field;
  EXPECT_FALSE(parse_registration(j.dump(), &field).ok());
  EXPECT_EQ(field, "kv_item_lens");
}

TEST(RegistrationTest, LayoutDifferenceNamesTheField) {
  InstanceLayout a = sample_registration(0).layout, b = a;
  EXPECT_EQ(first_layout_difference(a, b), "");
  b.page_layout = "HND";
  EXPECT_EQ(first_layout_difference(a, b), "page_layout");
}

TEST(RegistrationTest, ParallelInfoRoundTrips) {
  InstanceLayout l = sample_registration(0).layout;
  auto back = parse_parallel_info("{" + layout_to_json_fields(l) + "}");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, l);
}

// Prefill ranks register again every few seconds (a restarted server starts empty): an
// identical registration is not a change, a moved rank is.
TEST(RouteTableTest, RepeatedRegistrationIsNotAChange) {
  RouteTable table;
  PrefillRegistration reg = sample_registration(1);
  bool changed = false;
  ASSERT_TRUE(table.register_rank(reg, &changed).ok());
  EXPECT_TRUE(changed);
  ASSERT_TRUE(table.register_rank(reg, &changed).ok());
  EXPECT_FALSE(changed);
  reg.rank_port += 1;
  ASSERT_TRUE(table.register_rank(reg, &changed).ok());
  EXPECT_TRUE(changed);
}

}  // namespace
}  // namespace pdkv::bootstrap
