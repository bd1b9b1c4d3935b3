// KV managers end to end inside one process, whole rooms from prefill to decode: real TCP
// engines over loopback, messages through the real codecs on an in-process bus
// (kv/testing/room_pair.h). Chunking, head slicing across TP sizes, page layouts, extra
// buffers, many rooms, checksums and MLA L1.5 ownership; every test checks the bytes.
// One side's behaviour is in kv/prefill/prefill_manager_test.cc and
// kv/decode/decode_manager_test.cc; real processes over ZeroMQ and the HTTP bootstrap server in
// python/tests/test_kv_e2e.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "kv/kv_sender.h"
#include "kv/testing/room_pair.h"

// In kv::testing, whose helpers (room_pair.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

using Wait = RoomPair::Wait;

std::vector<int64_t> shuffled_pages(int64_t count, int64_t capacity, uint32_t seed) {
  std::vector<int64_t> all(static_cast<size_t>(capacity));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  all.resize(static_cast<size_t>(count));
  return all;
}

// Managers of any TP size over one bus; the tests' buffers are declared after maker_, so
// the managers over them end before it.
class KvManagerTest : public ::testing::Test {
 protected:
  // One room from a TP 1 prefill to both ranks of a TP 2 decode, `src` sent in chunks of
  // at most `chunk_pages`: each decode rank must end with exactly its half of the heads.
  void move_head_sliced_room(uint64_t room, const std::vector<int64_t>& src,
                             const std::vector<int64_t>& dst0, const std::vector<int64_t>& dst1,
                             size_t chunk_pages,
                             const KvManagerOptions& options = testing::fast_options()) {
    RankBuffers pbuf(shape_, 1, 0, 16), d0(shape_, 2, 0, 16), d1(shape_, 2, 1, 16);
    auto prefill = maker_.prefill(pbuf.args(0), options);
    auto dec0 = maker_.decode(d0.args(0), options);
    auto dec1 = maker_.decode(d1.args(1), options);
    ASSERT_TRUE(prefill && dec0 && dec1);
    pbuf.fill_request(src);
    KVSender sender(*prefill, room);
    ASSERT_TRUE(sender.init(static_cast<int64_t>(src.size()), 0).ok());
    KVReceiver r0(*dec0, room), r1(*dec1, room);
    ASSERT_TRUE(r0.init().ok());
    ASSERT_TRUE(r1.init().ok());
    ASSERT_TRUE(r0.send_metadata({dst0, 0, {}, 0, std::nullopt}).ok());
    ASSERT_TRUE(r1.send_metadata({dst1, 0, {}, 0, std::nullopt}).ok());
    std::span<const int64_t> all(src);
    for (size_t at = 0; at < all.size(); at += chunk_pages) {
      ASSERT_TRUE(sender.send(all.subspan(at, std::min(chunk_pages, all.size() - at))).ok());
    }
    ASSERT_TRUE(eventually([&] {
      return r0.poll() == RoomState::kSuccess && r1.poll() == RoomState::kSuccess;
    })) << r0.failure().to_string()
        << " / " << r1.failure().to_string();
    EXPECT_TRUE(d0.holds_request(dst0));
    EXPECT_TRUE(d1.holds_request(dst1));
    EXPECT_TRUE(eventually([&] { return prefill->active_rooms() == 0; }));
  }

  ManagerMaker maker_;
  ModelShape shape_;
};

TEST_F(KvManagerTest, OneToOneChunkedTransferMovesEveryByte) {
  RoomPairOptions options;
  options.num_pages = 64;
  RoomPair pair(options);
  const auto src = shuffled_pages(10, 64, 1);
  const auto dst = shuffled_pages(10, 64, 2);
  ASSERT_NO_FATAL_FAILURE(pair.open(42, src, dst, Wait::kNo));
  KVSender& sender = pair.sender();
  KVReceiver& receiver = pair.receiver();
  // Three chunks, the last carrying the rest.
  std::span<const int64_t> all(src);
  ASSERT_TRUE(sender.send(all.subspan(0, 3)).ok());
  ASSERT_TRUE(sender.send(all.subspan(3, 4)).ok());
  pair.prefill().set_prefill_metadata(42, 777, {5, 6});
  ASSERT_TRUE(sender.send(all.subspan(7)).ok());

  ASSERT_TRUE(eventually([&] { return receiver.poll() == RoomState::kSuccess; }))
      << receiver.failure().to_string();
  EXPECT_TRUE(pair.decode_buffers().holds_request(dst));
  EXPECT_EQ(receiver.bootstrap_token(), 777);
  EXPECT_EQ(receiver.spec_candidate_ids(), (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(eventually([&] { return sender.poll() == RoomState::kSuccess; }));
  EXPECT_TRUE(eventually(
      [&] { return pair.prefill().active_rooms() == 0 && pair.decode().active_rooms() == 0; }));
}

TEST_F(KvManagerTest, HeadSlicingOneToTwo) {
  move_head_sliced_room(100, {1, 2, 3, 9}, {4, 5, 6, 7}, {15, 0, 3, 8}, /*chunk_pages=*/4);
}

// The head split's fragment list (one per token and buffer) depends only on the layouts:
// each decode rank sends it once, in its registration, and its pre-allocations name it
// instead of carrying a copy each (at serving concurrency the copies were most of the
// control plane's bytes). The bytes still land head by head.
TEST_F(KvManagerTest, HeadSlicedPreAllocationsNameTheRegisteredFragmentsInsteadOfCarryingThem) {
  struct Seen {
    Mutex mu;
    std::vector<size_t> registration_fragments PDKV_GUARDED_BY(mu);
    std::vector<std::pair<bool, size_t>> pre_allocations PDKV_GUARDED_BY(mu);  // named, bytes
    size_t inline_fragments PDKV_GUARDED_BY(mu) = 0;
  };
  auto seen = std::make_shared<Seen>();
  maker_.bus().set_tap([seen](const std::string&, const proto::Message& m, size_t bytes) {
    MutexLock lock(seen->mu);
    if (const auto* reg = std::get_if<proto::BufferRegistration>(&m)) {
      seen->registration_fragments.push_back(reg->fragments.size());
    } else if (const auto* pre = std::get_if<proto::PreAllocation>(&m)) {
      seen->pre_allocations.emplace_back(pre->fragments_from_registration, bytes);
      seen->inline_fragments += pre->fragments.size();
    }
  });
  move_head_sliced_room(101, {1, 2, 3, 9}, {4, 5, 6, 7}, {15, 0, 3, 8}, /*chunk_pages=*/2);
  maker_.bus().set_tap(nullptr);
  MutexLock lock(seen->mu);
  // Both decode ranks registered (a registration is resent only if its answer is slow),
  // each with its half-heads list: one fragment per token of a page (NHD) and KV buffer.
  ASSERT_GE(seen->registration_fragments.size(), 2u);
  const auto per_rank = static_cast<size_t>(shape_.page_size * 2 * shape_.layers);
  for (size_t n : seen->registration_fragments) EXPECT_EQ(n, per_rank);
  ASSERT_GE(seen->pre_allocations.size(), 2u);
  for (const auto& [named, bytes] : seen->pre_allocations) {
    EXPECT_TRUE(named);
    EXPECT_LT(bytes, per_rank * proto::kFragmentWireBytes);  // no copy of the list inside
  }
  EXPECT_EQ(seen->inline_fragments, 0u);
}

// A P-rank prefill instance and a D-rank decode instance moving one room; every decode
// rank must end with exactly its heads of every page.
class HeterogeneousTpTest : public KvManagerTest,
                            public ::testing::WithParamInterface<std::tuple<int, int, bool, int>> {
};

TEST_P(HeterogeneousTpTest, EveryDecodeRankGetsItsHeads) {
  const auto [P, D, mla, heads] = GetParam();
  shape_.is_mla = mla;
  shape_.total_kv_heads = heads;
  shape_.page_size = 4;
  const int64_t pages = 6, capacity = 32;
  std::vector<std::unique_ptr<RankBuffers>> pbufs, dbufs;
  std::vector<std::unique_ptr<PrefillManager>> prefills;
  std::vector<std::unique_ptr<DecodeManager>> decodes;
  std::vector<std::vector<int64_t>> src(P), dst(D);
  for (int p = 0; p < P; ++p) {
    pbufs.push_back(std::make_unique<RankBuffers>(shape_, P, p, capacity));
    src[p] = shuffled_pages(pages, capacity, 10 + p);
    pbufs[p]->fill_request(src[p]);
    prefills.push_back(maker_.prefill(pbufs[p]->args(p)));
    ASSERT_TRUE(prefills.back());
  }
  for (int d = 0; d < D; ++d) {
    dbufs.push_back(std::make_unique<RankBuffers>(shape_, D, d, capacity));
    dst[d] = shuffled_pages(pages, capacity, 100 + d);
    decodes.push_back(maker_.decode(dbufs[d]->args(d)));
    ASSERT_TRUE(decodes.back());
  }
  const uint64_t room = 1234;
  std::vector<std::unique_ptr<KVSender>> senders;
  for (int p = 0; p < P; ++p) {
    senders.push_back(std::make_unique<KVSender>(*prefills[p], room));
    ASSERT_TRUE(senders[p]->init(pages, 0).ok());
  }
  std::vector<std::unique_ptr<KVReceiver>> receivers;
  for (int d = 0; d < D; ++d) {
    receivers.push_back(std::make_unique<KVReceiver>(*decodes[d], room));
    ASSERT_TRUE(receivers[d]->init().ok());
    ASSERT_TRUE(receivers[d]->send_metadata({dst[d], 0, {}, 0, std::nullopt}).ok());
  }
  for (int p = 0; p < P; ++p) ASSERT_TRUE(senders[p]->send(src[p]).ok());
  for (int d = 0; d < D; ++d) {
    ASSERT_TRUE(eventually([&] { return receivers[d]->poll() == RoomState::kSuccess; }))
        << "decode rank " << d << ": " << receivers[d]->failure().to_string();
    EXPECT_TRUE(dbufs[d]->holds_request(dst[d])) << "decode rank " << d;
  }
  uint64_t noted_sent = 0, noted_received = 0;
  for (int p = 0; p < P; ++p) {
    // Prefill ranks nobody needs learn it (dummy) and succeed too, instead of staying in
    // Bootstrapping as in the reference (and stalling their TP group's MIN all-reduce).
    EXPECT_TRUE(eventually([&] { return senders[p]->poll() == RoomState::kSuccess; }))
        << "prefill rank " << p << ": " << senders[p]->failure().to_string();
    EXPECT_TRUE(eventually([&] { return prefills[p]->active_rooms() == 0; }));
    noted_sent += prefills[p]->metrics().statuses_in_band;
  }
  // Every decode rank's Success statuses rode the last batch to it, each prefill rank's
  // own (a prefill rank feeding several decode ranks notes each of them).
  for (int d = 0; d < D; ++d) {
    const uint64_t got = decodes[d]->metrics().statuses_in_band;
    EXPECT_GE(got, 1u) << "decode rank " << d;
    noted_received += got;
  }
  EXPECT_EQ(noted_sent, noted_received);
}

INSTANTIATE_TEST_SUITE_P(
    TpPairs, HeterogeneousTpTest,
    ::testing::Values(std::make_tuple(1, 1, false, 4), std::make_tuple(2, 1, false, 4),
                      std::make_tuple(2, 4, false, 4), std::make_tuple(4, 2, false, 4),
                      std::make_tuple(1, 4, false, 4), std::make_tuple(4, 4, false, 2),
                      std::make_tuple(2, 4, true, 1), std::make_tuple(4, 2, true, 1),
                      std::make_tuple(1, 2, false, 1)),
    [](const auto& info) {
      return "P" + std::to_string(std::get<0>(info.param)) + "D" +
             std::to_string(std::get<1>(info.param)) + (std::get<2>(info.param) ? "Mla" : "Mha") +
             "H" + std::to_string(std::get<3>(info.param));
    });

TEST_F(KvManagerTest, HndPagesSliceHeadsToo) {
  shape_.layout = proto::PageLayout::kHND;
  RankBuffers pbuf(shape_, 1, 0, 16), d0(shape_, 2, 0, 16), d1(shape_, 2, 1, 16);
  auto prefill = maker_.prefill(pbuf.args(0));
  auto dec0 = maker_.decode(d0.args(0));
  auto dec1 = maker_.decode(d1.args(1));
  ASSERT_TRUE(prefill && dec0 && dec1);
  const std::vector<int64_t> src = {5, 6, 2}, dst0 = {1, 2, 3}, dst1 = {9, 8, 7};
  pbuf.fill_request(src);
  KVSender sender(*prefill, 55);
  ASSERT_TRUE(sender.init(3, 0).ok());
  KVReceiver r0(*dec0, 55), r1(*dec1, 55);
  ASSERT_TRUE(r0.init().ok() && r1.init().ok());
  ASSERT_TRUE(r0.send_metadata({dst0, 0, {}, 0, std::nullopt}).ok());
  ASSERT_TRUE(r1.send_metadata({dst1, 0, {}, 0, std::nullopt}).ok());
  ASSERT_TRUE(sender.send(src).ok());
  ASSERT_TRUE(eventually(
      [&] { return r0.poll() == RoomState::kSuccess && r1.poll() == RoomState::kSuccess; }));
  EXPECT_TRUE(d0.holds_request(dst0));
  EXPECT_TRUE(d1.holds_request(dst1));
}

TEST_F(KvManagerTest, AuxRowAndStateSlotsTravelWithTheLastChunk) {
  RankBuffers pbuf(shape_, 1, 0, 16), dbuf(shape_, 1, 0, 16);
  std::vector<uint8_t> paux(64 * 8), daux(64 * 8, 0), pstate(512 * 4), dstate(512 * 4, 0);
  for (size_t i = 0; i < paux.size(); ++i) paux[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t i = 0; i < pstate.size(); ++i) pstate[i] = static_cast<uint8_t>(i * 5 + 1);
  auto with_extras = [](KvArgs a, std::vector<uint8_t>& aux, std::vector<uint8_t>& state) {
    a.aux_data_ptrs = {reinterpret_cast<uint64_t>(aux.data())};
    a.aux_data_lens = {aux.size()};
    a.aux_item_lens = {64};
    a.state_data_ptrs = {reinterpret_cast<uint64_t>(state.data())};
    a.state_data_lens = {state.size()};
    a.state_item_lens = {512};
    a.state_layer_ids = {1};
    return a;
  };
  auto prefill = maker_.prefill(with_extras(pbuf.args(0), paux, pstate));
  ASSERT_TRUE(prefill);
  auto decode = maker_.decode(with_extras(dbuf.args(0), daux, dstate));
  ASSERT_TRUE(decode);

  const std::vector<int64_t> src = {1, 2}, dst = {3, 4};
  pbuf.fill_request(src);
  KVSender sender(*prefill, 77);
  ASSERT_TRUE(sender.init(2, /*aux_index=*/5).ok());
  KVReceiver receiver(*decode, 77);
  ASSERT_TRUE(receiver.init().ok());
  ASSERT_TRUE(receiver.send_metadata({dst, /*aux_index=*/2, /*state=*/{3}, 0, std::nullopt}).ok());
  ASSERT_TRUE(sender.send(std::span<const int64_t>(src).subspan(0, 1)).ok());
  ASSERT_TRUE(sender.send(std::span<const int64_t>(src).subspan(1), std::vector<int64_t>{1}).ok());
  ASSERT_TRUE(eventually([&] { return receiver.poll() == RoomState::kSuccess; }))
      << receiver.failure().to_string();
  EXPECT_TRUE(dbuf.holds_request(dst));
  EXPECT_TRUE(std::equal(paux.begin() + 5 * 64, paux.begin() + 6 * 64, daux.begin() + 2 * 64));
  EXPECT_TRUE(std::equal(pstate.begin() + 512, pstate.begin() + 1024, dstate.begin() + 3 * 512));
  EXPECT_EQ(std::count(daux.begin(), daux.end(), 0), static_cast<long>(daux.size() - 64));
}

TEST_F(KvManagerTest, ManyConcurrentRoomsAllSucceedAndLeaveNothingBehind) {
  RoomPairOptions options;
  options.num_pages = 512;
  RoomPair pair(options);
  ASSERT_TRUE(pair.ok());
  PrefillManager& prefill = pair.prefill();
  DecodeManager& decode = pair.decode();
  constexpr int kRooms = 64;
  std::vector<std::unique_ptr<KVSender>> senders;
  std::vector<std::unique_ptr<KVReceiver>> receivers;
  std::vector<std::vector<int64_t>> dsts;
  const auto all_src = shuffled_pages(512, 512, 5);
  const auto all_dst = shuffled_pages(512, 512, 6);
  for (int i = 0; i < kRooms; ++i) {
    std::vector<int64_t> src(all_src.begin() + i * 8, all_src.begin() + i * 8 + 8);
    dsts.emplace_back(all_dst.begin() + i * 8, all_dst.begin() + i * 8 + 8);
    pair.prefill_buffers().fill_request(src, i);
    senders.push_back(std::make_unique<KVSender>(prefill, 1000 + i));
    ASSERT_TRUE(senders.back()->init(8, 0).ok());
    receivers.push_back(std::make_unique<KVReceiver>(decode, 1000 + i));
    ASSERT_TRUE(receivers.back()->init().ok());
    ASSERT_TRUE(receivers.back()->send_metadata({dsts.back(), 0, {}, 0, std::nullopt}).ok());
    ASSERT_TRUE(senders.back()->send(src).ok());
  }
  for (int i = 0; i < kRooms; ++i) {
    ASSERT_TRUE(eventually([&] { return receivers[i]->poll() == RoomState::kSuccess; }))
        << i << ": " << receivers[i]->failure().to_string();
    EXPECT_TRUE(pair.decode_buffers().holds_request(dsts[i], 0, i)) << "room " << i;
  }
  EXPECT_TRUE(
      eventually([&] { return prefill.active_rooms() == 0 && decode.active_rooms() == 0; }));
  EXPECT_EQ(prefill.metrics().rooms_succeeded, static_cast<uint64_t>(kRooms));
  // Every successful room observed once in every stage, and its size.
  const TransferMetricsSnapshot p = prefill.metrics();
  for (size_t stage = 0; stage < kRoomStages; ++stage) {
    EXPECT_EQ(p.stages[stage].count, static_cast<uint64_t>(kRooms))
        << to_string(static_cast<RoomStage>(stage));
  }
  EXPECT_EQ(p.room_bytes.count, static_cast<uint64_t>(kRooms));
  EXPECT_EQ(p.room_bytes.sum, p.bytes_written);
  EXPECT_EQ(p.room_blocks.sum, p.blocks_written);
  const auto end_to_end = static_cast<size_t>(RoomStage::kEndToEnd);
  EXPECT_EQ(decode.metrics().stages[end_to_end].count, static_cast<uint64_t>(kRooms));
  EXPECT_NE(prefill.metrics_text().find("pdkv_rooms_total{role=\"prefill\",rank=\"0\","
                                        "outcome=\"success\"} " +
                                        std::to_string(kRooms)),
            std::string::npos);
}

TEST_F(KvManagerTest, ChecksumPassesHeadSlicedChunkedTransfers) {
  move_head_sliced_room(101, {1, 2, 3, 9, 10}, {4, 5, 6, 7, 11}, {15, 0, 3, 8, 2},
                        /*chunk_pages=*/2, testing::checksum_options());
}

// --- MLA L1.5: partial page ownership on either side (docs/API.md) -----------------

class L15Test : public KvManagerTest {
 protected:
  L15Test() {
    shape_.is_mla = true;
    shape_.total_kv_heads = 1;
  }
  std::unique_ptr<PrefillManager> make_l15_prefill(RankBuffers& buffers) {
    PrefillManagerConfig config = maker_.prefill_config(buffers.args(0));
    config.enable_mla_l1_5_cache = true;
    return maker_.prefill(std::move(config));
  }
  std::unique_ptr<DecodeManager> make_l15_decode(RankBuffers& buffers) {
    DecodeManagerConfig config = maker_.decode_config(buffers.args(0));
    config.enable_mla_l1_5_cache = true;
    return maker_.decode(std::move(config));
  }
  // Whether physical page `phys` holds request page `request_page` (every buffer, token,
  // byte), or, with `request_page` < 0, is still all zero.
  static bool page_holds(RankBuffers& buf, int64_t request_page, int64_t phys,
                         const ModelShape& shape) {
    const int64_t bytes = shape.head_dim * shape.dtype_bytes;
    for (size_t b = 0; b < buf.buffers().size(); ++b) {
      for (int64_t t = 0; t < shape.page_size; ++t) {
        for (int64_t x = 0; x < bytes; ++x) {
          const uint8_t want =
              request_page < 0 ? 0 : RankBuffers::pattern_value(b, request_page, t, 0, x);
          if (buf.at(b, phys, t, 0, x) != want) return false;
        }
      }
    }
    return true;
  }
  void run(PrefillManager& prefill, DecodeManager& decode, uint64_t room,
           const std::vector<int64_t>& src, std::optional<ChunkOwnership> src_own,
           const std::vector<int64_t>& dst, std::optional<RequestOwnership> dst_own,
           uint64_t decode_prefix_len = 0) {
    KVSender sender(prefill, room);
    ASSERT_TRUE(sender.init(static_cast<int64_t>(src.size()), 0).ok());
    KVReceiver receiver(decode, room);
    ASSERT_TRUE(receiver.init().ok());
    ASSERT_TRUE(receiver.send_metadata({dst, 0, {}, decode_prefix_len, std::move(dst_own)}).ok());
    ASSERT_TRUE(sender.send(src, {}, std::move(src_own)).ok());
    ASSERT_TRUE(eventually([&] { return receiver.poll() == RoomState::kSuccess; }))
        << receiver.failure().to_string();
    EXPECT_TRUE(
        eventually([&] { return prefill.active_rooms() == 0 && decode.active_rooms() == 0; }));
  }
};

// Prefill owns request pages 0, 2, 3 (at its local pages 5, 6, 7); the decode holds all.
TEST_F(L15Test, PrefillOwnsPartDecodeOwnsAll) {
  RankBuffers pbuf(shape_, 1, 0, 16), dbuf(shape_, 1, 0, 16);
  auto prefill = make_l15_prefill(pbuf);
  auto decode = maker_.decode(dbuf.args(0));
  pbuf.fill_request({5, 15, 6, 7});  // request page 1 is not this rank's (15: scratch)
  const std::vector<int64_t> dst = {9, 10, 11, 12};
  run(*prefill, *decode, 201, {1, 2, 3, 4}, ChunkOwnership{{1, 0, 1, 1}, {5, 6, 7}}, dst,
      std::nullopt);
  EXPECT_TRUE(page_holds(dbuf, 0, 9, shape_));
  EXPECT_TRUE(page_holds(dbuf, -1, 10, shape_));  // not owned by the prefill: untouched
  EXPECT_TRUE(page_holds(dbuf, 2, 11, shape_));
  EXPECT_TRUE(page_holds(dbuf, 3, 12, shape_));
}

// The decode owns request pages 1 and 2, stored at its local pages 3 and 8.
TEST_F(L15Test, PrefillOwnsAllDecodeOwnsPart) {
  RankBuffers pbuf(shape_, 1, 0, 16), dbuf(shape_, 1, 0, 16);
  auto prefill = maker_.prefill(pbuf.args(0));
  auto decode = make_l15_decode(dbuf);
  const std::vector<int64_t> src = {1, 2, 3, 4};
  pbuf.fill_request(src);
  run(*prefill, *decode, 202, src, std::nullopt, {9, 10, 11, 12},
      RequestOwnership{{0, 1, 1, 0}, {3, 8}});
  EXPECT_TRUE(page_holds(dbuf, 1, 3, shape_));
  EXPECT_TRUE(page_holds(dbuf, 2, 8, shape_));
  for (int64_t untouched : {9, 10, 11, 12}) EXPECT_TRUE(page_holds(dbuf, -1, untouched, shape_));
}

// Only pages both sides own move: request pages 1 and 3.
TEST_F(L15Test, BothOwnParts) {
  RankBuffers pbuf(shape_, 1, 0, 16), dbuf(shape_, 1, 0, 16);
  auto prefill = make_l15_prefill(pbuf);
  auto decode = make_l15_decode(dbuf);
  pbuf.fill_request({5, 6, 15, 7});  // prefill local pages of request pages 0, 1, 3
  run(*prefill, *decode, 203, {1, 2, 3, 4}, ChunkOwnership{{1, 1, 0, 1}, {5, 6, 7}},
      {9, 10, 11, 12}, RequestOwnership{{0, 1, 1, 1}, {2, 4, 13}});
  EXPECT_TRUE(page_holds(dbuf, 1, 2, shape_));
  EXPECT_TRUE(page_holds(dbuf, -1, 4, shape_));  // request page 2: the prefill lacks it
  EXPECT_TRUE(page_holds(dbuf, 3, 13, shape_));
}

// Malformed ownership is refused by the call, before the room is touched: a good chunk
// afterwards still completes the room.
TEST_F(L15Test, BadChunkOwnershipIsRefusedByTheCallAndTheRoomCarriesOn) {
  RankBuffers pbuf(shape_, 1, 0, 16), dbuf(shape_, 1, 0, 16);
  auto prefill = make_l15_prefill(pbuf);
  auto decode = maker_.decode(dbuf.args(0));
  pbuf.fill_request({5, 6});
  KVSender sender(*prefill, 204);
  ASSERT_TRUE(sender.init(2, 0).ok());
  KVReceiver receiver(*decode, 204);
  ASSERT_TRUE(receiver.init().ok());
  ASSERT_TRUE(receiver.send_metadata({{3, 4}, 0, {}, 0, std::nullopt}).ok());
  const std::vector<int64_t> src = {1, 2};
  Status missing = sender.send(src);
  EXPECT_EQ(missing.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.message().find("page_transfer_mask"), std::string::npos) << missing.to_string();
  const std::vector<std::pair<ChunkOwnership, StatusCode>> bad = {
      {ChunkOwnership{{1}, {5}}, StatusCode::kInvalidArgument},        // mask too short
      {ChunkOwnership{{1, 1}, {5}}, StatusCode::kInvalidArgument},     // a local page missing
      {ChunkOwnership{{1, 0}, {5, 6}}, StatusCode::kInvalidArgument},  // one too many
      {ChunkOwnership{{1, 1}, {5, 16}}, StatusCode::kOutOfRange},      // past the buffers
  };
  for (const auto& [own, code] : bad) EXPECT_EQ(sender.send(src, {}, own).code(), code);
  ASSERT_TRUE(sender.send(src, {}, ChunkOwnership{{1, 1}, {5, 6}}).ok());
  ASSERT_TRUE(eventually([&] { return receiver.poll() == RoomState::kSuccess; }))
      << receiver.failure().to_string();
  EXPECT_TRUE(page_holds(dbuf, 0, 3, shape_));
  EXPECT_TRUE(page_holds(dbuf, 1, 4, shape_));
}

TEST_F(L15Test, OwnershipIsRefusedWhereL15IsOffAndRequiredWhereItIsOn) {
  RankBuffers pbuf(shape_, 1, 0, 16), dbuf(shape_, 1, 0, 16), lbuf(shape_, 1, 0, 16);
  auto prefill = maker_.prefill(pbuf.args(0));
  auto decode = maker_.decode(dbuf.args(0));
  auto l15_decode = make_l15_decode(lbuf);
  KVSender sender(*prefill, 205);
  ASSERT_TRUE(sender.init(1, 0).ok());
  EXPECT_EQ(sender.send(std::vector<int64_t>{1}, {}, ChunkOwnership{{1}, {5}}).code(),
            StatusCode::kInvalidArgument);
  KVReceiver receiver(*decode, 206);
  EXPECT_EQ(receiver.send_metadata({{3}, 0, {}, 0, RequestOwnership{{1}, {5}}}).code(),
            StatusCode::kInvalidArgument);
  KVReceiver l15_receiver(*l15_decode, 207);
  EXPECT_EQ(l15_receiver.send_metadata({{3}, 0, {}, 0, std::nullopt}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      l15_receiver.send_metadata({{3, 4}, 0, {}, 0, RequestOwnership{{1, 1}, {5, 5}, {{0, 0}}}})
          .code(),
      StatusCode::kInvalidArgument);  // two pages mapped to one local entry
}

TEST_F(L15Test, L15NeedsAnMlaModel) {
  shape_.is_mla = false;
  shape_.total_kv_heads = 2;
  RankBuffers buf(shape_, 1, 0, 16);
  PrefillManagerConfig config = maker_.prefill_config(buf.args(0));
  config.options = KvManagerOptions();
  config.enable_mla_l1_5_cache = true;
  auto m = maker_.create_prefill(std::move(config));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
}

// The decode holds request page 0 already (prefix); the prefill's chunk mask still covers
// it, so its entry and its local page are skipped with it. The decode's mapping lists its
// local pages in reverse.
TEST_F(L15Test, PrefixPagesTakeTheirOwnershipWithThem) {
  RankBuffers pbuf(shape_, 1, 0, 16), dbuf(shape_, 1, 0, 16);
  auto prefill = make_l15_prefill(pbuf);
  auto decode = make_l15_decode(dbuf);
  pbuf.fill_request({5, 6, 7});  // local pages of request pages 0, 1, 2
  run(*prefill, *decode, 208, {1, 2, 3}, ChunkOwnership{{1, 1, 1}, {5, 6, 7}}, {9, 10},
      RequestOwnership{{1, 1}, {13, 12}, {{1, 0}}}, static_cast<uint64_t>(shape_.page_size));
  EXPECT_TRUE(page_holds(dbuf, 1, 12, shape_));
  EXPECT_TRUE(page_holds(dbuf, 2, 13, shape_));
  for (int64_t untouched : {9, 10}) EXPECT_TRUE(page_holds(dbuf, -1, untouched, shape_));
}

}  // namespace
}  // namespace pdkv::kv::testing
