#include "engine/device/registration_check.h"

#include <fmt/format.h>

#include "engine/mapped_memory.h"

namespace pdkv::engine {
namespace {

// Mapped pieces a registration may span before it is refused: a 2 MiB-granular
// expandable segment of 256 GiB is 131072 pieces; anything larger is not a KV cache.
constexpr uint64_t kMaxPieces = 1u << 17;

// cuMemGetAddressRange gives the mapped piece holding an address, not the allocation: a
// tensor in memory mapped piece by piece (PyTorch's expandable segments, any cuMemMap
// allocator) spans several pieces that sit back to back in one address range. So the
// range is walked piece by piece; each must be device memory of the same device, start
// where the previous one ended, and not be managed. The answer's allocation is the
// union of the pieces: one stretch of device addresses that copies may run across.
Result<PointerInfo> check_device_range(DeviceDriver& driver, uint64_t addr, uint64_t length,
                                       int device) {
  PDKV_ASSIGN_OR_RETURN(PointerInfo info, driver.query_pointer(addr));
  const std::string range = fmt::format("{:#x}+{}", addr, length);
  if (info.kind != MemoryKind::kCuda) {
    return invalid_argument(fmt::format(
        "register_memory: {} was registered as cuda memory, but {} reports host memory there "
        "(register it as host, or pass the device buffer's own pointer)",
        range, driver.description()));
  }
  if (info.managed) {
    return invalid_argument(fmt::format(
        "register_memory: {} is CUDA managed (unified) memory, which pdkv does not move yet: "
        "allocate the KV cache with cudaMalloc (torch's default allocator does)",
        range));
  }
  if (device >= 0 && info.device != device) {
    return invalid_argument(fmt::format("register_memory: {} lives on CUDA device {}, not {}",
                                        range, info.device, device));
  }
  if (addr < info.allocation_base || addr - info.allocation_base >= info.allocation_size) {
    return internal_error(fmt::format("register_memory: {} reports the range {:#x}+{} for {:#x}",
                                      driver.description(), info.allocation_base,
                                      info.allocation_size, addr));
  }
  uint64_t end = info.allocation_base + info.allocation_size;  // of the pieces so far
  for (uint64_t pieces = 1; length > end - addr; ++pieces) {
    Result<PointerInfo> next = driver.query_pointer(end);
    if (!next.ok()) return next.status();
    const bool joins = next->kind == MemoryKind::kCuda && !next->managed &&
                       next->device == info.device && next->allocation_base == end &&
                       next->allocation_size > 0;
    if (!joins || pieces >= kMaxPieces) {
      return invalid_argument(fmt::format(
          "register_memory: {} runs past the end of its CUDA memory at {:#x} (the {} mapped "
          "piece(s) from {:#x} end there and {}): register each allocation separately",
          range, end, pieces, info.allocation_base,
          pieces >= kMaxPieces ? "there are too many pieces"
                               : "no device memory of the same device follows"));
    }
    end += next->allocation_size;
  }
  info.allocation_size = end - info.allocation_base;
  return info;
}

}  // namespace

Result<PointerInfo> check_registration(uint64_t addr, uint64_t length, MemoryKind requested,
                                       int device, HostAccess host_access) {
  if (length == 0) return invalid_argument("register_memory: length 0");
  if (addr > UINT64_MAX - length) {
    return out_of_range(
        fmt::format("register_memory: {:#x}+{} wraps around the address space", addr, length));
  }
  DeviceDriver* driver = device_driver();
  if (requested == MemoryKind::kCuda) {
    if (driver == nullptr) {
      return failed_precondition(fmt::format(
          "register_memory: {:#x}+{} was registered as cuda memory, but this process has no "
          "usable CUDA driver ({}); set PDKV_CUDA_LIBRARY to the driver library if it is not "
          "libcuda.so.1",
          addr, length, device_driver_absent_reason()));
    }
    return check_device_range(*driver, addr, length, device);
  }
  if (requested == MemoryKind::kAuto && driver != nullptr) {
    PDKV_ASSIGN_OR_RETURN(PointerInfo info, driver->query_pointer(addr));
    if (info.kind == MemoryKind::kCuda) return check_device_range(*driver, addr, length, device);
  }
  if (device >= 0 && requested == MemoryKind::kHost) {
    return invalid_argument("register_memory: a device ordinal names device memory, not host");
  }
  Status mapped = check_mapped(addr, length, host_access);
  if (!mapped.ok()) {
    if (driver == nullptr || requested != MemoryKind::kHost) return mapped;
    // Host was asked for: say so if the driver knows the range as device memory.
    Result<PointerInfo> info = driver->query_pointer(addr);
    if (info.ok() && info->kind == MemoryKind::kCuda) {
      return invalid_argument(fmt::format(
          "register_memory: {:#x}+{} was registered as host memory, but it is CUDA device "
          "memory (device {}): register it as cuda (or auto)",
          addr, length, info->device));
    }
    return mapped;
  }
  PointerInfo host;
  return host;
}

}  // namespace pdkv::engine
