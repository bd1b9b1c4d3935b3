#include "kv/pipeline/transfer_checksum.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "common/crc32c.h"

namespace pdkv::kv {
namespace {

uint64_t addr_of(const std::vector<uint8_t>& v, size_t offset = 0) {
  return reinterpret_cast<uint64_t>(v.data() + offset);
}

struct Copy {
  std::vector<uint8_t> src = std::vector<uint8_t>(256);
  std::vector<uint8_t> dst = std::vector<uint8_t>(256, 0);
  engine::MemoryRegistry registered;
  engine::DeviceRegions device;  // none: host memory throughout
  TransferChecksum sum;

  Copy() {
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
    EXPECT_TRUE(registered.add(addr_of(dst), dst.size()).ok());
  }
  // src[s, s+n) to dst[d, d+n).
  struct Piece {
    size_t s, d, n;
  };
  // Sums then "transfers" (copies) each piece in turn, one add() each.
  void write(std::initializer_list<Piece> pieces) {
    for (const Piece& p : pieces) {
      engine::WriteBlock w{addr_of(src, p.s), addr_of(dst, p.d), p.n};
      EXPECT_TRUE(sum.add(std::span(&w, 1), device).ok());
      std::copy_n(src.begin() + p.s, p.n, dst.begin() + p.d);
    }
  }
  // What the receiver concludes from the sum and ranges sent.
  Status verify() const {
    return verify_transfer_checksum(sum.value(), sum.ranges(), registered, device);
  }
};

TEST(TransferChecksumTest, ScatteredWritesVerifyOnTheReceiver) {
  Copy c;
  c.write({{0, 128, 16}, {16, 0, 32}, {48, 200, 8}});
  ASSERT_EQ(c.sum.ranges().size(), 6u);
  EXPECT_TRUE(c.verify().ok());
}

TEST(TransferChecksumTest, ContiguousDestinationsMergeIntoOneRegion) {
  Copy c;
  c.write({{0, 10, 4}, {100, 14, 6}, {50, 20, 1}});
  ASSERT_EQ(c.sum.ranges().size(), 2u);
  EXPECT_EQ(c.sum.ranges()[1], 11u);
  EXPECT_TRUE(c.verify().ok());
}

TEST(TransferChecksumTest, AFlippedDestinationByteIsDataLoss) {
  Copy c;
  c.write({{0, 0, 64}});
  c.dst[33] ^= 1;
  Status s = c.verify();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.to_string();
}

TEST(TransferChecksumTest, ARegionOutsideRegisteredMemoryIsRefusedBeforeReading) {
  Copy c;
  std::vector<uint8_t> other(64, 1);
  const uint64_t end = addr_of(c.dst) + c.dst.size();
  const std::vector<std::vector<uint64_t>> hostile = {
      {addr_of(other), 8},             // another allocation
      {end - 4, 8},                    // runs past the end
      {addr_of(c.dst), ~uint64_t{0}},  // length overflows
      {addr_of(c.dst) - 1, 1},         // one byte before
      {addr_of(c.dst)},                // odd word count
  };
  for (const auto& ranges : hostile) {
    Status s = verify_transfer_checksum(0, ranges, c.registered, c.device);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  }
  const std::vector<uint64_t> last_byte = {end - 1, 1};
  EXPECT_TRUE(
      verify_transfer_checksum(crc32c(&c.dst.back(), 1), last_byte, c.registered, c.device).ok());
}

TEST(TransferChecksumTest, RegionsAreFoundAmongManyRegistrations) {
  std::vector<std::vector<uint8_t>> bufs(5, std::vector<uint8_t>(32, 9));
  engine::MemoryRegistry sorted;
  for (auto it = bufs.rbegin(); it != bufs.rend(); ++it) {
    ASSERT_TRUE(sorted.add(addr_of(*it), 32).ok());
  }
  std::vector<uint64_t> ranges;
  uint32_t crc = 0;
  for (auto& b : bufs) {
    ranges.insert(ranges.end(), {addr_of(b, 4), 20});
    crc = crc32c_extend(crc, b.data() + 4, 20);
  }
  EXPECT_TRUE(verify_transfer_checksum(crc, ranges, sorted, engine::DeviceRegions()).ok());
}

// A room granted two 64-byte items of a 256-byte buffer: what its statuses may name.
GrantedDestination two_items(const std::vector<uint8_t>& buf) {
  engine::ItemSet set;
  set.buffers = std::make_shared<const std::vector<engine::ItemBuffer>>(
      std::vector<engine::ItemBuffer>{{addr_of(buf), buf.size(), 64}});
  set.items = {3, 1};
  engine::WriteGrant grant;
  grant.sets.push_back(set);
  auto g = granted_destination(std::move(grant));
  EXPECT_TRUE(g.ok());
  return std::move(*g);
}

TEST(TransferChecksumTest, AnHonestStatusStaysInsideItsRoomsGrant) {
  std::vector<uint8_t> buf(256);
  const GrantedDestination g = two_items(buf);
  EXPECT_EQ(g.bytes, 128u);
  const std::vector<uint64_t> ranges = {addr_of(buf, 192), 64, addr_of(buf, 64), 10,
                                        addr_of(buf, 74),  54};
  EXPECT_TRUE(check_ranges_granted(ranges, g).ok());
  EXPECT_TRUE(check_ranges_granted({}, g).ok());
}

TEST(TransferChecksumTest, RegionsOutsideOrBeyondTheGrantAreRefusedBeforeReading) {
  std::vector<uint8_t> buf(256);
  const GrantedDestination g = two_items(buf);
  // Registered but not granted to this room (item 0).
  EXPECT_EQ(check_ranges_granted(std::vector<uint64_t>{addr_of(buf), 8}, g).code(),
            StatusCode::kInvalidArgument);
  // Spills out of a granted item into one that is not.
  EXPECT_FALSE(check_ranges_granted(std::vector<uint64_t>{addr_of(buf, 100), 64}, g).ok());
  // Granted bytes named over and over: more than the room holds in all.
  std::vector<uint64_t> repeated;
  for (int i = 0; i < 3; ++i) repeated.insert(repeated.end(), {addr_of(buf, 64), 64});
  EXPECT_FALSE(check_ranges_granted(repeated, g).ok());
  // Millions of regions: refused by their count alone.
  std::vector<uint64_t> many(4u << 20, 0);
  EXPECT_FALSE(check_ranges_granted(many, g).ok());
  // Empty regions and an odd word count.
  EXPECT_FALSE(check_ranges_granted(std::vector<uint64_t>{addr_of(buf, 64), 0}, g).ok());
  EXPECT_FALSE(check_ranges_granted(std::vector<uint64_t>{addr_of(buf, 64)}, g).ok());
}

}  // namespace
}  // namespace pdkv::kv
