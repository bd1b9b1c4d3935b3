#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace pdkv {
namespace {

// RFC 3720 (iSCSI) appendix B.4 test vectors.
TEST(Crc32cTest, MatchesRfc3720Vectors) {
  std::vector<uint8_t> zeros(32, 0x00), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<uint8_t>(i);
    down[i] = static_cast<uint8_t>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up.data(), up.size()), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down.data(), down.size()), 0x113FDB5Cu);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(Crc32cTest, ExtendingByPiecesEqualsTheWhole) {
  std::mt19937_64 rng(7);
  std::string data(10007, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  const uint32_t whole = crc32c(data);
  for (size_t cut : {0ul, 1ul, 7ul, 8ul, 9ul, 4096ul, 10006ul, 10007ul}) {
    uint32_t c = crc32c(data.data(), cut);
    c = crc32c_extend(c, data.data() + cut, data.size() - cut);
    EXPECT_EQ(c, whole) << "cut at " << cut;
  }
}

TEST(Crc32cTest, PortableAndFastPathsAgreeOnEveryLengthAndAlignment) {
  std::mt19937_64 rng(11);
  std::string data(300, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t len = 0; len + offset <= data.size(); len += 13) {
      EXPECT_EQ(crc32c_extend(0x1234u, data.data() + offset, len),
                crc32c_extend_portable(0x1234u, data.data() + offset, len))
          << "offset " << offset << " len " << len << " via " << crc32c_implementation();
    }
  }
}

TEST(Crc32cTest, DetectsASingleFlippedBit) {
  std::string data(4096, 'x');
  const uint32_t before = crc32c(data);
  data[1234] ^= 0x10;
  EXPECT_NE(crc32c(data), before);
}

}  // namespace
}  // namespace pdkv
