#include "kv/pipeline/transfer_checksum.h"

#include <fmt/format.h>

#include "common/crc32c.h"
#include "engine/device/registered_bytes.h"

namespace pdkv::kv {
namespace {

Status extend(uint32_t* crc, const engine::DeviceRegions& device, uint64_t addr, uint64_t length) {
  return engine::visit_registered_bytes(
      device, addr, length, [&](const uint8_t* p, size_t n) { *crc = crc32c_extend(*crc, p, n); });
}

}  // namespace

Status TransferChecksum::add(std::span<const engine::WriteBlock> writes,
                             const engine::DeviceRegions& device) {
  for (const engine::WriteBlock& w : writes) {
    if (w.length == 0) continue;
    PDKV_RETURN_IF_ERROR(extend(&crc_, device, w.src_addr, w.length));
    const size_t n = ranges_.size();
    if (n >= 2 && ranges_[n - 2] + ranges_[n - 1] == w.dst_addr) {
      ranges_[n - 1] += w.length;
    } else {
      ranges_.push_back(w.dst_addr);
      ranges_.push_back(w.length);
    }
  }
  return Status();
}

Result<GrantedDestination> granted_destination(engine::WriteGrant grant) {
  PDKV_RETURN_IF_ERROR(engine::normalize_grant(grant));
  GrantedDestination out;
  engine::for_each_granted_range(grant, [&](uint64_t, uint64_t len) { out.bytes += len; });
  out.grant = std::move(grant);
  return out;
}

Status check_ranges_granted(std::span<const uint64_t> ranges, const GrantedDestination& granted) {
  if (ranges.size() % 2 != 0) {
    return invalid_argument(
        fmt::format("checksum regions: {} words is not a list of [addr, len]", ranges.size()));
  }
  // Every region is at least one byte, so more regions than granted bytes cannot fit.
  if (ranges.size() / 2 > granted.bytes) {
    return invalid_argument(
        fmt::format("{} checksum regions, more than the room's {} granted bytes", ranges.size() / 2,
                    granted.bytes));
  }
  uint64_t total = 0;
  for (size_t i = 0; i < ranges.size(); i += 2) {
    const uint64_t addr = ranges[i], len = ranges[i + 1];
    if (len == 0) return invalid_argument(fmt::format("checksum region {} is empty", i / 2));
    // total <= granted.bytes before the add, so this cannot overflow past the check.
    if (len > granted.bytes - total) {
      return invalid_argument(fmt::format(
          "checksum regions name more than the room's {} granted bytes", granted.bytes));
    }
    total += len;
    if (!engine::grant_covers(granted.grant, addr, len, nullptr)) {
      return invalid_argument(
          fmt::format("checksum region {} [{:#x}, +{}) is not inside the room's destination", i / 2,
                      addr, len));
    }
  }
  return Status();
}

Status verify_transfer_checksum(uint32_t expected, std::span<const uint64_t> ranges,
                                const engine::MemoryRegistry& registered,
                                const engine::DeviceRegions& device) {
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
    Status read = extend(&crc, device, ranges[i], ranges[i + 1]);
    if (!read.ok()) {
      return data_loss(
          fmt::format("checksum region {} could not be read back: {}", i / 2, read.to_string()));
    }
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
