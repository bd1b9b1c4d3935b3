#include "engine/device/device_regions.h"

#include <fmt/format.h>

namespace pdkv::engine {

Status DeviceRegions::add(uint64_t addr, uint64_t length, int device) {
  MutexLock lock(mu_);
  if (lookup(addr, length) != kHost) {
    return failed_precondition(
        fmt::format("device range {:#x}+{} overlaps a registered device region", addr, length));
  }
  regions_[addr] = Entry{length, device};
  count_.store(regions_.size(), std::memory_order_release);
  return Status();
}

void DeviceRegions::remove(uint64_t addr) {
  MutexLock lock(mu_);
  regions_.erase(addr);
  count_.store(regions_.size(), std::memory_order_release);
}

int DeviceRegions::lookup(uint64_t addr, uint64_t length) const {
  const uint64_t end = addr + length;  // the engine rejects ranges that overflow
  auto it = regions_.upper_bound(addr);
  if (it != regions_.begin()) {
    auto prev = std::prev(it);
    const uint64_t prev_end = prev->first + prev->second.length;
    if (prev_end > addr) return end <= prev_end ? prev->second.device : kMixed;
  }
  // Nothing covers addr; a region starting inside the range makes it mixed.
  return (it != regions_.end() && it->first < end) ? kMixed : kHost;
}

int DeviceRegions::device_of(uint64_t addr, uint64_t length) const {
  if (empty()) return kHost;
  MutexLock lock(mu_);
  return lookup(addr, length);
}

DeviceRegions::RunPlace DeviceRegions::place_run(uint64_t addr, uint64_t length, uint64_t pieces,
                                                 uint64_t stride) const {
  if (empty()) return RunPlace{};
  MutexLock lock(mu_);
  // The run's extent first: inside one region means every piece is, and in one allocation.
  uint64_t extent = length;
  const bool wraps = pieces > 1 && (__builtin_mul_overflow(pieces - 1, stride, &extent) ||
                                    __builtin_add_overflow(extent, length, &extent));
  if (!wraps) {
    const int whole = lookup(addr, extent);
    if (whole != kMixed) return RunPlace{whole, false};
  }
  // Piece by piece: host pieces around (not into) device memory are still host; device
  // pieces of one device in several regions are that device's, copied one by one.
  int kind = lookup(addr, length);
  for (uint64_t i = 1; i < pieces && kind != kMixed; ++i) {
    if (lookup(addr + i * stride, length) != kind) kind = kMixed;
  }
  return RunPlace{kind, kind >= 0};
}

}  // namespace pdkv::engine
