#include "engine/testing/vmm_buffer.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "engine/device/cuda_driver_api.h"
#include "engine/device/device_driver.h"

namespace pdkv::engine::testing {
namespace {

// The library the engine's driver was opened from (same handle, same state).
template <typename Fn>
Fn symbol(const char* name) {
  static void* lib = [] {
    const char* env = std::getenv("PDKV_CUDA_LIBRARY");
    const std::string path = env != nullptr && *env != '\0' ? env : "libcuda.so.1";
    return ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }();
  return lib == nullptr ? nullptr : reinterpret_cast<Fn>(::dlsym(lib, name));
}

Status check(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return Status();
  return internal_error(std::string(call) + " failed with CUresult " + std::to_string(r));
}

Status bound(int device) {
  DeviceDriver* driver = device_driver();
  if (driver == nullptr) return failed_precondition(device_driver_absent_reason());
  return driver->bind_thread(device);
}

#define PDKV_SYMBOL(name)                \
  auto name = symbol<PFN_##name>(#name); \
  if (name == nullptr) return failed_precondition("driver has no " #name);

}  // namespace

Result<std::unique_ptr<VmmBuffer>> VmmBuffer::allocate(int device, size_t bytes) {
  PDKV_RETURN_IF_ERROR(bound(device));
  PDKV_SYMBOL(cuMemGetAllocationGranularity);
  PDKV_SYMBOL(cuMemCreate);
  PDKV_SYMBOL(cuMemAddressReserve);
  PDKV_SYMBOL(cuMemMap);
  PDKV_SYMBOL(cuMemSetAccess);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t granularity = 0;
  PDKV_RETURN_IF_ERROR(
      check(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            "cuMemGetAllocationGranularity"));
  auto b = std::unique_ptr<VmmBuffer>(new VmmBuffer());
  b->device_ = device;
  b->size_ = bytes;
  b->mapped_ = (bytes + granularity - 1) / granularity * granularity;
  PDKV_RETURN_IF_ERROR(check(cuMemCreate(&b->handle_, b->mapped_, &prop, 0), "cuMemCreate"));
  CUdeviceptr ptr = 0;
  PDKV_RETURN_IF_ERROR(
      check(cuMemAddressReserve(&ptr, b->mapped_, 0, 0, 0), "cuMemAddressReserve"));
  PDKV_RETURN_IF_ERROR(check(cuMemMap(ptr, b->mapped_, 0, b->handle_, 0), "cuMemMap"));
  b->addr_ = ptr;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  PDKV_RETURN_IF_ERROR(check(cuMemSetAccess(ptr, b->mapped_, &access, 1), "cuMemSetAccess"));
  return b;
}

VmmBuffer::~VmmBuffer() {
  if (!bound(device_).ok()) return;
  if (auto unmap = symbol<PFN_cuMemUnmap>("cuMemUnmap"); unmap && addr_ != 0) {
    (void)unmap(addr_, mapped_);
  }
  if (auto free_fn = symbol<PFN_cuMemAddressFree>("cuMemAddressFree"); free_fn && addr_ != 0) {
    (void)free_fn(addr_, mapped_);
  }
  if (auto release = symbol<PFN_cuMemRelease>("cuMemRelease"); release && handle_ != 0) {
    (void)release(handle_);
  }
}

Status VmmBuffer::upload(size_t offset, const void* src, size_t bytes) {
  if (offset > size_ || bytes > size_ - offset) return out_of_range("upload past the buffer");
  PDKV_RETURN_IF_ERROR(bound(device_));
  PDKV_SYMBOL(cuMemcpyHtoD_v2);
  PDKV_SYMBOL(cuCtxSynchronize);
  PDKV_RETURN_IF_ERROR(check(cuMemcpyHtoD_v2(addr_ + offset, src, bytes), "cuMemcpyHtoD_v2"));
  // From pageable memory the copy returns once the source is staged; pdkv's streams are
  // non-blocking, so nothing orders their reads after it: wait until it landed.
  return check(cuCtxSynchronize(), "cuCtxSynchronize");
}

Status VmmBuffer::download(size_t offset, void* dst, size_t bytes) const {
  if (offset > size_ || bytes > size_ - offset) return out_of_range("download past the buffer");
  PDKV_RETURN_IF_ERROR(bound(device_));
  PDKV_SYMBOL(cuMemcpyDtoH_v2);
  return check(cuMemcpyDtoH_v2(dst, addr_ + offset, bytes), "cuMemcpyDtoH_v2");
}

}  // namespace pdkv::engine::testing
