// Reading registered memory with the CPU, whatever it is made of.
//
// Host memory is read in place. Device memory is never touched by the CPU: it is copied
// into a pinned buffer of the calling thread (1 MiB, per device) with the device driver
// and read there, a chunk at a time. For the occasional reader (the KV checksum), not for
// the transfer path, which stages through its own slab rings.
//
// Thread safety: any thread; each thread has its own staging buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "common/status.h"
#include "engine/device/device_regions.h"

namespace pdkv::engine {

// Calls `visit` over the bytes of [addr, addr + length) in order. The range must be host
// memory or inside one device region (InvalidArgument if it straddles a device region's
// edge). Driver errors are returned.
Status visit_registered_bytes(const DeviceRegions& regions, uint64_t addr, uint64_t length,
                              const std::function<void(const uint8_t*, size_t)>& visit);

}  // namespace pdkv::engine
