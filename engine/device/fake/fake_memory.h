// Fake device memory and pinned host memory, and the translation of device addresses to
// the memory the fake's copies really touch.
//
// A device allocation is a memfd mapped twice: at the returned CUdeviceptr with PROT_NONE
// (so any CPU access faults and send()/recv()/process_vm_writev() on it fail with EFAULT,
// as they would on a real GPU address) and once more read-write as a "shadow" that only
// the copy functions use. Each allocation reserves a PROT_NONE guard page after its end,
// so two allocations are never adjacent and a run that strays past one cannot land in the
// next.
//
// The virtual memory API works the same way: cuMemAddressReserve reserves a PROT_NONE
// range (plus a guard page) and a read-write-less shadow range of the same size;
// cuMemCreate makes a memfd (the physical piece); cuMemMap puts it over both at the same
// offset, so each mapped piece is a DeviceMapping of its own (cuMemGetAddressRange gives
// the piece, as the driver does) while a copy may run across neighbouring pieces of one
// reservation, whose shadows are neighbours too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

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
  // A piece mapped into a reservation (cuMemMap): unmapping puts PROT_NONE back over both
  // views instead of giving the addresses away, and copies need cuMemSetAccess first.
  uintptr_t reservation = 0;  // the reservation's base; 0 for cuMemAlloc memory
  bool accessible = true;
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

// The virtual memory API (see above). Sizes and addresses in whole granules.
size_t vmm_granularity();
CUresult reserve_address(size_t size, CUdeviceptr* out);
CUresult free_address(CUdeviceptr ptr, size_t size);  // nothing may be mapped in it
CUresult create_physical(size_t size, CUcontext ctx, CUmemGenericAllocationHandle* out);
CUresult release_physical(CUmemGenericAllocationHandle handle);
CUresult map_piece(CUdeviceptr ptr, size_t size, size_t offset,
                   CUmemGenericAllocationHandle handle);
CUresult unmap_pieces(CUdeviceptr ptr, size_t size);  // whole pieces only
CUresult set_access(CUdeviceptr ptr, size_t size);    // every piece in the range

// The allocation (device or pinned host) containing ptr, anywhere inside it.
PointerInfo lookup(uintptr_t ptr);

// The device memory holding all of [ptr, ptr + bytes): one allocation, or neighbouring
// mapped pieces of one reservation. The caller reaches byte ptr + i at
// pieces[0]->shadow + (ptr - pieces[0]->base) + i; holding `pieces` keeps them mapped.
struct DeviceRange {
  std::vector<std::shared_ptr<DeviceMapping>> pieces;  // empty: not device memory
};
DeviceRange find_device_range(uintptr_t ptr, size_t bytes);

}  // namespace pdkv::fake_cuda
