// Fake device memory and pinned host memory, and the translation of device addresses to
// the memory the fake's copies really touch.
//
// A device allocation is a memfd mapped twice: at the returned CUdeviceptr with PROT_NONE
// (so any CPU access faults and send()/recv()/process_vm_writev() on it fail with EFAULT,
// as they would on a real GPU address) and once more read-write as a "shadow" that only
// the copy functions use. Each allocation reserves a PROT_NONE guard page after its end,
// so two allocations are never adjacent and a run that strays past one cannot land in the
// next.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "engine/device/cuda_driver_api.h"

namespace pdkv::fake_cuda {

// One device allocation. Destroying it unmaps both views; copies in flight hold a
// shared_ptr, so cuMemFree_v2 during a copy leaves the pages mapped until the copy ends.
struct DeviceMapping {
  uintptr_t base = 0;         // the PROT_NONE address handed out as CUdeviceptr
  size_t size = 0;            // bytes asked for (the extent cuMemGetAddressRange reports)
  size_t mapped = 0;          // size rounded up to whole pages
  size_t reserved = 0;        // mapped + the guard page
  uint8_t* shadow = nullptr;  // read-write view of the same pages
  CUcontext ctx = nullptr;
  bool managed = false;
  // The memfd behind both views, kept open so that IPC can export it (fake_ipc.cc).
  int fd = -1;
  // False for a piece mapped into a reservation the caller owns (cuMemMap): the device
  // view is then left to cuMemUnmap / cuMemAddressFree, only the shadow is unmapped here.
  bool owns_address = true;
  ~DeviceMapping();
};

enum class PointerKind { kUnknown, kDevice, kPinnedHost };

struct PointerInfo {
  PointerKind kind = PointerKind::kUnknown;
  uintptr_t base = 0;
  size_t size = 0;
  CUcontext ctx = nullptr;
  bool managed = false;
};

CUresult alloc_device(size_t bytes, CUcontext ctx, bool managed, CUdeviceptr* out);
CUresult free_device(CUdeviceptr ptr);  // ptr must be an allocation's base
CUresult alloc_pinned_host(size_t bytes, CUcontext ctx, void** out);
CUresult free_pinned_host(void* ptr);

// Lists a mapping made elsewhere (an opened IPC handle, a cuMemMap piece) as device memory,
// and takes it out again by its base (null if none is listed there).
void add_device_mapping(std::shared_ptr<DeviceMapping> mapping);
std::shared_ptr<DeviceMapping> remove_device_mapping(uintptr_t base);

// The allocation (device or pinned host) containing ptr, anywhere inside it.
PointerInfo lookup(uintptr_t ptr);

// The device allocation holding all of [ptr, ptr + bytes), or null. The caller reaches
// byte ptr + i at mapping->shadow + (ptr - mapping->base) + i.
std::shared_ptr<DeviceMapping> find_device_range(uintptr_t ptr, size_t bytes);

}  // namespace pdkv::fake_cuda
