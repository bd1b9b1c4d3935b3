#include "kv/transfer_checksum.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/crc32c.h"

namespace pdkv::kv {
namespace {

// Whether [addr, addr + length) lies in one registered region (regions do not overlap:
// the engine refuses overlapping registrations).
bool inside_registered(uint64_t addr, uint64_t length, std::span<const MemoryRegion> registered) {
  auto after = std::upper_bound(registered.begin(), registered.end(), addr,
                                [](uint64_t a, const MemoryRegion& r) { return a < r.addr; });
  if (after == registered.begin()) return false;
  const MemoryRegion& r = *(after - 1);
  const uint64_t offset = addr - r.addr;
  return offset <= r.length && length <= r.length - offset;
}

}  // namespace

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

std::vector<MemoryRegion> sorted_regions(std::vector<MemoryRegion> regions) {
  std::erase_if(regions, [](const MemoryRegion& r) { return r.length == 0; });
  std::sort(regions.begin(), regions.end(),
            [](const MemoryRegion& a, const MemoryRegion& b) { return a.addr < b.addr; });
  return regions;
}

Status verify_transfer_checksum(uint32_t expected, std::span<const uint64_t> ranges,
                                std::span<const MemoryRegion> registered) {
  if (ranges.size() % 2 != 0) {
    return invalid_argument(
        fmt::format("checksum regions: {} words is not a list of [addr, len]", ranges.size()));
  }
  for (size_t i = 0; i < ranges.size(); i += 2) {
    if (!inside_registered(ranges[i], ranges[i + 1], registered)) {
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
