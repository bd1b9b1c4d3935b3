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

// A cuMemCreate allocation (defined in fake_memory.cc).
struct Physical;

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
  // The memfd behind both views of a cuMemAlloc allocation or an opened IPC handle, kept
  // open so that IPC can export it (fake_ipc.cc); -1 for a mapped piece.
  int fd = -1;
  // A piece mapped into a reservation (cuMemMap): unmapping puts PROT_NONE back over both
  // views instead of giving the addresses away, and copies need cuMemSetAccess first.
  uintptr_t reservation = 0;  // the reservation's base; 0 for cuMemAlloc memory
  bool accessible = true;
  // For a piece: the physical memory mapped (kept while mapped, even once released) and the
  // handle it was mapped from (cuMemRetainAllocationHandle hands that back).
  std::shared_ptr<Physical> physical;
  CUmemGenericAllocationHandle handle = 0;
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

// Lists a mapping made elsewhere (an opened IPC handle) as device memory, and takes it
// out again by its base (null if none is listed there).
void add_device_mapping(std::shared_ptr<DeviceMapping> mapping);
std::shared_ptr<DeviceMapping> remove_device_mapping(uintptr_t base);

// The virtual memory API (see above). Sizes and addresses in whole granules.
size_t vmm_granularity();
CUresult reserve_address(size_t size, CUdeviceptr* out);
CUresult free_address(CUdeviceptr ptr, size_t size);  // nothing may be mapped in it
// `exportable`: created asking for a POSIX file-descriptor handle.
CUresult create_physical(size_t size, CUcontext ctx, bool exportable,
                         CUmemGenericAllocationHandle* out);
CUresult release_physical(CUmemGenericAllocationHandle handle);  // one reference
CUresult map_piece(CUdeviceptr ptr, size_t size, size_t offset,
                   CUmemGenericAllocationHandle handle);
CUresult unmap_pieces(CUdeviceptr ptr, size_t size);  // whole pieces only
// Every piece in the range, for each of `devices` (which must reach the pieces' device).
CUresult set_access(CUdeviceptr ptr, size_t size, const int* devices, size_t count);

// Handles across processes: a new reference to the handle the piece at addr was mapped
// from; a dup of the allocation's memfd (the caller owns it); a new handle for a memfd
// another process exported (fd stays the caller's).
CUresult retain_physical(uintptr_t addr, CUmemGenericAllocationHandle* out);
CUresult export_physical(CUmemGenericAllocationHandle handle, int* fd_out);
CUresult import_physical(int fd, CUmemGenericAllocationHandle* out);

// Whether `device` may reach memory on `peer` (fake_ipc.cc: PDKV_FAKE_CUDA_NO_PEER).
bool peer_capable(int device, int peer);

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
