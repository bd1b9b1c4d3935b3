// DeviceRegions: which registered ranges of this process are device memory, and on which
// device. The engine fills it at registration (device_driver.h answered once there); the
// transfer path asks it per entry of a batch (a sorted-map lookup), never the driver.
//
// A lookup answers for a whole range: host (no device region touches it), one device (the
// range lies inside one device region), or mixed (it straddles a device region's edge: a
// write or read that would have the CPU touch device memory, refused by the caller).
//
// Thread safety: all methods may be called concurrently; empty() is a lock-free fast path
// so host-only processes pay one atomic load per batch.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>

#include "common/mutex.h"
#include "common/status.h"

namespace pdkv::engine {

class DeviceRegions {
 public:
  static constexpr int kHost = -1;
  static constexpr int kMixed = -2;

  // FailedPrecondition if it overlaps a device region already listed.
  Status add(uint64_t addr, uint64_t length, int device);
  void remove(uint64_t addr);

  bool empty() const { return count_.load(std::memory_order_acquire) == 0; }
  // kHost, kMixed or the device ordinal of [addr, addr + length). length > 0.
  int device_of(uint64_t addr, uint64_t length) const;
  // Where `pieces` ranges of `length` bytes, the i-th at addr + i * stride, lie: `device`
  // as device_of() answers for every piece alike (kMixed when they differ), and whether
  // that device's pieces are in different regions (one allocation each: a strided copy
  // must stay inside one, so such a run is copied piece by piece). One lookup under one
  // lock answers both.
  struct RunPlace {
    int device = kHost;
    bool piecewise = false;
  };
  RunPlace place_run(uint64_t addr, uint64_t length, uint64_t pieces, uint64_t stride) const;

 private:
  struct Entry {
    uint64_t length = 0;
    int device = 0;
  };
  int lookup(uint64_t addr, uint64_t length) const PDKV_REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<uint64_t, Entry> regions_ PDKV_GUARDED_BY(mu_);
  std::atomic<size_t> count_{0};
};

}  // namespace pdkv::engine
