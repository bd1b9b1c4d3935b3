#include "engine/backends/tcp/tcp_frame.h"

#include <gtest/gtest.h>

namespace pdkv::engine::tcp {
namespace {

std::vector<uint8_t> part_frame(uint32_t count, uint64_t payload) {
  std::vector<uint8_t> out(kHeaderSize);
  FrameHeader h;
  h.type = FrameType::kPart;
  h.part_id = 0x0102030405060708ull;
  h.count = count;
  h.payload_bytes = payload;
  encode_header(h, out.data());
  return out;
}

TEST(TcpFrame, HeaderByteOrderIsLittleEndian) {
  std::vector<uint8_t> f = part_frame(3, 0x1122);
  const uint8_t expected[] = {'P', 'D', 'K', 'V', 1, 3, 0, 0, 8,    7,    6, 5, 4, 3, 2, 1,
                              3,   0,   0,   0,   0, 0, 0, 0, 0x22, 0x11, 0, 0, 0, 0, 0, 0};
  ASSERT_EQ(f.size(), sizeof expected);
  EXPECT_EQ(0, memcmp(f.data(), expected, sizeof expected));
  auto h = decode_header(f, 16);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->part_id, 0x0102030405060708ull);
  EXPECT_EQ(h->count, 3u);
  EXPECT_EQ(h->payload_bytes, 0x1122u);
}

TEST(TcpFrame, RejectsTruncatedBadMagicVersionTypeFlags) {
  std::vector<uint8_t> f = part_frame(1, 1);
  EXPECT_EQ(decode_header(std::span(f).first(31), 16).status().code(), StatusCode::kDataLoss);
  for (size_t byte : {0u, 4u, 5u, 6u}) {
    std::vector<uint8_t> bad = f;
    bad[byte] ^= 0x40;
    EXPECT_EQ(decode_header(bad, 16).status().code(), StatusCode::kDataLoss) << byte;
  }
}

TEST(TcpFrame, EnforcesCountLimitBeforeAllocating) {
  EXPECT_EQ(decode_header(part_frame(17, 100), 16).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(decode_header(part_frame(0, 100), 16).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(decode_header(part_frame(4, 3), 16).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(decode_header(part_frame(1, kMaxPartPayload + 1), 16).status().code(),
            StatusCode::kDataLoss);
}

TEST(TcpFrame, EntriesMustSumToPayload) {
  auto h = decode_header(part_frame(2, 30), 16);
  ASSERT_TRUE(h.ok());
  std::vector<uint8_t> table(2 * kEntrySize);
  encode_entry(0x1000, 10, table.data());
  encode_entry(0x2000, 20, table.data() + kEntrySize);
  std::vector<DstRange> out;
  ASSERT_TRUE(decode_entries(table, *h, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].addr, 0x2000u);
  encode_entry(0x2000, 21, table.data() + kEntrySize);
  EXPECT_EQ(decode_entries(table, *h, &out).code(), StatusCode::kDataLoss);
  encode_entry(0x2000, UINT64_MAX, table.data() + kEntrySize);
  EXPECT_EQ(decode_entries(table, *h, &out).code(), StatusCode::kDataLoss);
  encode_entry(0x2000, 0, table.data() + kEntrySize);
  EXPECT_EQ(decode_entries(table, *h, &out).code(), StatusCode::kDataLoss);
  EXPECT_EQ(decode_entries(std::span(table).first(17), *h, &out).code(), StatusCode::kDataLoss);
}

TEST(TcpFrame, AckRoundTrip) {
  std::vector<uint8_t> ack = encode_ack(7, 0, out_of_range("entry 3 bad"), 3, 0xabc);
  auto h = decode_header(ack, 1);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->type, FrameType::kAck);
  EXPECT_EQ(static_cast<StatusCode>(h->aux), StatusCode::kOutOfRange);
  auto body = decode_ack_body(std::span(ack).subspan(kHeaderSize), *h);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(body->entry_index, 3u);
  EXPECT_EQ(body->bad_addr, 0xabcu);
  EXPECT_EQ(body->message, "entry 3 bad");
}

}  // namespace
}  // namespace pdkv::engine::tcp
