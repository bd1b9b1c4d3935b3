#include "plan/coalesce.h"

#include <gtest/gtest.h>

#include <limits>

namespace pdkv::plan {
namespace {

struct CoalesceCase {
  const char* name;
  std::vector<int64_t> src, dst;
  std::vector<PageRun> want;
};

TEST(Coalesce, Table) {
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::vector<CoalesceCase> cases = {
      {"empty", {}, {}, {}},
      {"single", {4}, {9}, {{4, 9, 1}}},
      {"one run", {1, 2, 3}, {7, 8, 9}, {{1, 7, 3}}},
      {"dst breaks", {1, 2, 3}, {5, 6, 8}, {{1, 5, 2}, {3, 8, 1}}},
      {"src breaks", {1, 3, 4}, {5, 6, 7}, {{1, 5, 1}, {3, 6, 2}}},
      {"repeat", {1, 1}, {2, 3}, {{1, 2, 1}, {1, 3, 1}}},
      {"descending", {3, 2, 1}, {3, 2, 1}, {{3, 3, 1}, {2, 2, 1}, {1, 1, 1}}},
      {"negative pages", {-2, -1}, {0, 1}, {{-2, 0, 2}}},
      {"int64 max does not wrap",
       {kMax, std::numeric_limits<int64_t>::min()},
       {0, 1},
       {{kMax, 0, 1}, {std::numeric_limits<int64_t>::min(), 1, 1}}},
  };
  for (const auto& c : cases) {
    auto r = coalesce(c.src, c.dst);
    ASSERT_TRUE(r.ok()) << c.name;
    EXPECT_EQ(*r, c.want) << c.name;
  }
}

TEST(Coalesce, LengthMismatchIsInvalidArgument) {
  std::vector<int64_t> a = {1, 2}, b = {1};
  auto r = coalesce(a, b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(Coalesce, ReservesExactly) {
  std::vector<int64_t> src = {0, 1, 5, 6, 9}, dst = {0, 1, 2, 3, 4};
  std::vector<PageRun> out;
  ASSERT_TRUE(coalesce_into(src, dst, out).ok());
  EXPECT_EQ(out.size(), 3u);
  EXPECT_EQ(out.capacity(), 3u);
}

}  // namespace
}  // namespace pdkv::plan
