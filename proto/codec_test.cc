#include "proto/codec.h"

#include <gtest/gtest.h>

#include "proto/coding.h"
#include "proto/test_messages.h"

namespace pdkv::proto {
namespace {

Result<Message> round_trip(const Message& m) {
  Multipart frames = encode_message(m);
  auto views = views_of(frames);
  return decode_message(views);
}

TEST(CodecTest, EverySampleMessageRoundTrips) {
  for (const Message& m : testing::sample_messages()) {
    auto back = round_trip(m);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_TRUE(*back == m) << message_type_name(type_of(m));
  }
}

TEST(CodecTest, MinimalMessagesRoundTrip) {
  for (const Message& m : testing::minimal_messages()) {
    auto back = round_trip(m);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_TRUE(*back == m) << message_type_name(type_of(m));
  }
}

TEST(CodecTest, RandomMessagesRoundTrip) {
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    Message m = testing::random_message(seed);
    auto back = round_trip(m);
    ASSERT_TRUE(back.ok()) << "seed " << seed << ": " << back.status().to_string();
    ASSERT_TRUE(*back == m) << "seed " << seed;
  }
}

// The one-string form a status takes as a batch note: same checks, one buffer.
TEST(CodecTest, FlatMessagesRoundTripAndAnyCutOrExtraByteIsRejected) {
  for (const Message& m : testing::sample_messages()) {
    const std::string flat = encode_flat(m);
    auto back = decode_flat(flat);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_TRUE(*back == m) << message_type_name(type_of(m));
    for (size_t n = 0; n < flat.size(); ++n) {
      auto cut = decode_flat(std::string_view(flat).substr(0, n));
      ASSERT_FALSE(cut.ok()) << message_type_name(type_of(m)) << " cut to " << n;
      ASSERT_EQ(cut.status().code(), StatusCode::kDataLoss);
    }
    EXPECT_EQ(decode_flat(flat + "x").status().code(), StatusCode::kDataLoss);
  }
}

TEST(CodecTest, TypedDecoderRejectsAnotherType) {
  Multipart f = encode(Ping{testing::sample_identity(Role::kDecode, 0), 1});
  auto views = views_of(f);
  auto r = decode_pong(views);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("header says Ping"), std::string::npos);
}

// Pins the header bytes: a change here is a protocol change (bump kProtocolVersion).
TEST(CodecTest, HeaderBytesArePinned) {
  Multipart f = encode(Ping{RankIdentity{}, 0});
  std::string expected("PDKV\x08\x00\x06\x00", 8);
  put_u32(&expected, static_cast<uint32_t>(f[1].size()));
  put_u32(&expected, 0);
  EXPECT_EQ(f[0], expected);
}

// Pins a whole small body so the field order cannot drift silently.
TEST(CodecTest, TransferStatusBodyIsPinned) {
  TransferStatus st{0x0102030405060708ull,
                    TransferState::kSuccess,
                    3,
                    1,
                    -1,
                    {9},
                    0xaabbccdd,
                    "no",
                    {0x10, 4},
                    7,
                    2,
                    0x1122334455667788ull};
  Multipart f = encode(st);
  std::string e;
  e += std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8);  // room
  e += '\x01';                                              // state
  e += std::string("\x03\x00\x00\x00\x01\x00\x00\x00", 8);  // ranks
  e += std::string(8, '\xff');                              // token -1
  e += std::string("\x01\x00\x00\x00\x09\x00\x00\x00", 8);  // candidates
  e += std::string("\x01\xdd\xcc\xbb\xaa", 5);              // checksum present
  e += std::string("\x02\x00\x00\x00no", 6);                // reason
  e += std::string("\x02\x00\x00\x00", 4);                  // 2 range words
  e += std::string("\x10\0\0\0\0\0\0\0\x04\0\0\0\0\0\0\0", 16);
  e += std::string("\x07\x02", 2);                          // failure cause, stage
  e += std::string("\x88\x77\x66\x55\x44\x33\x22\x11", 8);  // ticket
  EXPECT_EQ(f[1], e);
}

TEST(CodecTest, OtherProtocolVersionNamesBothVersions) {
  Multipart f = encode(Ping{RankIdentity{}, 0});
  f[0][4] = 7;
  auto views = views_of(f);
  auto r = decode_message(views);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("version 7"), std::string::npos);
  EXPECT_NE(r.status().message().find("version 8"), std::string::npos);
}

TEST(CodecTest, BadMagicTypeFlagsAndFrameCountAreRejected) {
  Multipart good = encode(Ping{RankIdentity{}, 0});
  auto expect_bad = [](Multipart f, const char* what) {
    auto views = views_of(f);
    auto r = decode_message(views);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().to_string();
  };
  Multipart f = good;
  f[0][0] = 'X';
  expect_bad(f, "magic");
  f = good;
  f[0][6] = 99;
  expect_bad(f, "unknown message type 99");
  f = good;
  f[0][12] = 1;
  expect_bad(f, "flags");
  f = good;
  f.push_back("extra");
  expect_bad(f, "3 frames, expected 2");
  f = good;
  f.pop_back();
  expect_bad(f, "1 frames, expected 2");
  f = good;
  f[0].pop_back();
  expect_bad(f, "frame 0 is 15 bytes");
  f = good;
  f[1].push_back('x');
  expect_bad(f, "header says");
  expect_bad(Multipart{}, "no frames");
}

// Every prefix of every body (with the header patched to match) must fail cleanly.
TEST(CodecTest, EveryTruncationIsDataLoss) {
  for (const Message& m : testing::sample_messages()) {
    Multipart f = encode_message(m);
    for (size_t n = 0; n < f[1].size(); ++n) {
      Multipart t = f;
      t[1].resize(n);
      encode_fixed<uint32_t>(t[0].data() + 8, static_cast<uint32_t>(n));
      auto views = views_of(t);
      auto r = decode_message(views);
      ASSERT_FALSE(r.ok()) << message_type_name(type_of(m)) << " truncated to " << n;
      ASSERT_EQ(r.status().code(), StatusCode::kDataLoss);
    }
  }
}

// Flipping any single byte either still decodes (to a valid message) or fails cleanly;
// it never crashes (ASan/UBSan builds check the "never reads out of bounds" part).
TEST(CodecTest, SingleByteCorruptionNeverCrashes) {
  for (const Message& m : testing::sample_messages()) {
    Multipart f = encode_message(m);
    for (size_t i = 0; i < f[1].size(); ++i) {
      for (unsigned char x : {0x01, 0x80, 0xff}) {
        Multipart t = f;
        t[1][i] = static_cast<char>(t[1][i] ^ x);
        auto views = views_of(t);
        auto r = decode_message(views);
        if (r.ok()) {
          Multipart again = encode_message(*r);
          EXPECT_EQ(again[1].size(), t[1].size());
        }
      }
    }
  }
}

TEST(CodecTest, SemanticChecksNameTheField) {
  auto reason = [](const Message& m) {
    Multipart f = encode_message(m);
    auto views = views_of(f);
    auto r = decode_message(views);
    return r.ok() ? std::string("ok") : r.status().message();
  };
  auto base = testing::sample_messages();
  auto pre = std::get<PreAllocation>(base[1]);
  pre.dst_kv_pages[0] = -3;
  EXPECT_NE(reason(pre).find("dst_kv_pages"), std::string::npos);
  pre = std::get<PreAllocation>(base[1]);
  pre.required_dst_info_num = 0;
  EXPECT_NE(reason(pre).find("required_dst_info_num"), std::string::npos);
  pre = std::get<PreAllocation>(base[1]);
  pre.kind = PreAllocKind::kDummy;
  EXPECT_NE(reason(pre).find("'kind'"), std::string::npos);
  pre = std::get<PreAllocation>(base[1]);
  pre.dst_l1_5->page_local_indices.pop_back();
  EXPECT_NE(reason(pre).find("page_local_indices"), std::string::npos);
  pre = std::get<PreAllocation>(base[1]);
  pre.fragments[0].bytes_per_page = 0;
  EXPECT_NE(reason(pre).find("bytes_per_page"), std::string::npos);
  // Naming the registration's fragments and carrying some is ambiguous: which list counts?
  pre = std::get<PreAllocation>(base[1]);
  pre.fragments_from_registration = true;
  EXPECT_NE(reason(pre).find("names its registration's"), std::string::npos);
  pre.fragments.clear();
  EXPECT_EQ(reason(pre), "ok");
  pre.kind = PreAllocKind::kNothingNeeded;
  pre.dst_kv_pages.clear();
  pre.state_slots.clear();
  pre.state_slot_group_ends.clear();
  pre.copy_state_buffers = false;
  EXPECT_NE(reason(pre).find("'kind'"), std::string::npos);

  // State-group ends from the network: monotone, inside the list, the last one its end.
  pre = std::get<PreAllocation>(base[1]);
  pre.state_slot_group_ends = {2, 1, 3};
  EXPECT_NE(reason(pre).find("state_slot_group_ends"), std::string::npos);
  pre.state_slot_group_ends = {1, 4};
  EXPECT_NE(reason(pre).find("state_slot_group_ends"), std::string::npos);
  pre.state_slot_group_ends = {1, 2};
  EXPECT_NE(reason(pre).find("the last group ends at 2"), std::string::npos);
  pre.state_slot_group_ends.assign(kMaxStateGroups + 1, 3);
  EXPECT_NE(reason(pre).find("state_slot_group_ends"), std::string::npos);
  pre.state_slot_group_ends = {0, 3};
  EXPECT_EQ(reason(pre), "ok");
  pre.state_slot_group_ends.clear();  // one list: the older form
  EXPECT_EQ(reason(pre), "ok");

  auto reg = std::get<BufferRegistration>(base[0]);
  reg.layout.kv_layer_groups = {-1, -2};
  EXPECT_NE(reason(reg).find("layout.kv_layer_groups"), std::string::npos);
  reg.layout.kv_layer_groups = {-1};
  EXPECT_NE(reason(reg).find("1 groups for 2 layers"), std::string::npos);
  reg = std::get<BufferRegistration>(base[0]);
  reg.layout.state_buffer_groups = {static_cast<int32_t>(kMaxStateGroups)};
  EXPECT_NE(reason(reg).find("layout.state_buffer_groups"), std::string::npos);
  reg.layout.state_buffer_groups = {0, 1};
  EXPECT_NE(reason(reg).find("2 groups for 1 state buffers"), std::string::npos);
  reg = std::get<BufferRegistration>(base[0]);
  reg.kv_page_strides = {512, 0, 0, 0};
  EXPECT_NE(reason(reg).find("kv_page_strides"), std::string::npos);
  reg.kv_page_strides = {0};
  EXPECT_NE(reason(reg).find("1 strides for 4 buffers"), std::string::npos);
  reg = std::get<BufferRegistration>(base[0]);
  reg.state_page_strides = {1024};  // below the slot of 1 << 16 bytes
  EXPECT_NE(reason(reg).find("state_page_strides"), std::string::npos);
  reg.state_page_strides = {0, 0};
  EXPECT_NE(reason(reg).find("2 strides for 1 buffers"), std::string::npos);

  reg = std::get<BufferRegistration>(base[0]);
  reg.fragments[0].bytes_per_page = 0;
  EXPECT_NE(reason(reg).find("bytes_per_page"), std::string::npos);
  reg = std::get<BufferRegistration>(base[0]);
  reg.kv.lens.pop_back();
  EXPECT_NE(reason(reg).find("differ in count"), std::string::npos);
  reg = std::get<BufferRegistration>(base[0]);
  reg.layout.layer_buffers[0][0] = 9;
  EXPECT_NE(reason(reg).find("layer_buffers"), std::string::npos);
  reg = std::get<BufferRegistration>(base[0]);
  reg.kv.ptrs[0] = UINT64_MAX - 10;
  EXPECT_NE(reason(reg).find("wraps"), std::string::npos);
  reg = std::get<BufferRegistration>(base[0]);
  reg.decode.attn_tp_rank = 9;
  EXPECT_NE(reason(reg).find("identity.attn_tp_rank"), std::string::npos);

  auto st = std::get<TransferStatus>(base[2]);
  st.bootstrap_token = -5;
  EXPECT_NE(reason(st).find("bootstrap_token"), std::string::npos);
}

TEST(CodecTest, OutOfRangeEnumIsRejected) {
  auto st = std::get<TransferStatus>(testing::sample_messages()[2]);
  Multipart f = encode(st);
  f[1][8] = 7;  // state byte follows the 8-byte room
  auto views = views_of(f);
  auto r = decode_transfer_status(views);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'state': value 7 is out of range 0..1"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace pdkv::proto
