// KV managers end to end inside one process, whole rooms from prefill to decode between
// ranks of one TP size: chunked sends, the aux row and state slots riding the last chunk,
// many rooms at once and what they leave behind (rooms, metrics).
// As in every kv/manager_pair_*_test.cc: real TCP engines over loopback, messages through
// the real codecs on an in-process bus (kv/testing/room_pair.h), and every test checks the
// bytes. One side's behaviour is in kv/prefill/prefill_manager_test.cc and
// kv/decode/decode_manager_test.cc; real processes over ZeroMQ and the HTTP bootstrap
// server in python/tests/test_kv_e2e.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <span>

#include "kv/kv_sender.h"
#include "kv/testing/manager_pair_fixture.h"

// In kv::testing, whose helpers (room_pair.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

using Wait = RoomPair::Wait;

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

}  // namespace
}  // namespace pdkv::kv::testing
