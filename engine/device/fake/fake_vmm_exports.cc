// The fake driver's virtual memory management exports (cuMemAddressReserve, cuMemCreate,
// cuMemMap, cuMemSetAccess and their undoing), as PyTorch's expandable segments use them:
// one reserved address range, several physical pieces mapped into it (fake_memory.h says
// how the fake keeps them); and the POSIX file-descriptor handles that carry a cuMemCreate
// allocation to another process (a dup of its memfd, sent over a Unix socket with
// SCM_RIGHTS as the driver's are). Same conventions as fake_cuda_exports.cc.
#include <cstddef>
#include <cstdint>

#include "engine/device/cuda_driver_api.h"
#include "engine/device/fake/fake_memory.h"
#include "engine/device/fake/fake_state.h"

#define PDKV_FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace fc = pdkv::fake_cuda;

PDKV_FAKE_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity,
                                                        const CUmemAllocationProp* prop,
                                                        int option) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (granularity == nullptr || prop == nullptr || option < 0 || option > 1) {
    return CUDA_ERROR_INVALID_VALUE;  // minimum (0) or recommended (1)
  }
  *granularity = fc::vmm_granularity();
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                              CUdeviceptr addr, unsigned long long flags) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return fc::reserve_address(size, ptr);  // alignment and address are hints
}

PDKV_FAKE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  return fc::free_address(ptr, size);
}

// Device memory only (prop->type pinned, location a device).
PDKV_FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                      const CUmemAllocationProp* prop, unsigned long long flags) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (prop == nullptr || flags != 0 || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUctx_st* owner = fc::primary_context(prop->location.id);
  if (owner == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  const bool exportable =
      (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  return fc::create_physical(size, owner, exportable, handle);
}

PDKV_FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  return fc::release_physical(handle);
}

PDKV_FAKE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                   CUmemGenericAllocationHandle handle, unsigned long long flags) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return fc::map_piece(ptr, size, offset, handle);
}

PDKV_FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  return fc::unmap_pieces(ptr, size);
}

// Read-write access for a device, the only kind the fake grants; a device reaches memory
// on another one only where peer access is possible (fake_ipc.cc).
PDKV_FAKE_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                         size_t count) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  if (desc == nullptr || count == 0 || count > 64) return CUDA_ERROR_INVALID_VALUE;
  int devices[64];
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        fc::primary_context(desc[i].location.id) == nullptr ||
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    devices[i] = desc[i].location.id;
  }
  return fc::set_access(ptr, size, devices, count);
}

PDKV_FAKE_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                                      void* addr) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  return fc::retain_physical(reinterpret_cast<uintptr_t>(addr), handle);
}

PDKV_FAKE_EXPORT CUresult cuMemExportToShareableHandle(void* shareable,
                                                       CUmemGenericAllocationHandle handle,
                                                       int handle_type, unsigned long long flags) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (shareable == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (handle_type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  return fc::export_physical(handle, static_cast<int*>(shareable));
}

PDKV_FAKE_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                                         void* os_handle, int handle_type) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (handle_type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  return fc::import_physical(static_cast<int>(reinterpret_cast<intptr_t>(os_handle)), handle);
}
