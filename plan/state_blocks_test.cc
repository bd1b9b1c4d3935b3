#include "plan/state_blocks.h"

#include <gtest/gtest.h>

#include "plan/test_fragments.h"

namespace pdkv::plan {
namespace {

using U = std::vector<uint64_t>;
using V = std::vector<int64_t>;

struct StateCase {
  const char* name;
  U src_ptrs, dst_ptrs, items;
  std::optional<V> src, dst, ids;
  std::optional<int64_t> begin, end;
  std::vector<Fragment> frags;
  bool ok;
  std::vector<Block> want;
};

Fragment state_frag(int64_t s, uint64_t ss, uint64_t ds, uint64_t so, uint64_t dof, uint64_t n) {
  return testing::frag(s, ss, ds, so, dof, n, std::nullopt, BufferKind::kState);
}

TEST(StateBlocks, Table) {
  Fragment kv_only;  // a KV fragment does not make a state fragment plan
  const std::vector<StateCase> cases = {
      {"no buffers", {}, {1}, {}, V{1}, V{1}, {}, {}, {}, {}, true, {}},
      {"no slots", {100}, {200}, {8}, std::nullopt, V{1}, {}, {}, {}, {}, true, {}},
      {"one to one", {100}, {200}, {8}, V{1}, V{2}, {}, {}, {}, {}, true, {{108, 216, 8}}},
      {"contiguous slots coalesce",
       {100},
       {200},
       {8},
       V{1, 2},
       V{4, 5},
       {},
       {},
       {},
       {},
       true,
       {{108, 232, 16}}},
      {"broadcast, negatives skipped",
       {100},
       {200},
       {8},
       V{3},
       V{1, 2, -1, 4},
       {},
       {},
       {},
       {},
       true,
       {{124, 208, 8}, {124, 216, 8}, {124, 232, 8}}},
      {"negative source skipped",
       {100},
       {200},
       {8},
       V{-1, 2},
       V{1, 2},
       {},
       {},
       {},
       {},
       true,
       {{116, 216, 8}}},
      {"all negative", {100}, {200}, {8}, V{-1}, V{-1}, {}, {}, {}, {}, true, {}},
      {"buffer count mismatch", {100, 300}, {200}, {8, 8}, V{1}, V{1}, {}, {}, {}, {}, false, {}},
      {"slot count mismatch", {100}, {200}, {8}, V{1, 2}, V{1}, {}, {}, {}, {}, false, {}},
      {"one src, zero dst", {100}, {200}, {8}, V{1}, V{}, {}, {}, {}, {}, false, {}},
      {"layer range",
       {0, 1000, 2000},
       {5000, 6000, 7000},
       {10, 10, 10},
       V{2},
       V{3},
       V{1, 5, 9},
       4,
       10,
       {},
       true,
       {{1020, 6030, 10}, {2020, 7030, 10}}},
      {"open-ended range",
       {0, 1000},
       {5000, 6000},
       {10, 10},
       V{2},
       V{3},
       V{1, 5},
       2,
       std::nullopt,
       {},
       true,
       {{1020, 6030, 10}}},
      {"range keeps none", {0}, {5000}, {10}, V{2}, V{3}, V{1}, 4, 10, {}, true, {}},
      {"ids count mismatch", {0, 1}, {5, 6}, {10, 10}, V{2}, V{3}, V{1}, 0, 10, {}, false, {}},
      {"ids missing", {0}, {5}, {10}, V{2}, V{3}, std::nullopt, 0, 10, {}, false, {}},
      {"state fragments",
       {0, 1000000},
       {10000000, 20000000},
       {100, 100},
       V{1},
       V{2, 3},
       {},
       {},
       {},
       {state_frag(1, 100, 50, 50, 0, 50)},
       true,
       {{1000150, 20000100, 50}, {1000150, 20000150, 50}}},
      {"kv fragments ignored",
       {100},
       {200},
       {8},
       V{1},
       V{2},
       {},
       {},
       {},
       {kv_only},
       true,
       {{108, 216, 8}}},
      {"state fragment out of range",
       {100},
       {200},
       {8},
       V{1},
       V{2},
       {},
       {},
       {},
       {state_frag(3, 8, 8, 0, 0, 8)},
       false,
       {}},
  };
  for (const auto& c : cases) {
    StateSlots slots;
    if (c.src) slots.src_slots = std::span<const int64_t>(*c.src);
    if (c.dst) slots.dst_slots = std::span<const int64_t>(*c.dst);
    if (c.ids) slots.state_layer_ids = std::span<const int64_t>(*c.ids);
    slots.begin_layer = c.begin;
    slots.end_layer = c.end;
    BufferTable t{c.src_ptrs, c.dst_ptrs, c.items, {}, {}};
    auto r = state_blocks(t, slots, c.frags);
    ASSERT_EQ(r.ok(), c.ok) << c.name << ": " << r.status().to_string();
    if (c.ok) {
      EXPECT_EQ(*r, c.want) << c.name;
    }
  }
}

TEST(StateBlocks, BoundsChecked) {
  U src = {100}, dst = {200}, items = {8}, slen = {16}, dlen = {16};
  V s = {1}, d = {2};
  StateSlots slots;
  slots.src_slots = std::span<const int64_t>(s);
  slots.dst_slots = std::span<const int64_t>(d);
  BufferTable t{src, dst, items, slen, dlen};
  EXPECT_EQ(state_blocks(t, slots, {}).status().code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace pdkv::plan
