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

// The pages asked for: src and dst page lists, and the slice [start, stop) of them.
struct Pages {
  V src, dst;
  int64_t start, stop;
};
// One side's L1.5 ownership; `on` false: that side passes none (its fields are unused).
struct SrcSide {
  bool on;
  std::optional<M> mask;
  std::optional<V> local;
};
struct DstSide {
  bool on;
  std::optional<M> mask;
  std::optional<V> map, local;
};
const SrcSide kSrcOff{false, {}, {}};
const DstSide kDstOff{false, {}, {}, {}};
// What resolve_indices() must answer: whether it succeeds, and then the pages.
struct Want {
  bool ok;
  V src, dst;
};

struct ResolveCase {
  const char* name;
  Pages pages;
  SrcSide src;
  DstSide dst;
  Want want;
};

TEST(ResolveIndices, Table) {
  const std::vector<ResolveCase> cases = {
      {"off/off truncates",
       {{1, 2, 3, 4}, {9, 8, 7, 6, 5}, 1, 4},
       kSrcOff,
       kDstOff,
       {true, {1, 2, 3}, {8, 7, 6}}},
      {"off/off shorter src", {{1, 2}, {9, 8, 7}, 0, 3}, kSrcOff, kDstOff, {true, {1, 2}, {9, 8}}},
      {"empty ignores missing metadata",
       {{}, {1}, 0, 1},
       {true, {}, {}},
       {true, {}, {}, {}},
       {true, {}, {}}},
      {"on/off",
       {{10, 11, 12}, {5, 6, 7}, 0, 3},
       {true, M{1, 0, 1}, V{40, 42}},
       kDstOff,
       {true, {40, 42}, {5, 7}}},
      {"on/off mask too long",
       {{10, 11, 12}, {5, 6}, 0, 2},
       {true, M{1, 0, 1}, V{40, 42}},
       kDstOff,
       {false, {}, {}}},
      // The reference returns ([3], []) here: a local page with no destination.
      {"on/off empty mask with a local page raises",
       {{10}, {5}, 0, 1},
       {true, M{}, V{3}},
       kDstOff,
       {false, {}, {}}},
      {"on/off empty mask, no local pages",
       {{10}, {5}, 0, 1},
       {true, M{}, V{}},
       kDstOff,
       {true, {}, {}}},
      {"on/off local shorter than owned raises",
       {{10, 11}, {5, 6}, 0, 2},
       {true, M{1, 1}, V{3}},
       kDstOff,
       {false, {}, {}}},
      {"on/off local longer than owned raises",
       {{10, 11}, {5, 6}, 0, 2},
       {true, M{1, 0}, V{3, 4}},
       kDstOff,
       {false, {}, {}}},
      {"on/off missing", {{10}, {5}, 0, 1}, {true, {}, V{1}}, kDstOff, {false, {}, {}}},
      {"off/on",
       {{1, 2, 3}, {0, 0, 0, 0}, 1, 4},
       kSrcOff,
       {true, M{1, 0, 1, 1}, V{0, 0, 1, 2}, V{70, 71, 72}},
       {true, {2, 3}, {71, 72}}},
      {"off/on src shorter raises",
       {{1, 2}, {0, 0, 0, 0}, 1, 4},
       kSrcOff,
       {true, M{1, 0, 1, 1}, V{0, 0, 1, 2}, V{70, 71, 72}},
       {false, {}, {}}},
      {"off/on local out of range",
       {{1}, {0}, 0, 1},
       kSrcOff,
       {true, M{1}, V{3}, V{70}},
       {false, {}, {}}},
      {"off/on missing mask", {{1}, {0}, 0, 1}, kSrcOff, {true, {}, V{0}, V{70}}, {false, {}, {}}},
      {"on/on",
       {{1, 2, 3, 4}, {0, 0, 0, 0}, 0, 4},
       {true, M{1, 0, 1, 1}, V{50, 52, 53}},
       {true, M{1, 1, 0, 1}, V{0, 1, 1, 2}, V{60, 61, 63}},
       {true, {50, 53}, {60, 63}}},
      {"on/on truncated masks",
       {{1, 2, 3}, {0, 0}, 0, 2},
       {true, M{1, 1, 1}, V{5, 6, 7}},
       {true, M{0, 1}, V{-1, 0}, V{9}},
       {true, {6}, {9}}},
      {"on/on 1 vs 0 is empty",
       {{1, 2}, {0, 0}, 0, 2},
       {true, M{1}, V{5}},
       {true, M{}, V{}, V{}},
       {true, {}, {}}},
      {"on/on 2 vs 1 raises",
       {{1, 2}, {0, 0}, 0, 2},
       {true, M{1, 1}, V{5, 6}},
       {true, M{1}, V{0}, V{9}},
       {false, {}, {}}},
      {"on/on src local too short",
       {{1, 2}, {0, 0}, 0, 2},
       {true, M{1, 1}, V{5}},
       {true, M{1, 1}, V{0, 1}, V{8, 9}},
       {false, {}, {}}},
  };
  for (const auto& c : cases) {
    SrcOwnership s;
    if (c.src.mask) s.page_transfer_mask = std::span<const uint8_t>(*c.src.mask);
    if (c.src.local) s.page_local_indices = std::span<const int64_t>(*c.src.local);
    DstOwnership d;
    if (c.dst.mask) d.page_transfer_mask = std::span<const uint8_t>(*c.dst.mask);
    if (c.dst.map) d.page_indices_mapping = std::span<const int64_t>(*c.dst.map);
    if (c.dst.local) d.page_local_indices = std::span<const int64_t>(*c.dst.local);
    auto r = resolve_indices(c.pages.src, c.pages.dst, c.pages.start, c.pages.stop,
                             c.src.on ? &s : nullptr, c.dst.on ? &d : nullptr);
    ASSERT_EQ(r.ok(), c.want.ok) << c.name << ": " << r.status().to_string();
    if (!c.want.ok) continue;
    EXPECT_EQ(r->src_pages, c.want.src) << c.name;
    EXPECT_EQ(r->dst_pages, c.want.dst) << c.name;
  }
}

}  // namespace
}  // namespace pdkv::plan
