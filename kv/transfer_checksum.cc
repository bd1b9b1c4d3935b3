#include "kv/transfer_checksum.h"

#include <fmt/format.h>

#include "common/crc32c.h"

namespace pdkv::kv {
void TransferChecksum::add(std::span<const engine::WriteBlock> writes) {
  for (const engine::WriteBlock& w : writes) {
    if (w.length == 0) continue;
    crc_ = crc32c_extend(crc_, reinterpret_cast<const void*>(w.src_addr), w.length);
    const size_t n = ranges_.size();
    if (n >= 2 && ranges_[n - 2] + ranges_[n - 1] == w.dst_addr) {
      ranges_[n - 1] += w.length;
    } else {
      ranges_.push_back(w.dst_addr);
      ranges_.push_back(w.length);
    }
  }
}

Status verify_transfer_checksum(uint32_t expected, std::span<const uint64_t> ranges,
                                const engine::MemoryRegistry& registered) {
  if (ranges.size() % 2 != 0) {
    return invalid_argument(
        fmt::format("checksum regions: {} words is not a list of [addr, len]", ranges.size()));
  }
  for (size_t i = 0; i < ranges.size(); i += 2) {
    if (!registered.check(ranges[i], ranges[i + 1]).ok()) {
      return invalid_argument(
          fmt::format("checksum region {} [{:#x}, +{}) is outside this rank's registered memory",
                      i / 2, ranges[i], ranges[i + 1]));
    }
  }
  uint32_t crc = 0;
  for (size_t i = 0; i < ranges.size(); i += 2) {
    crc = crc32c_extend(crc, reinterpret_cast<const void*>(ranges[i]), ranges[i + 1]);
  }
  if (crc != expected) {
    return data_loss(fmt::format(
        "checksum mismatch: the prefill sent crc32c {:#010x} over {} regions, the bytes here "
        "sum to {:#010x}",
        expected, ranges.size() / 2, crc));
  }
  return Status();
}

}  // namespace pdkv::kv
