// KV managers end to end inside one process, heads sliced between TP sizes: each decode
// rank ends with exactly its heads of every page, for P prefill and D decode ranks, MHA
// and MLA, NHD and HND pages, chunked and checksummed; the fragment list a decode
// registers once.
// As in every kv/manager_pair_*_test.cc: real TCP engines over loopback, messages through
// the real codecs on an in-process bus (kv/testing/room_pair.h), and every test checks the
// bytes. One side's behaviour is in kv/prefill/prefill_manager_test.cc and
// kv/decode/decode_manager_test.cc; real processes over ZeroMQ and the HTTP bootstrap
// server in python/tests/test_kv_e2e.py.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <variant>

#include "common/mutex.h"
#include "kv/kv_sender.h"
#include "kv/testing/manager_pair_fixture.h"

// In kv::testing, whose helpers (room_pair.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

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

TEST_F(KvManagerTest, ChecksumPassesHeadSlicedChunkedTransfers) {
  move_head_sliced_room(101, {1, 2, 3, 9, 10}, {4, 5, 6, 7, 11}, {15, 0, 3, 8, 2},
                        /*chunk_pages=*/2, testing::checksum_options());
}

}  // namespace
}  // namespace pdkv::kv::testing
