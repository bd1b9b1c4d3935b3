// What a range handed to register_memory really is, checked once, at registration.
//
// kHost: every page mapped and readable by the CPU (mapped_memory.h), so a device pointer
// registered as host is refused before any socket reads it. kCuda: the driver must know
// the range as device memory of one allocation (not managed memory, not host memory, not
// two allocations that happen to be adjacent). kAuto: the driver's answer, or host where
// there is no driver.
//
// Thread safety: a pure query (the driver's calls are thread-safe).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "engine/device/device_driver.h"
#include "engine/mapped_memory.h"

namespace pdkv::engine {

// `device` (-1 = any) must match a kCuda range's device. The result's kind is kHost or
// kCuda, with its device ordinal. `host_access`: what a host range must permit (kReadWrite
// for a range peers write into); device memory has no such check (the driver allocates it
// read-write).
Result<PointerInfo> check_registration(uint64_t addr, uint64_t length, MemoryKind requested,
                                       int device, HostAccess host_access = HostAccess::kRead);

}  // namespace pdkv::engine
