#include "engine/memory_registry.h"

#include <limits>
#include <string>

#include "common/logging.h"

namespace pdkv::engine {
namespace {
std::string hex(uint64_t v) { return fmt::format("{:#x}", v); }
}  // namespace

Status MemoryRegistry::add(uint64_t addr, uint64_t length) {
  if (length == 0) return invalid_argument("register_memory: length 0 at " + hex(addr));
  if (addr > std::numeric_limits<uint64_t>::max() - length) {
    return invalid_argument("register_memory: range " + hex(addr) + "+" + std::to_string(length) +
                            " overflows");
  }
  MutexLock lock(mu_);
  auto next = regions_.lower_bound(addr);
  if (next != regions_.end() && next->first < addr + length) {
    return failed_precondition("register_memory: " + hex(addr) + "+" + std::to_string(length) +
                               " overlaps region " + hex(next->first));
  }
  if (next != regions_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > addr) {
      return failed_precondition("register_memory: " + hex(addr) + "+" + std::to_string(length) +
                                 " overlaps region " + hex(prev->first));
    }
  }
  regions_.emplace(addr, length);
  return Status();
}

Status MemoryRegistry::remove(uint64_t addr, uint64_t* length_out) {
  MutexLock lock(mu_);
  auto it = regions_.find(addr);
  if (it == regions_.end()) return not_found("unregister_memory: no region at " + hex(addr));
  if (length_out != nullptr) *length_out = it->second;
  regions_.erase(it);
  // Pins taken from now on validate against the shrunken map; wait only for older ones.
  const uint64_t removal_epoch = epoch_++;
  while (!pins_cv_.wait_for(mu_, std::chrono::seconds(1), [&]() PDKV_REQUIRES(mu_) {
    return pins_.empty() || pins_.begin()->first > removal_epoch;
  })) {
    PDKV_LOG_DEBUG("unregister_memory {}: waiting for writes in flight", hex(addr));
  }
  return Status();
}

bool MemoryRegistry::covered(uint64_t addr, uint64_t length, uint64_t* first_bad) const {
  if (length == 0) return true;
  uint64_t cursor = addr;
  // Overflow-safe end: a range that wraps is never covered.
  if (addr > std::numeric_limits<uint64_t>::max() - length) {
    if (first_bad != nullptr) *first_bad = addr;
    return false;
  }
  const uint64_t end = addr + length;
  auto it = regions_.upper_bound(cursor);
  if (it == regions_.begin()) {
    if (first_bad != nullptr) *first_bad = cursor;
    return false;
  }
  --it;
  while (true) {
    const uint64_t region_end = it->first + it->second;
    if (cursor < it->first || cursor >= region_end) {
      if (first_bad != nullptr) *first_bad = cursor;
      return false;
    }
    if (end <= region_end) return true;
    cursor = region_end;
    ++it;
    if (it == regions_.end() || it->first != cursor) {
      if (first_bad != nullptr) *first_bad = cursor;
      return false;
    }
  }
}

Status MemoryRegistry::check(uint64_t addr, uint64_t length, uint64_t* first_bad) const {
  uint64_t bad = 0;
  bool ok;
  {
    MutexLock lock(mu_);
    ok = covered(addr, length, &bad);
  }
  if (ok) return Status();
  if (first_bad != nullptr) *first_bad = bad;
  return out_of_range("range " + hex(addr) + "+" + std::to_string(length) +
                      " is not in registered memory (first bad address " + hex(bad) + ")");
}

size_t MemoryRegistry::check_all(std::span<const DstRange> ranges, uint64_t* first_bad) const {
  MutexLock lock(mu_);
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (!covered(ranges[i].addr, ranges[i].length, first_bad)) return i;
  }
  return ranges.size();
}

std::vector<Region> MemoryRegistry::regions() const {
  MutexLock lock(mu_);
  std::vector<Region> out;
  out.reserve(regions_.size());
  for (const auto& [addr, length] : regions_) out.push_back(Region{addr, length});
  return out;
}

MemoryRegistry::WritePin MemoryRegistry::pin() const {
  MutexLock lock(mu_);
  ++pins_[epoch_];
  return WritePin(this, epoch_);
}

void MemoryRegistry::unpin(uint64_t epoch) const {
  MutexLock lock(mu_);
  auto it = pins_.find(epoch);
  if (it != pins_.end() && --it->second == 0) {
    pins_.erase(it);
    pins_cv_.notify_all();
  }
}

MemoryRegistry::WritePin::WritePin(const MemoryRegistry* registry, uint64_t epoch)
    : registry_(registry), epoch_(epoch) {}

MemoryRegistry::WritePin::WritePin(WritePin&& other) noexcept
    : registry_(other.registry_), epoch_(other.epoch_) {
  other.registry_ = nullptr;
}

MemoryRegistry::WritePin::~WritePin() {
  if (registry_ != nullptr) registry_->unpin(epoch_);
}

}  // namespace pdkv::engine
