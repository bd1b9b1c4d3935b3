#include "engine/testing/device_memory.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "engine/device/cuda_driver_api.h"
#include "engine/device/device_driver.h"

namespace pdkv::engine::testing {
namespace {

// The library the engine's driver was opened from; dlopen of the same path returns the
// same handle, so these calls share its state (the fake's allocations, contexts).
void* driver_library() {
  static void* handle = [] {
    const char* env = std::getenv("PDKV_CUDA_LIBRARY");
    const std::string path = env != nullptr && *env != '\0' ? env : "libcuda.so.1";
    return ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }();
  return handle;
}

template <typename Fn>
Fn symbol(const char* name) {
  void* lib = driver_library();
  return lib == nullptr ? nullptr : reinterpret_cast<Fn>(::dlsym(lib, name));
}

Status bound(int device) {
  DeviceDriver* driver = device_driver();
  if (driver == nullptr)
    return failed_precondition("no device driver: " + device_driver_absent_reason());
  return driver->bind_thread(device);
}

Status check(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return Status();
  return internal_error(std::string(call) + " failed with CUresult " + std::to_string(r));
}

}  // namespace

Result<std::unique_ptr<DeviceBuffer>> DeviceBuffer::allocate(int device, size_t bytes,
                                                             bool managed) {
  PDKV_RETURN_IF_ERROR(bound(device));
  CUdeviceptr ptr = 0;
  if (managed) {
    auto alloc = symbol<PFN_cuMemAllocManaged>("cuMemAllocManaged");
    if (alloc == nullptr) return failed_precondition("driver has no cuMemAllocManaged");
    PDKV_RETURN_IF_ERROR(check(alloc(&ptr, bytes, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged"));
  } else {
    auto alloc = symbol<PFN_cuMemAlloc_v2>("cuMemAlloc_v2");
    if (alloc == nullptr) return failed_precondition("driver has no cuMemAlloc_v2");
    PDKV_RETURN_IF_ERROR(check(alloc(&ptr, bytes), "cuMemAlloc_v2"));
  }
  return std::unique_ptr<DeviceBuffer>(new DeviceBuffer(ptr, bytes, device));
}

Result<std::unique_ptr<DeviceBuffer>> DeviceBuffer::allocate_mapped_pieces(int device,
                                                                           size_t piece_bytes,
                                                                           size_t pieces) {
  PDKV_RETURN_IF_ERROR(bound(device));
  auto reserve = symbol<PFN_cuMemAddressReserve>("cuMemAddressReserve");
  auto create = symbol<PFN_cuMemCreate>("cuMemCreate");
  auto map = symbol<PFN_cuMemMap>("cuMemMap");
  auto release = symbol<PFN_cuMemRelease>("cuMemRelease");
  auto access = symbol<PFN_cuMemSetAccess>("cuMemSetAccess");
  if (!reserve || !create || !map || !release || !access) {
    return failed_precondition("driver has no virtual memory management API");
  }
  const size_t bytes = piece_bytes * pieces;
  CUdeviceptr base = 0;
  PDKV_RETURN_IF_ERROR(check(reserve(&base, bytes, 0, 0, 0), "cuMemAddressReserve"));
  // Owned from here: the destructor unmaps whatever was mapped and frees the range.
  std::unique_ptr<DeviceBuffer> buffer(new DeviceBuffer(base, bytes, device));
  buffer->mapped_pieces_ = true;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  // Exportable to another process (the cuda_ipc path), as PyTorch's expandable segments ask.
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  for (size_t i = 0; i < pieces; ++i) {
    CUmemGenericAllocationHandle handle = 0;
    PDKV_RETURN_IF_ERROR(check(create(&handle, piece_bytes, &prop, 0), "cuMemCreate"));
    Status mapped = check(map(base + i * piece_bytes, piece_bytes, 0, handle, 0), "cuMemMap");
    (void)release(handle);  // the mapping keeps the memory
    PDKV_RETURN_IF_ERROR(mapped);
  }
  CUmemAccessDesc rw{};
  rw.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  PDKV_RETURN_IF_ERROR(check(access(base, bytes, &rw, 1), "cuMemSetAccess"));
  return buffer;
}

DeviceBuffer::~DeviceBuffer() {
  if (!bound(device_).ok()) return;
  if (mapped_pieces_) {
    auto unmap = symbol<PFN_cuMemUnmap>("cuMemUnmap");
    auto free_range = symbol<PFN_cuMemAddressFree>("cuMemAddressFree");
    if (unmap && free_range) {
      (void)unmap(addr_, size_);
      (void)free_range(addr_, size_);
    }
    return;
  }
  if (auto free_fn = symbol<PFN_cuMemFree_v2>("cuMemFree_v2"); free_fn) (void)free_fn(addr_);
}

Status DeviceBuffer::upload(size_t offset, const void* src, size_t bytes) {
  if (offset > size_ || bytes > size_ - offset) return out_of_range("upload past the buffer");
  PDKV_RETURN_IF_ERROR(bound(device_));
  auto copy = symbol<PFN_cuMemcpyHtoD_v2>("cuMemcpyHtoD_v2");
  auto sync = symbol<PFN_cuCtxSynchronize>("cuCtxSynchronize");
  if (copy == nullptr || sync == nullptr) {
    return failed_precondition("driver has no cuMemcpyHtoD_v2 or cuCtxSynchronize");
  }
  PDKV_RETURN_IF_ERROR(check(copy(addr_ + offset, src, bytes), "cuMemcpyHtoD_v2"));
  // From pageable memory the copy returns once the source is staged; pdkv's streams are
  // non-blocking, so nothing orders their reads after it: wait until it landed.
  return check(sync(), "cuCtxSynchronize");
}

Status DeviceBuffer::download(size_t offset, void* dst, size_t bytes) const {
  if (offset > size_ || bytes > size_ - offset) return out_of_range("download past the buffer");
  PDKV_RETURN_IF_ERROR(bound(device_));
  auto copy = symbol<PFN_cuMemcpyDtoH_v2>("cuMemcpyDtoH_v2");
  if (copy == nullptr) return failed_precondition("driver has no cuMemcpyDtoH_v2");
  return check(copy(dst, addr_ + offset, bytes), "cuMemcpyDtoH_v2");
}

bool fake_device_set_copy_delay_us(unsigned us) {
  auto fn = symbol<void (*)(unsigned)>("pdkvFakeSetCopyDelayUs");
  if (fn != nullptr) fn(us);
  return fn != nullptr;
}
bool fake_device_set_poison(bool on) {
  auto fn = symbol<void (*)(int)>("pdkvFakeSetPoison");
  if (fn != nullptr) fn(on ? 1 : 0);
  return fn != nullptr;
}
bool fake_device_fail_copy_after(long n) {
  auto fn = symbol<void (*)(long)>("pdkvFakeFailCopyAfter");
  if (fn != nullptr) fn(n);
  return fn != nullptr;
}
long fake_device_copy_count() {
  auto fn = symbol<long (*)()>("pdkvFakeCopyCount");
  return fn != nullptr ? fn() : -1;
}
Result<void*> create_polling_event() {
  auto create = symbol<PFN_cuEventCreate>("cuEventCreate");
  if (create == nullptr) return failed_precondition("driver has no cuEventCreate");
  CUevent event = nullptr;
  PDKV_RETURN_IF_ERROR(check(create(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate"));
  return static_cast<void*>(event);
}

long fake_device_spin_waits() {
  auto fn = symbol<long (*)()>("pdkvFakeSpinWaits");
  return fn != nullptr ? fn() : -1;
}
long fake_device_blocking_waits() {
  auto fn = symbol<long (*)()>("pdkvFakeBlockingWaits");
  return fn != nullptr ? fn() : -1;
}
bool fake_device_set_max_pitch(size_t bytes) {
  auto fn = symbol<void (*)(size_t)>("pdkvFakeSetMaxPitch");
  if (fn != nullptr) fn(bytes);
  return fn != nullptr;
}
int fake_device_context_created(int device) {
  auto fn = symbol<int (*)(int)>("pdkvFakeContextCreated");
  return fn != nullptr ? fn(device) : -1;
}

}  // namespace pdkv::engine::testing
