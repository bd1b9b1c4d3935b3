#include "plan/schedule.h"

#include <gtest/gtest.h>

#include <limits>

namespace pdkv::plan {
namespace {

TEST(LayerGroups, Table) {
  struct Case {
    int64_t layers, interval, begin;
    std::vector<LayerGroup> want;
  };
  const std::vector<Case> cases = {
      {0, 1, 0, {}},
      {3, 1, 10, {{0, 1, 10}, {1, 2, 11}, {2, 3, 12}}},
      {5, 2, 100, {{0, 2, 101}, {2, 4, 103}, {4, 5, 104}}},
      {4, 0, 0, {{0, 1, 0}, {1, 2, 1}, {2, 3, 2}, {3, 4, 3}}},  // interval < 1 -> 1
      {4, -7, 0, {{0, 1, 0}, {1, 2, 1}, {2, 3, 2}, {3, 4, 3}}},
      {4, 100, 5, {{0, 4, 8}}},
      {2, std::numeric_limits<int64_t>::max(), 0, {{0, 2, 1}}},
  };
  for (const auto& c : cases) {
    auto r = layer_groups(c.layers, c.interval, c.begin);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, c.want) << c.layers << " / " << c.interval;
  }
}

TEST(LayerGroups, Errors) {
  EXPECT_EQ(layer_groups(-1, 1, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(layer_groups(kMaxLayers + 1, 1, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(layer_groups(3, 1, std::numeric_limits<int64_t>::max()).status().code(),
            StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace pdkv::plan
