#include "plan/resolve.h"

#include <gtest/gtest.h>

namespace pdkv::plan {
namespace {

using V = std::vector<int64_t>;
using M = std::vector<uint8_t>;

TEST(PythonSlice, Rules) {
  struct Case {
    size_t len;
    std::optional<int64_t> start, stop;
    size_t begin, end;
  };
  const std::vector<Case> cases = {
      {5, 1, 3, 1, 3},
      {5, std::nullopt, std::nullopt, 0, 5},
      {5, -2, std::nullopt, 3, 5},
      {5, 2, 99, 2, 5},
      {5, 4, 1, 4, 4},
      {5, -99, -4, 0, 1},
      {0, 0, 3, 0, 0},
  };
  for (const auto& c : cases) {
    auto b = python_slice(c.len, c.start, c.stop);
    EXPECT_EQ(b.begin, c.begin);
    EXPECT_EQ(b.end, c.end);
  }
}

struct ResolveCase {
  const char* name;
  V src, dst;
  int64_t start, stop;
  std::optional<M> smask;
  std::optional<V> slocal;
  bool src_on;
  std::optional<M> dmask;
  std::optional<V> dmap, dlocal;
  bool dst_on;
  bool ok;
  V want_src, want_dst;
};

TEST(ResolveIndices, Table) {
  const std::vector<ResolveCase> cases = {
      {"off/off truncates",
       {1, 2, 3, 4},
       {9, 8, 7, 6, 5},
       1,
       4,
       {},
       {},
       false,
       {},
       {},
       {},
       false,
       true,
       {1, 2, 3},
       {8, 7, 6}},
      {"off/off shorter src",
       {1, 2},
       {9, 8, 7},
       0,
       3,
       {},
       {},
       false,
       {},
       {},
       {},
       false,
       true,
       {1, 2},
       {9, 8}},
      {"empty ignores missing metadata",
       {},
       {1},
       0,
       1,
       {},
       {},
       true,
       {},
       {},
       {},
       true,
       true,
       {},
       {}},
      {"on/off",
       {10, 11, 12},
       {5, 6, 7},
       0,
       3,
       M{1, 0, 1},
       V{40, 42},
       true,
       {},
       {},
       {},
       false,
       true,
       {40, 42},
       {5, 7}},
      {"on/off mask too long",
       {10, 11, 12},
       {5, 6},
       0,
       2,
       M{1, 0, 1},
       V{40, 42},
       true,
       {},
       {},
       {},
       false,
       false,
       {},
       {}},
      {"on/off empty mask", {10}, {5}, 0, 1, M{}, V{3}, true, {}, {}, {}, false, true, {3}, {}},
      {"on/off missing", {10}, {5}, 0, 1, {}, V{1}, true, {}, {}, {}, false, false, {}, {}},
      {"off/on",
       {1, 2, 3},
       {0, 0, 0, 0},
       1,
       4,
       {},
       {},
       false,
       M{1, 0, 1, 1},
       V{0, 0, 1, 2},
       V{70, 71, 72},
       true,
       true,
       {2, 3},
       {71, 72}},
      {"off/on src shorter raises",
       {1, 2},
       {0, 0, 0, 0},
       1,
       4,
       {},
       {},
       false,
       M{1, 0, 1, 1},
       V{0, 0, 1, 2},
       V{70, 71, 72},
       true,
       false,
       {},
       {}},
      {"off/on local out of range",
       {1},
       {0},
       0,
       1,
       {},
       {},
       false,
       M{1},
       V{3},
       V{70},
       true,
       false,
       {},
       {}},
      {"off/on missing mask", {1}, {0}, 0, 1, {}, {}, false, {}, V{0}, V{70}, true, false, {}, {}},
      {"on/on",
       {1, 2, 3, 4},
       {0, 0, 0, 0},
       0,
       4,
       M{1, 0, 1, 1},
       V{50, 52, 53},
       true,
       M{1, 1, 0, 1},
       V{0, 1, 1, 2},
       V{60, 61, 63},
       true,
       true,
       {50, 53},
       {60, 63}},
      {"on/on truncated masks",
       {1, 2, 3},
       {0, 0},
       0,
       2,
       M{1, 1, 1},
       V{5, 6, 7},
       true,
       M{0, 1},
       V{-1, 0},
       V{9},
       true,
       true,
       {6},
       {9}},
      {"on/on 1 vs 0 is empty",
       {1, 2},
       {0, 0},
       0,
       2,
       M{1},
       V{5},
       true,
       M{},
       V{},
       V{},
       true,
       true,
       {},
       {}},
      {"on/on 2 vs 1 raises",
       {1, 2},
       {0, 0},
       0,
       2,
       M{1, 1},
       V{5, 6},
       true,
       M{1},
       V{0},
       V{9},
       true,
       false,
       {},
       {}},
      {"on/on src local too short",
       {1, 2},
       {0, 0},
       0,
       2,
       M{1, 1},
       V{5},
       true,
       M{1, 1},
       V{0, 1},
       V{8, 9},
       true,
       false,
       {},
       {}},
  };
  for (const auto& c : cases) {
    SrcOwnership s;
    if (c.smask) s.page_transfer_mask = std::span<const uint8_t>(*c.smask);
    if (c.slocal) s.page_local_indices = std::span<const int64_t>(*c.slocal);
    DstOwnership d;
    if (c.dmask) d.page_transfer_mask = std::span<const uint8_t>(*c.dmask);
    if (c.dmap) d.page_indices_mapping = std::span<const int64_t>(*c.dmap);
    if (c.dlocal) d.page_local_indices = std::span<const int64_t>(*c.dlocal);
    auto r = resolve_indices(c.src, c.dst, c.start, c.stop, c.src_on ? &s : nullptr,
                             c.dst_on ? &d : nullptr);
    ASSERT_EQ(r.ok(), c.ok) << c.name << ": " << r.status().to_string();
    if (!c.ok) continue;
    EXPECT_EQ(r->src_pages, c.want_src) << c.name;
    EXPECT_EQ(r->dst_pages, c.want_dst) << c.name;
  }
}

}  // namespace
}  // namespace pdkv::plan
