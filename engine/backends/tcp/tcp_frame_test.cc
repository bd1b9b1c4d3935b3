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

TEST(TcpFrame, EntryCarriesItsWriteGrantLast) {
  std::vector<uint8_t> table(kEntrySize);
  encode_entry({0x1000, 10, 1, 0, 0x0102030405060708ull}, table.data());
  EXPECT_EQ(table[32], 0x08);
  EXPECT_EQ(table[39], 0x01);
  FrameHeader h;
  h.type = FrameType::kPart;
  h.count = 1;
  h.payload_bytes = 10;
  std::vector<WireEntry> out;
  ASSERT_TRUE(decode_entries(table, h, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].grant, 0x0102030405060708ull);
}

TEST(TcpFrame, HeaderByteOrderIsLittleEndian) {
  std::vector<uint8_t> f = part_frame(3, 0x1122);
  const uint8_t expected[] = {'P', 'D', 'K', 'V', 4, 3, 0, 0, 8,    7,    6, 5, 4, 3, 2, 1,
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

TEST(TcpFrame, OnlyAPartMayCarryANoteAndItsLengthIsBounded) {
  auto with = [](FrameType type, uint16_t flags, uint32_t aux) {
    FrameHeader h;
    h.type = type;
    h.flags = flags;
    h.aux = aux;
    h.count = type == FrameType::kPart ? 1 : 0;
    h.payload_bytes = type == FrameType::kPart ? 10 : 0;
    std::vector<uint8_t> out(kHeaderSize);
    encode_header(h, out.data());
    return decode_header(out, 16);
  };
  auto noted = with(FrameType::kPart, kPartHasNote, 100);
  ASSERT_TRUE(noted.ok()) << noted.status().to_string();
  EXPECT_EQ(noted->flags, kPartHasNote);
  EXPECT_EQ(noted->aux, 100u);
  EXPECT_TRUE(with(FrameType::kPart, kPartHasNote, kMaxNoteBytes).ok());
  for (uint32_t bad_len : {0u, static_cast<uint32_t>(kMaxNoteBytes) + 1, 0xffffffffu}) {
    EXPECT_EQ(with(FrameType::kPart, kPartHasNote, bad_len).status().code(), StatusCode::kDataLoss)
        << bad_len;
  }
  EXPECT_EQ(with(FrameType::kPart, 0, 5).status().code(), StatusCode::kDataLoss);  // aux, no note
  EXPECT_EQ(with(FrameType::kPart, 2, 5).status().code(), StatusCode::kDataLoss);  // unknown flag
  EXPECT_EQ(with(FrameType::kHello, kPartHasNote, 0).status().code(), StatusCode::kDataLoss);
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
  encode_entry({0x1000, 10, 1, 0}, table.data());
  encode_entry({0x2000, 20, 1, 0}, table.data() + kEntrySize);
  std::vector<WireEntry> out;
  ASSERT_TRUE(decode_entries(table, *h, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].addr, 0x2000u);
  encode_entry({0x2000, 21, 1, 0}, table.data() + kEntrySize);
  EXPECT_EQ(decode_entries(table, *h, &out).code(), StatusCode::kDataLoss);
  encode_entry({0x2000, UINT64_MAX, 1, 0}, table.data() + kEntrySize);
  EXPECT_EQ(decode_entries(table, *h, &out).code(), StatusCode::kDataLoss);
  encode_entry({0x2000, 0, 1, 0}, table.data() + kEntrySize);
  EXPECT_EQ(decode_entries(table, *h, &out).code(), StatusCode::kDataLoss);
  EXPECT_EQ(decode_entries(std::span(table).first(17), *h, &out).code(), StatusCode::kDataLoss);
}

TEST(TcpFrame, RunEntriesCarryPiecesAtAStride) {
  auto h = decode_header(part_frame(2, 16 * 512 + 7), 16);
  ASSERT_TRUE(h.ok());
  std::vector<uint8_t> table(2 * kEntrySize);
  encode_entry({0x10000, 512, 16, 1024}, table.data());
  encode_entry({0x90000, 7, 1, 0}, table.data() + kEntrySize);
  std::vector<WireEntry> out;
  ASSERT_TRUE(decode_entries(table, *h, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].pieces, 16u);
  EXPECT_EQ(out[0].stride, 1024u);
  EXPECT_EQ(out[0].bytes(), 16u * 512);
  EXPECT_EQ(out[0].extent_end(), 0x10000u + 15 * 1024 + 512);
}

TEST(TcpFrame, RejectsMalformedRuns) {
  auto h = decode_header(part_frame(1, 4 * 512), 16);
  ASSERT_TRUE(h.ok());
  std::vector<uint8_t> table(kEntrySize);
  std::vector<WireEntry> out;
  auto rejects = [&](WireEntry e) {
    encode_entry(e, table.data());
    return decode_entries(table, *h, &out).code() == StatusCode::kDataLoss;
  };
  EXPECT_FALSE(rejects({0x1000, 512, 4, 512}));                 // back to back: allowed
  EXPECT_TRUE(rejects({0x1000, 512, 4, 511}));                  // pieces would overlap
  EXPECT_TRUE(rejects({0x1000, 512, 4, 0}));                    // every piece at one place
  EXPECT_TRUE(rejects({0x1000, 4 * 512, 1, 64}));               // one piece with a stride
  EXPECT_TRUE(rejects({0x1000, 512, 0, 512}));                  // no pieces
  EXPECT_TRUE(rejects({UINT64_MAX - 4096, 512, 4, 4096}));      // wraps the address space
  EXPECT_TRUE(rejects({0x1000, 512, uint64_t{1} << 62, 512}));  // pieces x length overflows
  EXPECT_TRUE(rejects({0x1000, 1, 4 * 512 + 1, 1}));            // more than the payload
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
