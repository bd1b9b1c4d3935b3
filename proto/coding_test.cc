#include "proto/coding.h"

#include <gtest/gtest.h>

#include <limits>

namespace pdkv::proto {
namespace {

TEST(CodingTest, FixedWidthIsLittleEndian) {
  std::string s;
  put_u16(&s, 0x0201);
  put_u32(&s, 0x06050403);
  put_u64(&s, 0x0e0d0c0b0a090807ull);
  put_i32(&s, -2);
  put_i64(&s, -1);
  put_u8(&s, 0x42);
  put_bool(&s, true);
  const unsigned char expected[] = {1,    2,    3,    4,    5,    6,    7,    8,    9,    10,
                                    11,   12,   13,   14,   0xfe, 0xff, 0xff, 0xff, 0xff, 0xff,
                                    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x42, 1};
  ASSERT_EQ(s.size(), sizeof(expected));
  EXPECT_EQ(0, std::memcmp(s.data(), expected, sizeof(expected)));
}

TEST(CodingTest, ArraysAndBytesCarryACountFirst) {
  std::string s;
  std::vector<int64_t> v = {1, -1};
  put_array<int64_t>(&s, v);
  put_bytes(&s, "ab");
  put_bool_array(&s, {true, false});
  std::string expected(
      "\x02\x00\x00\x00"
      "\x01\x00\x00\x00\x00\x00\x00\x00"
      "\xff\xff\xff\xff\xff\xff\xff\xff"
      "\x02\x00\x00\x00"
      "ab"
      "\x02\x00\x00\x00\x01\x00",
      4 + 16 + 4 + 2 + 6);
  EXPECT_EQ(s, expected);
}

TEST(CodingTest, RoundTripsExtremes) {
  std::string s;
  put_u64(&s, std::numeric_limits<uint64_t>::max());
  put_i64(&s, std::numeric_limits<int64_t>::min());
  put_i32(&s, std::numeric_limits<int32_t>::min());
  WireReader r("t", s);
  EXPECT_EQ(r.u64("a"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(r.i64("b"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(r.i32("c"), std::numeric_limits<int32_t>::min());
  EXPECT_TRUE(r.finish().ok());
}

TEST(CodingTest, ShortInputFailsNamingTheField) {
  std::string s("\x01\x02\x03", 3);
  WireReader r("Msg", s);
  EXPECT_EQ(r.u32("room"), 0u);
  Status st = r.finish();
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("Msg: field 'room'"), std::string::npos) << st.to_string();
}

TEST(CodingTest, ForgedCountIsRejectedBeforeAllocating) {
  std::string s;
  put_u32(&s, 0xffffffffu);  // claims 4 G elements, 0 present
  WireReader r("Msg", s);
  EXPECT_TRUE(r.array<int64_t>("pages", std::numeric_limits<uint32_t>::max()).empty());
  EXPECT_NE(r.finish().message().find("exceeds the 0 bytes left"), std::string::npos);
}

TEST(CodingTest, CountAboveLimitIsRejected) {
  std::string s;
  put_array<int32_t>(&s, std::vector<int32_t>{1, 2, 3});
  WireReader r("Msg", s);
  EXPECT_TRUE(r.array<int32_t>("ids", 2).empty());
  EXPECT_NE(r.finish().message().find("exceeds the limit 2"), std::string::npos);
}

TEST(CodingTest, BoolMustBeZeroOrOne) {
  std::string s("\x02", 1);
  WireReader r("Msg", s);
  r.boolean("flag");
  EXPECT_FALSE(r.finish().ok());
  std::string arr("\x01\x00\x00\x00\x07", 5);
  WireReader r2("Msg", arr);
  r2.bool_array("mask", 10);
  EXPECT_NE(r2.finish().message().find("mask"), std::string::npos);
}

TEST(CodingTest, TrailingBytesAreAnError) {
  std::string s("\x01\x00", 2);
  WireReader r("Msg", s);
  r.u8("a");
  EXPECT_NE(r.finish().message().find("1 trailing bytes"), std::string::npos);
}

TEST(CodingTest, FirstFailureIsKept) {
  WireReader r("Msg", "");
  r.u8("first");
  r.u64("second");
  EXPECT_NE(r.finish().message().find("'first'"), std::string::npos);
}

}  // namespace
}  // namespace pdkv::proto
