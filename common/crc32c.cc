#include "common/crc32c.h"

#include <array>
#include <cstring>

namespace pdkv {
namespace {

constexpr uint32_t kReflectedPolynomial = 0x82F63B78u;

// Slice-by-8 tables: table[k][b] is the CRC of byte b followed by k zero bytes, so eight
// input bytes fold into the state with eight lookups instead of eight dependent steps.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kReflectedPolynomial : 0u);
    t[0][b] = c;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
  return t;
}

constexpr Tables kTables = make_tables();

uint32_t extend_table(uint32_t state, const unsigned char* p, size_t n) {
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // little-endian hosts only (x86-64, aarch64)
    word ^= state;
    state = kTables[7][word & 0xFF] ^ kTables[6][(word >> 8) & 0xFF] ^
            kTables[5][(word >> 16) & 0xFF] ^ kTables[4][(word >> 24) & 0xFF] ^
            kTables[3][(word >> 32) & 0xFF] ^ kTables[2][(word >> 40) & 0xFF] ^
            kTables[1][(word >> 48) & 0xFF] ^ kTables[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) state = (state >> 8) ^ kTables[0][(state ^ *p++) & 0xFF];
  return state;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t extend_sse42(uint32_t state, const unsigned char* p,
                                                        size_t n) {
  uint64_t s = state;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    s = __builtin_ia32_crc32di(s, word);
    p += 8;
    n -= 8;
  }
  auto s32 = static_cast<uint32_t>(s);
  while (n-- > 0) s32 = __builtin_ia32_crc32qi(s32, *p++);
  return s32;
}

bool have_sse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

}  // namespace

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t length) {
  return ~extend_table(~crc, static_cast<const unsigned char*>(data), length);
}

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t length) {
#if defined(__x86_64__)
  if (have_sse42()) return ~extend_sse42(~crc, static_cast<const unsigned char*>(data), length);
#endif
  return crc32c_extend_portable(crc, data, length);
}

const char* crc32c_implementation() {
#if defined(__x86_64__)
  if (have_sse42()) return "sse4.2";
#endif
  return "table";
}

}  // namespace pdkv
