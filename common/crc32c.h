// CRC-32C (Castagnoli, the iSCSI / ext4 / RocksDB polynomial 0x1EDC6F41, reflected) for
// the optional end-to-end check of transferred KV bytes (PDKV_VERIFY_CHECKSUM).
//
// crc32c_extend(crc32c(a), b) == crc32c(a + b), so a transfer's checksum can be built
// block by block on the sender and region by region on the receiver. Uses the SSE4.2
// crc32 instruction when the CPU has it (several GB/s), a table otherwise.
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pdkv {

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t length);
inline uint32_t crc32c(const void* data, size_t length) { return crc32c_extend(0, data, length); }
inline uint32_t crc32c(std::string_view s) { return crc32c(s.data(), s.size()); }

// The table implementation, always; exposed so tests compare both paths.
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t length);
// "sse4.2" or "table": which one crc32c_extend uses on this CPU.
const char* crc32c_implementation();

}  // namespace pdkv
