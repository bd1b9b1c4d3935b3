#include "engine/device/registration_check.h"

#include <fmt/format.h>

#include "engine/mapped_memory.h"

namespace pdkv::engine {
namespace {

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
  const uint64_t end = info.allocation_base + info.allocation_size;
  if (addr < info.allocation_base || length > end - addr) {
    return invalid_argument(fmt::format(
        "register_memory: {} spans more than one CUDA allocation (the one at {:#x} has {} "
        "bytes): register each allocation separately",
        range, info.allocation_base, info.allocation_size));
  }
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
