// KV managers end to end with state groups and strided pages: a hybrid room whose group 0
// is mamba-like state buffers (slots, one sharded and one replicated between TP sizes),
// whose group 1 is two KV layers taking their pages from the group's list (sliding
// window), next to chunked KV layers; and FlashInfer-shaped KV buffers, K and V of a page
// side by side (page stride twice the page). Equal TP and TP 1 -> 2; every byte of every
// decode buffer is checked, written or not.
// As in every kv/manager_pair_*_test.cc: real TCP engines over loopback, messages through
// the real codecs on an in-process bus (kv/testing/room_pair.h).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kv/kv_sender.h"
#include "kv/testing/manager_pair_fixture.h"

namespace pdkv::kv::testing {
namespace {

constexpr int64_t kHeads = 4, kHeadDim = 8, kDtype = 2, kHeadBytes = kHeadDim * kDtype;
constexpr int64_t kTokens = 2, kPages = 12, kSlots = 6;
constexpr uint64_t kShardedSlot = 48, kReplicatedSlot = 32;  // state slot bytes on TP 1

struct Shape {
  bool hybrid = true;    // two group-1 KV layers and two group-0 state buffers
  bool strided = false;  // FlashInfer: K and V of a page side by side
};

// One rank's memory: a region per KV layer holding K and V, and the state buffers.
struct HybridRank {
  HybridRank(Shape shape, int64_t tp, int64_t rank, uint8_t fill)
      : shape(shape),
        tp(tp),
        rank(rank),
        heads(kHeads / tp),
        item(static_cast<uint64_t>(heads * kTokens * kHeadBytes)) {
    const int64_t layers = shape.hybrid ? 4 : 2;
    regions.assign(static_cast<size_t>(layers), std::vector<uint8_t>(2 * item * kPages, fill));
    if (shape.hybrid) {
      state.push_back(std::vector<uint8_t>(kShardedSlot / tp * kSlots, fill));
      state.push_back(std::vector<uint8_t>(kReplicatedSlot * kSlots, fill));
    }
  }

  uint64_t stride() const { return shape.strided ? 2 * item : item; }
  // Offset of page p of buffer b (K = even, V = odd) inside its layer's region.
  size_t page_offset(size_t b, int64_t p) const {
    const auto kv = static_cast<uint64_t>(b % 2), page = static_cast<uint64_t>(p);
    return shape.strided ? page * 2 * item + kv * item : kv * kPages * item + page * item;
  }
  uint8_t* page(size_t b, int64_t p) { return regions[b / 2].data() + page_offset(b, p); }

  KvArgs args() {
    KvArgs a;
    a.engine_rank = rank;
    a.tp_size = tp;
    a.page_size = kTokens;
    a.kv_head_num = heads;
    a.total_kv_head_num = kHeads;
    a.head_dim = kHeadDim;
    a.dtype_bytes = kDtype;
    for (size_t l = 0; l < regions.size(); ++l) {
      const uint64_t base = reinterpret_cast<uint64_t>(regions[l].data());
      for (uint64_t kv = 0; kv < 2; ++kv) {
        a.kv_data_ptrs.push_back(base + page_offset(kv, 0));
        a.kv_data_lens.push_back(shape.strided ? 2 * item * kPages - item : item * kPages);
        a.kv_item_lens.push_back(item);
        if (shape.strided) a.kv_page_strides.push_back(stride());
      }
      a.layer_buffers.push_back({static_cast<int64_t>(2 * l), static_cast<int64_t>(2 * l + 1)});
    }
    if (shape.hybrid) {
      a.kv_layer_groups = {-1, -1, 1, 1};
      for (auto& s : state) {
        a.state_data_ptrs.push_back(reinterpret_cast<uint64_t>(s.data()));
        a.state_data_lens.push_back(s.size());
        a.state_item_lens.push_back(s.size() / kSlots);
      }
      a.state_buffer_groups = {0, 0};
    }
    return a;
  }

  Shape shape;
  int64_t tp, rank, heads;
  uint64_t item;
  std::vector<std::vector<uint8_t>> regions;
  std::vector<std::vector<uint8_t>> state;
};

// Kept pairs of two lists, as the contract pairs a group's lists.
std::vector<std::pair<int64_t, int64_t>> pairs_of(const std::vector<int64_t>& src,
                                                  const std::vector<int64_t>& dst) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t i = 0; i < dst.size(); ++i) {
    const int64_t s = src.size() == 1 ? src[0] : src[i];
    if (s >= 0 && dst[i] >= 0) out.emplace_back(s, dst[i]);
  }
  return out;
}

// What decode rank `d` must hold after the room: its initial bytes with its heads of each
// paired page, its shard / copy of each paired slot.
HybridRank expected(HybridRank dec, HybridRank& pre, int64_t layers_from, int64_t layers_to,
                    const std::vector<std::pair<int64_t, int64_t>>& pages) {
  for (int64_t l = layers_from; l < layers_to; ++l) {
    for (size_t b = static_cast<size_t>(2 * l); b < static_cast<size_t>(2 * l + 2); ++b) {
      for (auto [s, q] : pages) {
        for (int64_t t = 0; t < kTokens; ++t) {
          for (int64_t h = 0; h < dec.heads; ++h) {
            const int64_t global = dec.rank * dec.heads + h;
            std::memcpy(dec.page(b, q) + (t * dec.heads + h) * kHeadBytes,
                        pre.page(b, s) + (t * kHeads + global) * kHeadBytes, kHeadBytes);
          }
        }
      }
    }
  }
  return dec;
}

void expect_state(HybridRank& dec, HybridRank& pre,
                  const std::vector<std::pair<int64_t, int64_t>>& slots) {
  for (auto [s, q] : slots) {
    const uint64_t shard = kShardedSlot / static_cast<uint64_t>(dec.tp);
    std::memcpy(dec.state[0].data() + static_cast<uint64_t>(q) * shard,
                pre.state[0].data() + static_cast<uint64_t>(s) * kShardedSlot +
                    static_cast<uint64_t>(dec.rank) * shard,
                shard);
    std::memcpy(dec.state[1].data() + static_cast<uint64_t>(q) * kReplicatedSlot,
                pre.state[1].data() + static_cast<uint64_t>(s) * kReplicatedSlot, kReplicatedSlot);
  }
}

class StateGroupRoomTest : public KvManagerTest {
 protected:
  // One room from a TP 1 prefill to every rank of a TP `D` decode.
  void move_room(Shape shape, int64_t D, uint64_t room) {
    SCOPED_TRACE(::testing::Message()
                 << "D=" << D << " hybrid=" << shape.hybrid << " strided=" << shape.strided);
    HybridRank pre(shape, 1, 0, 0);
    std::mt19937 rng(static_cast<uint32_t>(room));
    for (auto& r : pre.regions)
      for (auto& x : r) x = static_cast<uint8_t>(rng());
    for (auto& s : pre.state)
      for (auto& x : s) x = static_cast<uint8_t>(rng());
    std::vector<std::unique_ptr<HybridRank>> decs;
    for (int64_t d = 0; d < D; ++d) decs.push_back(std::make_unique<HybridRank>(shape, D, d, 0xEE));
    std::vector<HybridRank> want;

    // Chunked pages, and the groups' lists: group 0 broadcasts one state slot to two decode
    // slots; group 1's pages drop entries either side does not hold.
    const std::vector<int64_t> src{1, 4, 6, 10, 11}, dst{2, 8, 9, 5, 7};
    const std::vector<int64_t> g0_src{2}, g0_dst{0, 4};
    const std::vector<int64_t> g1_src{-1, 7, 2, 9}, g1_dst{5, 0, -1, 3};
    std::vector<int64_t> src_lists, dst_lists;
    std::vector<uint32_t> src_ends, dst_ends;
    if (shape.hybrid) {
      src_lists = g0_src;
      src_lists.insert(src_lists.end(), g1_src.begin(), g1_src.end());
      src_ends = {1, 5};
      dst_lists = g0_dst;
      dst_lists.insert(dst_lists.end(), g1_dst.begin(), g1_dst.end());
      dst_ends = {2, 6};
    }

    auto prefill = maker_.prefill(pre.args());
    ASSERT_TRUE(prefill);
    std::vector<std::unique_ptr<DecodeManager>> decode;
    std::vector<std::unique_ptr<KVReceiver>> receivers;
    for (auto& d : decs) {
      decode.push_back(maker_.decode(d->args()));
      ASSERT_TRUE(decode.back());
      HybridRank w = expected(*d, pre, 0, 2, pairs_of(src, dst));
      if (shape.hybrid) {
        w = expected(w, pre, 2, 4, pairs_of(g1_src, g1_dst));
        expect_state(w, pre, pairs_of(g0_src, g0_dst));
      }
      want.push_back(std::move(w));
    }
    KVSender sender(*prefill, room);
    ASSERT_TRUE(sender.init(static_cast<int64_t>(src.size()), std::nullopt).ok());
    for (auto& dm : decode) {
      receivers.push_back(std::make_unique<KVReceiver>(*dm, room));
      ASSERT_TRUE(receivers.back()->init().ok());
      PreAllocationRequest req{dst, std::nullopt, dst_lists, 0, std::nullopt, dst_ends};
      ASSERT_TRUE(receivers.back()->send_metadata(std::move(req)).ok());
    }
    std::span<const int64_t> all(src);
    ASSERT_TRUE(sender.send(all.subspan(0, 2)).ok());
    ASSERT_TRUE(sender.send_groups(all.subspan(2), StateSlotLists{src_lists, src_ends}).ok());
    for (size_t d = 0; d < receivers.size(); ++d) {
      ASSERT_TRUE(eventually([&] { return receivers[d]->poll() == RoomState::kSuccess; }))
          << receivers[d]->failure().to_string();
      EXPECT_TRUE(decs[d]->regions == want[d].regions) << "KV bytes of decode rank " << d;
      EXPECT_TRUE(decs[d]->state == want[d].state) << "state bytes of decode rank " << d;
    }
    EXPECT_TRUE(eventually([&] { return prefill->active_rooms() == 0; }));
  }
};

TEST_F(StateGroupRoomTest, HybridRoomEqualTp) { move_room(Shape{true, false}, 1, 501); }

TEST_F(StateGroupRoomTest, HybridRoomTp1To2) { move_room(Shape{true, false}, 2, 502); }

TEST_F(StateGroupRoomTest, FlashInferStridedRoomTp1To2) { move_room(Shape{false, true}, 2, 503); }

TEST_F(StateGroupRoomTest, HybridFlashInferRoomTp1To2) { move_room(Shape{true, true}, 2, 504); }

TEST_F(StateGroupRoomTest, WrongListCountsAreRefusedOnBothSides) {
  HybridRank pre(Shape{}, 1, 0, 0), dec(Shape{}, 1, 0, 0);
  auto prefill = maker_.prefill(pre.args());
  auto decode = maker_.decode(dec.args());
  ASSERT_TRUE(prefill && decode);
  KVSender sender(*prefill, 601);
  ASSERT_TRUE(sender.init(1, std::nullopt).ok());
  KVReceiver receiver(*decode, 601);
  ASSERT_TRUE(receiver.init().ok());
  // One flat list for two groups, and three lists for two groups.
  Status flat = receiver.send_metadata({{0}, std::nullopt, {1}, 0, std::nullopt});
  EXPECT_EQ(flat.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(flat.message().find("2 state groups"), std::string::npos) << flat.to_string();
  const std::vector<int64_t> three{1, 2, 3};
  const std::vector<uint32_t> ends{1, 2, 3};
  Status sent = sender.send_groups(std::vector<int64_t>{0}, StateSlotLists{three, ends});
  EXPECT_EQ(sent.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(sent.message().find("3 lists but this rank has 2"), std::string::npos)
      << sent.to_string();
}

TEST_F(StateGroupRoomTest, DifferentGroupsFailTheRegistrationNamingBoth) {
  HybridRank pre(Shape{}, 1, 0, 0), dec(Shape{}, 1, 0, 0);
  KvArgs dargs = dec.args();
  dargs.kv_layer_groups = {-1, 1, -1, 1};
  auto prefill = maker_.prefill(pre.args());
  auto decode = maker_.decode(dargs);
  ASSERT_TRUE(prefill && decode);
  KVSender sender(*prefill, 602);
  ASSERT_TRUE(sender.init(1, std::nullopt).ok());
  KVReceiver receiver(*decode, 602);
  ASSERT_TRUE(receiver.init().ok());
  const std::vector<int64_t> lists{0, 1};
  const std::vector<uint32_t> ends{1, 2};
  ASSERT_TRUE(receiver.send_metadata({{0}, std::nullopt, lists, 0, std::nullopt, ends}).ok());
  ASSERT_TRUE(eventually([&] { return receiver.poll() == RoomState::kFailed; }));
  const std::string why = receiver.failure().to_string();
  EXPECT_NE(why.find("kv_layer_groups is [-1, -1, 1, 1] on prefill but [-1, 1, -1, 1] on decode"),
            std::string::npos)
      << why;
}

}  // namespace
}  // namespace pdkv::kv::testing
