#include "plan/fragment_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>

#include "plan/blocks.h"
#include "plan/state_blocks.h"

namespace pdkv::plan {
namespace {

constexpr int64_t kHeadDim = 4, kDtype = 2, kHeadBytes = kHeadDim * kDtype;
constexpr int64_t kLayers = 2, kPages = 4, kSrcCap = 9, kDstCap = 11;

SideLayout layout(int64_t tp, int64_t heads, int64_t page, PageLayout pl, bool mla = false,
                  std::vector<uint64_t> state = {}) {
  SideLayout s;
  s.tp_size = tp;
  s.page_size = page;
  s.page_layout = pl;
  s.is_mla = mla;
  s.target = KvGeometry{heads, kHeadDim, kDtype};
  for (int64_t l = 0; l < kLayers; ++l) s.kv_buffer_kinds.push_back(BufferKind::kTargetK);
  if (!mla)
    for (int64_t l = 0; l < kLayers; ++l) s.kv_buffer_kinds.push_back(BufferKind::kTargetV);
  s.state_item_lens = std::move(state);
  return s;
}

// Byte offset of (token t, local head h) inside a page.
size_t elem(PageLayout pl, int64_t t, int64_t h, int64_t heads, int64_t page) {
  return static_cast<size_t>(pl == PageLayout::kNHD ? t * heads + h : h * page + t) * kHeadBytes;
}

struct Rank {
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<uint8_t> state;
  std::vector<uint64_t> ptrs() const {
    std::vector<uint64_t> p;
    for (const auto& b : bufs) p.push_back(reinterpret_cast<uint64_t>(b.data()));
    return p;
  }
  std::vector<uint64_t> lens() const {
    std::vector<uint64_t> l;
    for (const auto& b : bufs) l.push_back(b.size());
    return l;
  }
};

void apply(const std::vector<Block>& blocks) {
  for (const Block& b : blocks) {
    std::memcpy(reinterpret_cast<void*>(b.dst_addr), reinterpret_cast<const void*>(b.src_addr),
                b.length);
  }
}

// Simulates P prefill ranks holding head slices of a random KV tensor and checks that
// every decode rank ends with exactly its heads (see python/tests/test_plan_fragments.py).
void run_case(int64_t P, int64_t D, int64_t H, int64_t S, PageLayout pl_p, PageLayout pl_d,
              bool mla, bool sharded_state) {
  SCOPED_TRACE(testing::Message() << "P=" << P << " D=" << D << " H=" << H << " S=" << S
                                  << " mla=" << mla << " state=" << sharded_state);
  std::mt19937 rng(static_cast<uint32_t>(P * 1000 + D * 100 + H * 10 + S));
  const uint64_t kState = 24;
  std::vector<uint64_t> sp, sd;
  if (sharded_state) sp = {kState / P}, sd = {kState / D};
  const SideLayout pre = layout(P, H, S, pl_p, mla, sp), dec = layout(D, H, S, pl_d, mla, sd);
  const size_t nbuf = pre.kv_buffer_kinds.size();
  // full[b][q][t][h][byte]
  std::vector<uint8_t> full(nbuf * kPages * S * H * kHeadBytes);
  for (auto& x : full) x = static_cast<uint8_t>(rng() % 255 + 1);
  std::vector<uint8_t> full_state(kState);
  for (auto& x : full_state) x = static_cast<uint8_t>(rng() % 255 + 1);
  auto at = [&](size_t b, int64_t q, int64_t t, int64_t h) {
    return &full[((((b * kPages + q) * S + t) * H + h) * kHeadBytes)];
  };
  auto make_ranks = [&](int64_t tp, int64_t cap, const std::vector<uint64_t>& st,
                        std::vector<std::vector<int64_t>>& pages) {
    std::vector<Rank> ranks(tp);
    for (int64_t r = 0; r < tp; ++r) {
      auto hr = heads_of_rank(r, tp, H);
      EXPECT_TRUE(hr.ok());
      for (size_t b = 0; b < nbuf; ++b)
        ranks[r].bufs.emplace_back(cap * hr->count * S * kHeadBytes);
      if (!st.empty()) ranks[r].state.assign(2 * st[0], 0);
      std::vector<int64_t> perm(cap);
      for (int64_t i = 0; i < cap; ++i) perm[i] = i;
      std::shuffle(perm.begin(), perm.end(), rng);
      pages.emplace_back(perm.begin(), perm.begin() + kPages);
    }
    return ranks;
  };
  std::vector<std::vector<int64_t>> src_pages, dst_pages;
  auto prefill = make_ranks(P, kSrcCap, sp, src_pages);
  auto decode = make_ranks(D, kDstCap, sd, dst_pages);
  for (int64_t p = 0; p < P; ++p) {
    auto hr = *heads_of_rank(p, P, H);
    const size_t item = hr.count * S * kHeadBytes;
    for (size_t b = 0; b < nbuf; ++b)
      for (int64_t q = 0; q < kPages; ++q)
        for (int64_t t = 0; t < S; ++t)
          for (int64_t h = 0; h < hr.count; ++h)
            std::memcpy(&prefill[p].bufs[b][src_pages[p][q] * item + elem(pl_p, t, h, hr.count, S)],
                        at(b, q, t, hr.first + h), kHeadBytes);
    if (sharded_state) std::memcpy(&prefill[p].state[sp[0]], &full_state[p * sp[0]], sp[0]);
  }
  std::vector<std::vector<int64_t>> layers;
  for (int64_t l = 0; l < kLayers; ++l) {
    layers.push_back(mla ? std::vector<int64_t>{l} : std::vector<int64_t>{l, kLayers + l});
  }
  std::vector<int32_t> heard(P, 0);
  for (int64_t d = 0; d < D; ++d) {
    auto plan = plan_fragments(pre, dec, d);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    for (const auto& t : plan->targets) {
      ++heard[t.prefill_rank];
      if (t.dummy) continue;
      const Rank& src = prefill[t.prefill_rank];
      const auto sptr = src.ptrs(), dptr = decode[d].ptrs(), slen = src.lens(),
                 dlen = decode[d].lens();
      std::vector<uint64_t> items(nbuf, src.bufs[0].size() / kSrcCap);
      BufferTable table{sptr, dptr, items, slen, dlen};
      auto blocks = kv_blocks(table, layers, src_pages[t.prefill_rank], dst_pages[d], 0, kLayers,
                              t.fragments);
      ASSERT_TRUE(blocks.ok()) << blocks.status().to_string();
      apply(*blocks);
      if (t.send_state) {
        std::vector<uint64_t> s1 = {reinterpret_cast<uint64_t>(src.state.data())};
        std::vector<uint64_t> d1 = {reinterpret_cast<uint64_t>(decode[d].state.data())};
        std::vector<uint64_t> l1 = {src.state.size()}, l2 = {decode[d].state.size()};
        std::vector<int64_t> ss = {1}, ds = {1};
        StateSlots slots;
        slots.src_slots = std::span<const int64_t>(ss);
        slots.dst_slots = std::span<const int64_t>(ds);
        BufferTable st{s1, d1, sp, l1, l2};
        auto sb = state_blocks(st, slots, t.fragments);
        ASSERT_TRUE(sb.ok()) << sb.status().to_string();
        apply(*sb);
      }
    }
  }
  for (int64_t p = 0; p < P; ++p) EXPECT_GE(heard[p], 1) << "prefill rank " << p << " not told";
  for (int64_t d = 0; d < D; ++d) {
    auto hr = *heads_of_rank(d, D, H);
    const size_t item = hr.count * S * kHeadBytes;
    for (size_t b = 0; b < nbuf; ++b) {
      std::vector<uint8_t> want(kDstCap * item, 0);
      for (int64_t q = 0; q < kPages; ++q)
        for (int64_t t = 0; t < S; ++t)
          for (int64_t h = 0; h < hr.count; ++h)
            std::memcpy(&want[dst_pages[d][q] * item + elem(pl_d, t, h, hr.count, S)],
                        at(b, q, t, hr.first + h), kHeadBytes);
      ASSERT_EQ(decode[d].bufs[b], want) << "decode rank " << d << " buffer " << b;
    }
    if (sharded_state) {
      EXPECT_EQ(0, std::memcmp(&decode[d].state[sd[0]], &full_state[d * sd[0]], sd[0]));
    }
  }
}

TEST(FragmentPlanner, HeadsArriveByteExact) {
  const std::vector<std::pair<int64_t, int64_t>> tps = {{1, 1}, {1, 2}, {2, 1}, {2, 4},
                                                        {4, 2}, {1, 8}, {8, 1}, {4, 8}};
  for (auto [P, D] : tps) {
    for (int64_t H : {1, 2, 8}) {
      for (int64_t S : {1, 3}) {
        for (auto pl : {PageLayout::kNHD, PageLayout::kHND}) {
          run_case(P, D, H, S, pl, pl, false, false);
        }
        run_case(P, D, H, S, PageLayout::kNHD, PageLayout::kHND, false, false);
      }
    }
    run_case(P, D, 1, 2, PageLayout::kNHD, PageLayout::kNHD, true, false);
  }
  for (auto [P, D] : std::vector<std::pair<int64_t, int64_t>>{{2, 4}, {4, 2}, {1, 2}}) {
    run_case(P, D, 8, 2, PageLayout::kNHD, PageLayout::kNHD, false, true);
  }
}

TEST(FragmentPlanner, TokenMajorPartialHeadsGiveOneFragmentPerToken) {
  for (auto [pl, want] : {std::pair{PageLayout::kNHD, 4u}, std::pair{PageLayout::kHND, 1u}}) {
    auto r = plan_fragments(layout(2, 8, 4, pl), layout(4, 8, 4, pl), 1);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->targets.size(), 1u);
    size_t n = 0;
    for (const auto& f : r->targets[0].fragments) n += f.buffer_index == 0;
    EXPECT_EQ(n, want);
  }
}

TEST(FragmentPlanner, IdentityAndFanOut) {
  auto id = plan_fragments(layout(4, 8, 2, PageLayout::kNHD), layout(4, 8, 2, PageLayout::kNHD), 2);
  ASSERT_TRUE(id.ok());
  EXPECT_TRUE(id->identity);
  ASSERT_EQ(id->targets.size(), 1u);
  EXPECT_EQ(id->targets[0].prefill_rank, 2);
  EXPECT_TRUE(id->targets[0].fragments.empty());

  // 2 -> 4: each prefill rank feeds two decode ranks.
  auto up = plan_fragments(layout(2, 8, 1, PageLayout::kNHD), layout(4, 8, 1, PageLayout::kNHD), 3);
  ASSERT_TRUE(up.ok());
  ASSERT_EQ(up->targets.size(), 1u);
  EXPECT_EQ(up->targets[0].prefill_rank, 1);
  EXPECT_EQ(up->targets[0].required_dst_info_num, 2);
  EXPECT_EQ(up->required_prefill_response_num, 1);

  // 4 -> 2: two targets, one decode rank each.
  auto down =
      plan_fragments(layout(4, 8, 1, PageLayout::kNHD), layout(2, 8, 1, PageLayout::kNHD), 1);
  ASSERT_TRUE(down.ok());
  ASSERT_EQ(down->targets.size(), 2u);
  EXPECT_EQ(down->targets[0].prefill_rank, 2);
  EXPECT_EQ(down->targets[1].prefill_rank, 3);
  EXPECT_EQ(down->required_prefill_response_num, 2);
}

TEST(FragmentPlanner, GqaReplicaRanksAreToldTheyOwnNothing) {
  auto r = plan_fragments(layout(8, 2, 1, PageLayout::kNHD), layout(2, 2, 1, PageLayout::kNHD), 1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->idle_prefill_ranks, (std::vector<int32_t>{1, 2, 3, 5, 6, 7}));
  std::vector<int32_t> real, dummy;
  for (const auto& t : r->targets) (t.dummy ? dummy : real).push_back(t.prefill_rank);
  EXPECT_EQ(real, (std::vector<int32_t>{4}));
  EXPECT_EQ(dummy, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(r->required_prefill_response_num, 1);
}

TEST(FragmentPlanner, RejectsBadLayouts) {
  const auto ok = layout(2, 8, 1, PageLayout::kNHD);
  auto bad = [&](std::function<void(SideLayout&)> f, int64_t rank = 0) {
    SideLayout d = layout(4, 8, 1, PageLayout::kNHD);
    f(d);
    return !plan_fragments(ok, d, rank).ok();
  };
  EXPECT_TRUE(bad([](SideLayout&) {}, 4));
  EXPECT_TRUE(bad([](SideLayout& d) { d.page_size = 2; }));
  EXPECT_TRUE(bad([](SideLayout& d) { d.is_mla = true; }));
  EXPECT_TRUE(bad([](SideLayout& d) { d.target.total_kv_heads = 6; }));
  EXPECT_TRUE(bad([](SideLayout& d) { d.tp_size = 3; }));
  EXPECT_TRUE(bad([](SideLayout& d) { d.kv_item_lens = {1, 2, 3, 4}; }));
  EXPECT_TRUE(bad([](SideLayout& d) { d.kv_buffer_kinds.pop_back(); }));
  EXPECT_TRUE(bad([](SideLayout& d) { d.state_item_lens = {8}; }));
}

}  // namespace
}  // namespace pdkv::plan
