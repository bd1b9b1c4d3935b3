// The CUDA implementation of DeviceDriver: libcuda.so.1 (or PDKV_CUDA_LIBRARY) opened at
// run time, every function resolved by its exported, versioned name (cuda_driver_api.h).
#include <dlfcn.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "common/logging.h"
#include "common/mutex.h"
#include "engine/device/cuda_driver_api.h"
#include "engine/device/device_driver.h"
#include "engine/device/device_health.h"
#include "engine/engine_settings.h"

namespace pdkv::engine {
namespace {

// Devices pdkv keeps a primary context for; more than any machine has today.
constexpr int kMaxDevices = 64;

struct CudaApi {
  PFN_cuInit cuInit = nullptr;
  PFN_cuGetErrorString cuGetErrorString = nullptr;
  PFN_cuGetErrorName cuGetErrorName = nullptr;
  PFN_cuDeviceGetAttribute cuDeviceGetAttribute = nullptr;
  PFN_cuDeviceGetCount cuDeviceGetCount = nullptr;
  PFN_cuDeviceGet cuDeviceGet = nullptr;
  PFN_cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRetain = nullptr;
  PFN_cuCtxSetCurrent cuCtxSetCurrent = nullptr;
  PFN_cuCtxGetCurrent cuCtxGetCurrent = nullptr;
  PFN_cuPointerGetAttributes cuPointerGetAttributes = nullptr;
  PFN_cuMemGetAddressRange_v2 cuMemGetAddressRange_v2 = nullptr;
  PFN_cuMemHostAlloc cuMemHostAlloc = nullptr;
  PFN_cuMemFreeHost cuMemFreeHost = nullptr;
  PFN_cuStreamCreate cuStreamCreate = nullptr;
  PFN_cuStreamDestroy_v2 cuStreamDestroy_v2 = nullptr;
  PFN_cuStreamSynchronize cuStreamSynchronize = nullptr;
  PFN_cuStreamWaitEvent cuStreamWaitEvent = nullptr;
  PFN_cuEventCreate cuEventCreate = nullptr;
  PFN_cuEventDestroy_v2 cuEventDestroy_v2 = nullptr;
  PFN_cuEventRecord cuEventRecord = nullptr;
  PFN_cuEventQuery cuEventQuery = nullptr;
  PFN_cuEventSynchronize cuEventSynchronize = nullptr;
  PFN_cuMemcpyDtoHAsync_v2 cuMemcpyDtoHAsync_v2 = nullptr;
  PFN_cuMemcpyHtoDAsync_v2 cuMemcpyHtoDAsync_v2 = nullptr;
  PFN_cuMemcpy2DAsync_v2 cuMemcpy2DAsync_v2 = nullptr;
  PFN_cuLaunchHostFunc cuLaunchHostFunc = nullptr;
  // Optional (drivers before CUDA 12.8 have neither): one of the two batched-copy forms.
  PFN_cuMemcpyBatchAsync_v2 cuMemcpyBatchAsync_v2 = nullptr;
  PFN_cuMemcpyBatchAsync cuMemcpyBatchAsync = nullptr;
};

// The three arrays a batched copy takes, kept per thread so a batch allocates nothing
// once they have grown (each copy thread stages into slabs of a bounded size).
struct BatchArrays {
  std::vector<CUdeviceptr> dsts, srcs;
  std::vector<size_t> sizes;
};
thread_local BatchArrays t_batch;
// The rows of a strided copy whose pitch the device refuses, as one batch.
thread_local std::vector<CopyPiece> t_rows;

// The context this thread last bound through a driver (copy threads bind once).
thread_local CUcontext t_bound_context = nullptr;

class CudaDriver final : public DeviceDriver {
 public:
  static Result<std::unique_ptr<CudaDriver>> load(const std::string& path) {
    void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = ::dlerror();
      return unavailable("cannot open " + path + ": " + (why ? why : "unknown error"));
    }
    auto driver = std::unique_ptr<CudaDriver>(new CudaDriver(lib, path));
    PDKV_RETURN_IF_ERROR(driver->resolve_all());
    PDKV_RETURN_IF_ERROR(driver->check(driver->api_.cuInit(0), "cuInit"));
    int count = 0;
    PDKV_RETURN_IF_ERROR(driver->check(driver->api_.cuDeviceGetCount(&count), "cuDeviceGetCount"));
    if (count <= 0) return unavailable(path + " reports no CUDA device");
    driver->count_ = std::min(count, kMaxDevices);
    // The smallest maximum pitch of any device: a 2-D copy above it is refused by the
    // driver, so copy_strided splits it (a context-free query, made once).
    for (int d = 0; d < driver->count_; ++d) {
      int pitch = 0;
      PDKV_RETURN_IF_ERROR(
          driver->check(driver->api_.cuDeviceGetAttribute(&pitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH, d),
                        "cuDeviceGetAttribute(MAX_PITCH)"));
      if (pitch > 0) driver->max_pitch_ = std::min<uint64_t>(driver->max_pitch_, pitch);
    }
    return driver;
  }

  ~CudaDriver() override {
    // The library stays loaded: streams of other objects may still reference it at exit,
    // and unloading a GPU driver mid-process is never worth the risk.
  }

  const std::string& description() const override { return description_; }
  int device_count() const override { return count_; }

  Result<PointerInfo> query_pointer(uint64_t addr) const override {
    unsigned memory_type = 0;
    int managed = 0;
    int ordinal = -1;
    CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                        CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void* data[] = {&memory_type, &managed, &ordinal};
    PDKV_RETURN_IF_ERROR(
        check(api_.cuPointerGetAttributes(3, attributes, data, addr), "cuPointerGetAttributes"));
    PointerInfo info;
    info.managed = managed != 0;
    if (memory_type != CU_MEMORYTYPE_DEVICE && !info.managed) return info;  // host or unknown
    info.kind = MemoryKind::kCuda;
    info.device = ordinal;
    // The allocation range needs a current context: the pointer's own device, restoring
    // whatever the caller's thread had current (a framework's thread keeps its own).
    CUcontext previous = nullptr;
    PDKV_RETURN_IF_ERROR(check(api_.cuCtxGetCurrent(&previous), "cuCtxGetCurrent"));
    CUcontext context = nullptr;
    PDKV_RETURN_IF_ERROR(primary_context(ordinal, &context));
    PDKV_RETURN_IF_ERROR(check(api_.cuCtxSetCurrent(context), "cuCtxSetCurrent"));
    CUdeviceptr base = 0;
    size_t size = 0;
    const CUresult range = api_.cuMemGetAddressRange_v2(&base, &size, addr);
    (void)api_.cuCtxSetCurrent(previous);
    PDKV_RETURN_IF_ERROR(check(range, "cuMemGetAddressRange"));
    info.allocation_base = base;
    info.allocation_size = size;
    return info;
  }

  Status bind_thread(int device) override {
    CUcontext context = nullptr;
    PDKV_RETURN_IF_ERROR(primary_context(device, &context));
    if (t_bound_context == context) return Status();
    PDKV_RETURN_IF_ERROR(check(api_.cuCtxSetCurrent(context), "cuCtxSetCurrent"));
    t_bound_context = context;
    return Status();
  }

  Result<void*> swap_context(int device) override {
    CUcontext previous = nullptr;
    PDKV_RETURN_IF_ERROR(check(api_.cuCtxGetCurrent(&previous), "cuCtxGetCurrent"));
    CUcontext context = nullptr;
    PDKV_RETURN_IF_ERROR(primary_context(device, &context));
    if (previous != context) {
      PDKV_RETURN_IF_ERROR(check(api_.cuCtxSetCurrent(context), "cuCtxSetCurrent"));
    }
    t_bound_context = context;
    return static_cast<void*>(previous);
  }

  void restore_context(void* previous) override {
    auto context = static_cast<CUcontext>(previous);
    (void)api_.cuCtxSetCurrent(context);
    t_bound_context = context;
  }

  Result<void*> alloc_pinned(size_t bytes) override {
    void* ptr = nullptr;
    // Portable: a slab serves copies of whichever device's context the thread has bound.
    PDKV_RETURN_IF_ERROR(
        check(api_.cuMemHostAlloc(&ptr, bytes, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc"));
    return ptr;
  }
  void free_pinned(void* ptr) override {
    if (ptr != nullptr) (void)api_.cuMemFreeHost(ptr);
  }

  Result<DeviceStreamHandle> create_stream() override {
    CUstream stream = nullptr;
    // Non-blocking: pdkv's copies never serialise with a framework's legacy default stream.
    PDKV_RETURN_IF_ERROR(
        check(api_.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
    return static_cast<DeviceStreamHandle>(stream);
  }
  void destroy_stream(DeviceStreamHandle stream) override {
    if (stream != nullptr) (void)api_.cuStreamDestroy_v2(static_cast<CUstream>(stream));
  }
  Result<DeviceEventHandle> create_event() override {
    CUevent event = nullptr;
    // Blocking sync: a thread waiting in cuEventSynchronize sleeps instead of polling a
    // core for the whole wait (the driver's default).
    PDKV_RETURN_IF_ERROR(
        check(api_.cuEventCreate(&event, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING),
              "cuEventCreate"));
    return static_cast<DeviceEventHandle>(event);
  }
  void destroy_event(DeviceEventHandle event) override {
    if (event != nullptr) (void)api_.cuEventDestroy_v2(static_cast<CUevent>(event));
  }

  Status copy_to_host(DeviceStreamHandle stream, void* dst, uint64_t src, size_t bytes) override {
    return check(api_.cuMemcpyDtoHAsync_v2(dst, src, bytes, static_cast<CUstream>(stream)),
                 "cuMemcpyDtoHAsync");
  }
  Status copy_to_device(DeviceStreamHandle stream, uint64_t dst, const void* src,
                        size_t bytes) override {
    return check(api_.cuMemcpyHtoDAsync_v2(dst, src, bytes, static_cast<CUstream>(stream)),
                 "cuMemcpyHtoDAsync");
  }
  Status copy_strided(DeviceStreamHandle stream, const StridedCopy& c) override {
    if (c.src_pitch > max_pitch_ || c.dst_pitch > max_pitch_) {
      // No 2-D copy may have this pitch: the rows go as one batched copy instead.
      t_rows.clear();
      for (uint64_t r = 0; r < c.rows; ++r) {
        t_rows.push_back(CopyPiece{c.dst + r * c.dst_pitch, c.src + r * c.src_pitch, c.width});
      }
      return copy_batch(stream, t_rows, c.to_device);
    }
    CUDA_MEMCPY2D p{};
    if (c.to_device) {
      p.srcMemoryType = CU_MEMORYTYPE_HOST;
      p.srcHost = reinterpret_cast<const void*>(c.src);
      p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      p.dstDevice = c.dst;
    } else {
      p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      p.srcDevice = c.src;
      p.dstMemoryType = CU_MEMORYTYPE_HOST;
      p.dstHost = reinterpret_cast<void*>(c.dst);
    }
    p.srcPitch = c.src_pitch;
    p.dstPitch = c.dst_pitch;
    p.WidthInBytes = c.width;
    p.Height = c.rows;
    return check(api_.cuMemcpy2DAsync_v2(&p, static_cast<CUstream>(stream)), "cuMemcpy2DAsync");
  }

  bool batches_copies() const override {
    return api_.cuMemcpyBatchAsync_v2 != nullptr || api_.cuMemcpyBatchAsync != nullptr;
  }

  Status copy_batch(DeviceStreamHandle stream, std::span<const CopyPiece> pieces,
                    bool to_device) override {
    const auto s = static_cast<CUstream>(stream);
    if (pieces.empty()) return Status();
    if (!batches_copies() || pieces.size() == 1) {
      for (const CopyPiece& p : pieces) {
        PDKV_RETURN_IF_ERROR(
            to_device ? copy_to_device(stream, p.dst, reinterpret_cast<const void*>(p.src), p.bytes)
                      : copy_to_host(stream, reinterpret_cast<void*>(p.dst), p.src, p.bytes));
      }
      return Status();
    }
    BatchArrays& a = t_batch;
    a.dsts.clear(), a.srcs.clear(), a.sizes.clear();
    for (const CopyPiece& p : pieces) {
      a.dsts.push_back(p.dst);
      a.srcs.push_back(p.src);
      a.sizes.push_back(p.bytes);
    }
    // One attribute entry for every copy: sources in stream order (they were written, or
    // waited for, by work queued on this stream before the batch).
    CUmemcpyAttributes attrs{};
    attrs.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    size_t first_copy = 0;
    if (api_.cuMemcpyBatchAsync_v2 != nullptr) {
      return check(api_.cuMemcpyBatchAsync_v2(a.dsts.data(), a.srcs.data(), a.sizes.data(),
                                              pieces.size(), &attrs, &first_copy, 1, s),
                   "cuMemcpyBatchAsync");
    }
    size_t failed_at = 0;
    return check(api_.cuMemcpyBatchAsync(a.dsts.data(), a.srcs.data(), a.sizes.data(),
                                         pieces.size(), &attrs, &first_copy, 1, &failed_at, s),
                 "cuMemcpyBatchAsync");
  }

  Status record(DeviceEventHandle event, DeviceStreamHandle stream) override {
    return check(api_.cuEventRecord(static_cast<CUevent>(event), static_cast<CUstream>(stream)),
                 "cuEventRecord");
  }
  Result<bool> event_done(DeviceEventHandle event) override {
    const CUresult r = api_.cuEventQuery(static_cast<CUevent>(event));
    if (r == CUDA_ERROR_NOT_READY) return false;
    PDKV_RETURN_IF_ERROR(check(r, "cuEventQuery"));
    return true;
  }
  Status event_wait(DeviceEventHandle event) override {
    return check(api_.cuEventSynchronize(static_cast<CUevent>(event)), "cuEventSynchronize");
  }
  Status stream_wait(DeviceStreamHandle stream, DeviceEventHandle event) override {
    return check(
        api_.cuStreamWaitEvent(static_cast<CUstream>(stream), static_cast<CUevent>(event), 0),
        "cuStreamWaitEvent");
  }
  Status call_when_done(DeviceStreamHandle stream, void (*fn)(void*), void* user) override {
    return check(api_.cuLaunchHostFunc(static_cast<CUstream>(stream), fn, user),
                 "cuLaunchHostFunc");
  }
  // Through a blocking-sync event: cuStreamSynchronize polls a core under the primary
  // context's default scheduling.
  Status sync_stream(DeviceStreamHandle stream) override {
    PDKV_ASSIGN_OR_RETURN(DeviceEventHandle event, create_event());
    Status st = record(event, stream);
    if (st.ok()) st = event_wait(event);
    destroy_event(event);
    return st;
  }

 private:
  CudaDriver(void* lib, const std::string& path) : lib_(lib), description_("cuda (" + path + ")") {}

  template <typename Fn>
  Status resolve(Fn* out, const char* name) {
    void* symbol = ::dlsym(lib_, name);
    if (symbol == nullptr) {
      return failed_precondition(description_ + " has no " + name +
                                 " (a driver older than pdkv needs: CUDA 11.4 or later)");
    }
    *out = reinterpret_cast<Fn>(symbol);
    return Status();
  }

  Status resolve_all() {
#define PDKV_RESOLVE(name) PDKV_RETURN_IF_ERROR(resolve(&api_.name, #name))
    PDKV_RESOLVE(cuInit);
    PDKV_RESOLVE(cuGetErrorString);
    PDKV_RESOLVE(cuGetErrorName);
    PDKV_RESOLVE(cuDeviceGetAttribute);
    PDKV_RESOLVE(cuDeviceGetCount);
    PDKV_RESOLVE(cuDeviceGet);
    PDKV_RESOLVE(cuDevicePrimaryCtxRetain);
    PDKV_RESOLVE(cuCtxSetCurrent);
    PDKV_RESOLVE(cuCtxGetCurrent);
    PDKV_RESOLVE(cuPointerGetAttributes);
    PDKV_RESOLVE(cuMemGetAddressRange_v2);
    PDKV_RESOLVE(cuMemHostAlloc);
    PDKV_RESOLVE(cuMemFreeHost);
    PDKV_RESOLVE(cuStreamCreate);
    PDKV_RESOLVE(cuStreamDestroy_v2);
    PDKV_RESOLVE(cuStreamSynchronize);
    PDKV_RESOLVE(cuStreamWaitEvent);
    PDKV_RESOLVE(cuEventCreate);
    PDKV_RESOLVE(cuEventDestroy_v2);
    PDKV_RESOLVE(cuEventRecord);
    PDKV_RESOLVE(cuEventQuery);
    PDKV_RESOLVE(cuEventSynchronize);
    PDKV_RESOLVE(cuMemcpyDtoHAsync_v2);
    PDKV_RESOLVE(cuMemcpyHtoDAsync_v2);
    PDKV_RESOLVE(cuMemcpy2DAsync_v2);
    PDKV_RESOLVE(cuLaunchHostFunc);
#undef PDKV_RESOLVE
    // Batched copies are optional: without them copy_batch issues one copy per piece.
    api_.cuMemcpyBatchAsync_v2 =
        reinterpret_cast<PFN_cuMemcpyBatchAsync_v2>(::dlsym(lib_, "cuMemcpyBatchAsync_v2"));
    if (api_.cuMemcpyBatchAsync_v2 == nullptr) {
      api_.cuMemcpyBatchAsync =
          reinterpret_cast<PFN_cuMemcpyBatchAsync>(::dlsym(lib_, "cuMemcpyBatchAsync"));
    }
    if (const char* off = std::getenv(std::string(kCudaNoBatchedCopies.name).c_str());
        off && *off && *off != '0') {
      api_.cuMemcpyBatchAsync_v2 = nullptr;  // for comparing the two paths
      api_.cuMemcpyBatchAsync = nullptr;
    }
    return Status();
  }

  // "cuMemcpy2DAsync failed: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was
  // encountered; CUresult 700)". A context-fatal error becomes the process's device
  // fault (device_health.h).
  Status check(CUresult result, const char* call) const {
    if (result == CUDA_SUCCESS) return Status();
    const char* name = nullptr;
    const char* text = nullptr;
    if (api_.cuGetErrorName == nullptr || api_.cuGetErrorName(result, &name) != CUDA_SUCCESS ||
        name == nullptr) {
      name = "an unknown CUDA error";
    }
    if (api_.cuGetErrorString == nullptr || api_.cuGetErrorString(result, &text) != CUDA_SUCCESS ||
        text == nullptr) {
      text = "no description";
    }
    const std::string message = std::string(call) + " failed: " + name + " (" + text +
                                "; CUresult " + std::to_string(result) + ")";
    if (is_sticky_device_error(result)) {
      Status fault = internal_error(message);
      report_device_fault(fault);
      return fault;
    }
    if (result == CUDA_ERROR_OUT_OF_MEMORY) return unavailable(message);
    if (result == CUDA_ERROR_INVALID_VALUE || result == CUDA_ERROR_INVALID_DEVICE) {
      return invalid_argument(message);
    }
    return internal_error(message);
  }

  Status primary_context(int device, CUcontext* out) const {
    if (device < 0 || device >= count_) {
      return invalid_argument("CUDA device " + std::to_string(device) + " does not exist (" +
                              std::to_string(count_) + " visible)");
    }
    std::call_once(context_once_[device], [&] {
      CUdevice handle = 0;
      CUcontext context = nullptr;
      context_status_[device] = check(api_.cuDeviceGet(&handle, device), "cuDeviceGet");
      if (context_status_[device].ok()) {
        context_status_[device] =
            check(api_.cuDevicePrimaryCtxRetain(&context, handle), "cuDevicePrimaryCtxRetain");
      }
      contexts_[device] = context;  // retained for the process's life
    });
    PDKV_RETURN_IF_ERROR(context_status_[device]);
    *out = contexts_[device];
    return Status();
  }

  void* const lib_;
  const std::string description_;
  int count_ = 0;
  uint64_t max_pitch_ = UINT64_MAX;
  CudaApi api_;
  mutable std::array<std::once_flag, kMaxDevices> context_once_;
  mutable std::array<CUcontext, kMaxDevices> contexts_{};
  mutable std::array<Status, kMaxDevices> context_status_;
};

struct LoadedDriver {
  std::unique_ptr<DeviceDriver> driver;
  std::string absent_reason;
};

const LoadedDriver& loaded() {
  static const LoadedDriver* instance = [] {
    auto* result = new LoadedDriver();  // never freed: the driver outlives every static
    const char* env = std::getenv(std::string(kCudaLibrary.name).c_str());
    const bool named = env != nullptr && *env != '\0';
    const std::string path = named ? env : std::string(kCudaLibrary.string_default);
    Result<std::unique_ptr<CudaDriver>> driver = CudaDriver::load(path);
    if (driver.ok()) {
      PDKV_LOG_INFO("device memory: {} with {} device(s)", (*driver)->description(),
                    (*driver)->device_count());
      result->driver = std::move(*driver);
    } else {
      result->absent_reason = driver.status().message();
      if (named) {
        PDKV_LOG_WARN("device memory: PDKV_CUDA_LIBRARY={} is unusable: {}", path,
                      result->absent_reason);
      } else {
        PDKV_LOG_DEBUG("device memory: no CUDA driver ({})", result->absent_reason);
      }
    }
    return result;
  }();
  return *instance;
}

}  // namespace

DeviceDriver* device_driver() { return loaded().driver.get(); }

std::string device_driver_absent_reason() { return loaded().absent_reason; }

}  // namespace pdkv::engine
