// KV managers end to end inside one process with MLA L1.5 ownership (docs/API.md): either
// side holding only part of a request's pages, what moves then, and the ownership a call
// refuses.
// As in every kv/manager_pair_*_test.cc: real TCP engines over loopback, messages through
// the real codecs on an in-process bus (kv/testing/room_pair.h), and every test checks the
// bytes. One side's behaviour is in kv/prefill/prefill_manager_test.cc and
// kv/decode/decode_manager_test.cc; real processes over ZeroMQ and the HTTP bootstrap
// server in python/tests/test_kv_e2e.py.
#include <gtest/gtest.h>

#include <optional>
#include <utility>

#include "kv/kv_sender.h"
#include "kv/testing/manager_pair_fixture.h"

// In kv::testing, whose helpers (room_pair.h) the tests use throughout.
namespace pdkv::kv::testing {
namespace {

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
