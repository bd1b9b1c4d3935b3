// Frame header and field coding of the lease channel (wire.h): byte order, and that every
// malformed header is DataLoss before a payload is read.
#include "engine/lease/wire.h"

#include <gtest/gtest.h>

#include <vector>

namespace pdkv::engine::lease {
namespace {

TEST(LeaseWire, FrameHeaderEncodesLittleEndian) {
  uint8_t h[kFrameHeaderBytes];
  encode_frame_header(MsgType::kGrant, 0x01020304, h);
  const uint8_t want[] = {kWireVersion, 4, 0, 0, 0x04, 0x03, 0x02, 0x01};
  EXPECT_EQ(std::vector<uint8_t>(h, h + 8), std::vector<uint8_t>(want, want + 8));
  auto d = decode_frame_header(h);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->type, MsgType::kGrant);
  EXPECT_EQ(d->payload_bytes, 0x01020304u);
}

TEST(LeaseWire, MalformedFrameHeadersAreDataLoss) {
  auto bad = [](std::vector<uint8_t> h) { return decode_frame_header(h).status().code(); };
  std::vector<uint8_t> ok(kFrameHeaderBytes);
  encode_frame_header(MsgType::kDone, 8, ok.data());
  ASSERT_TRUE(decode_frame_header(ok).ok());
  EXPECT_EQ(bad({ok.begin(), ok.begin() + 7}), StatusCode::kDataLoss);  // truncated
  auto version = ok;
  version[0] = kWireVersion + 1;
  EXPECT_EQ(bad(version), StatusCode::kDataLoss);
  for (uint8_t type : {uint8_t{0}, static_cast<uint8_t>(kMaxMsgType + 1)}) {
    auto t = ok;
    t[1] = type;
    EXPECT_EQ(bad(t), StatusCode::kDataLoss);
  }
  auto zero = ok;
  zero[3] = 1;
  EXPECT_EQ(bad(zero), StatusCode::kDataLoss);
  std::vector<uint8_t> big(kFrameHeaderBytes);
  encode_frame_header(MsgType::kRegions, kMaxPayloadBytes + 1, big.data());
  EXPECT_EQ(bad(big), StatusCode::kDataLoss);
}

TEST(LeaseWire, ReaderFailsOnShortInputWithoutConsuming) {
  std::vector<uint8_t> buf;
  Writer(buf).u32(7);
  Reader in(buf);
  uint64_t v64 = 0;
  EXPECT_EQ(in.u64(&v64).code(), StatusCode::kDataLoss);
  uint32_t v32 = 0;
  ASSERT_TRUE(in.u32(&v32).ok());
  EXPECT_EQ(v32, 7u);
  EXPECT_EQ(in.remaining(), 0u);
}

TEST(LeaseWire, BytesLongerThanTheInputAreDataLoss) {
  std::vector<uint8_t> buf;
  Writer(buf).u32(1000);
  buf.push_back('x');
  Reader in(buf);
  std::string s;
  EXPECT_EQ(in.bytes(&s).code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace pdkv::engine::lease
