// The CUDA implementation of IpcDriver: the IPC and virtual-memory calls resolved from the
// library device_driver() opened (dlopen of the same path returns the same handle, so
// contexts and allocations are shared with it).
#include "engine/device/cuda_ipc_driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/logging.h"
#include "engine/device/cuda_driver_api.h"
#include "engine/device/device_health.h"
#include "engine/engine_settings.h"

namespace pdkv::engine {
namespace {

struct IpcApi {
  PFN_cuGetErrorString cuGetErrorString = nullptr;
  PFN_cuGetErrorName cuGetErrorName = nullptr;
  PFN_cuDeviceGet cuDeviceGet = nullptr;
  PFN_cuDeviceGetCount cuDeviceGetCount = nullptr;
  PFN_cuMemGetAddressRange_v2 cuMemGetAddressRange_v2 = nullptr;
  PFN_cuIpcGetMemHandle cuIpcGetMemHandle = nullptr;
  PFN_cuIpcOpenMemHandle_v2 cuIpcOpenMemHandle_v2 = nullptr;
  PFN_cuIpcCloseMemHandle cuIpcCloseMemHandle = nullptr;
  PFN_cuMemRetainAllocationHandle cuMemRetainAllocationHandle = nullptr;
  PFN_cuMemExportToShareableHandle cuMemExportToShareableHandle = nullptr;
  PFN_cuMemImportFromShareableHandle cuMemImportFromShareableHandle = nullptr;
  PFN_cuMemRelease cuMemRelease = nullptr;
  PFN_cuMemAddressReserve cuMemAddressReserve = nullptr;
  PFN_cuMemAddressFree cuMemAddressFree = nullptr;
  PFN_cuMemMap cuMemMap = nullptr;
  PFN_cuMemUnmap cuMemUnmap = nullptr;
  PFN_cuMemSetAccess cuMemSetAccess = nullptr;
  PFN_cuDeviceCanAccessPeer cuDeviceCanAccessPeer = nullptr;
  PFN_cuDeviceGetUuid_v2 cuDeviceGetUuid_v2 = nullptr;
  PFN_cuMemcpyDtoDAsync_v2 cuMemcpyDtoDAsync_v2 = nullptr;
  PFN_cuMemcpy2DAsync_v2 cuMemcpy2DAsync_v2 = nullptr;
  PFN_cuMemcpyBatchAsync_v2 cuMemcpyBatchAsync_v2 = nullptr;
  PFN_cuMemcpyBatchAsync cuMemcpyBatchAsync = nullptr;
};

// The arrays of one batched copy, per thread (the writer's thread reuses them).
struct BatchArrays {
  std::vector<CUdeviceptr> dsts, srcs;
  std::vector<size_t> sizes;
};
thread_local BatchArrays t_batch;

class CudaIpcDriver final : public IpcDriver {
 public:
  static Result<std::unique_ptr<CudaIpcDriver>> load(const std::string& path) {
    void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return unavailable("cannot open " + path);
    auto d = std::unique_ptr<CudaIpcDriver>(new CudaIpcDriver(lib, path));
    PDKV_RETURN_IF_ERROR(d->resolve_all());
    return d;
  }

  Result<ExportedPiece> export_piece(uint64_t addr) override {
    ExportedPiece piece;
    CUdeviceptr base = 0;
    size_t size = 0;
    PDKV_RETURN_IF_ERROR(
        check(api_.cuMemGetAddressRange_v2(&base, &size, addr), "cuMemGetAddressRange"));
    piece.base = base;
    piece.size = size;
    // A virtual-memory piece has an allocation handle; a cuMemAlloc allocation has not.
    CUmemGenericAllocationHandle handle = 0;
    if (api_.cuMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(base)) == CUDA_SUCCESS) {
      int fd = -1;
      const CUresult r = api_.cuMemExportToShareableHandle(
          &fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      (void)api_.cuMemRelease(handle);  // the exported descriptor holds its own reference
      PDKV_RETURN_IF_ERROR(
          check(r,
                "cuMemExportToShareableHandle (the allocation must be created with "
                "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR among its requested handle types)"));
      piece.kind = IpcHandleKind::kPosixFd;
      piece.fd = UniqueFd(fd);
      return piece;
    }
    CUipcMemHandle h{};
    PDKV_RETURN_IF_ERROR(check(api_.cuIpcGetMemHandle(&h, base), "cuIpcGetMemHandle"));
    piece.kind = IpcHandleKind::kLegacy;
    std::memcpy(piece.legacy.data(), h.reserved, kLegacyHandleBytes);
    return piece;
  }

  Result<OpenedPiece> open_piece(IpcHandleKind kind, std::span<const uint8_t> legacy, int fd,
                                 uint64_t size, int device) override {
    OpenedPiece opened;
    opened.kind = kind;
    opened.size = size;
    if (kind == IpcHandleKind::kLegacy) {
      if (legacy.size() != kLegacyHandleBytes) return invalid_argument("legacy IPC handle size");
      CUipcMemHandle h{};
      std::memcpy(h.reserved, legacy.data(), kLegacyHandleBytes);
      CUdeviceptr ptr = 0;
      // Lazy peer access: the driver enables it when the memory is on another device.
      PDKV_RETURN_IF_ERROR(
          check(api_.cuIpcOpenMemHandle_v2(&ptr, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                "cuIpcOpenMemHandle"));
      opened.local = ptr;
      return opened;
    }
    CUmemGenericAllocationHandle handle = 0;
    PDKV_RETURN_IF_ERROR(check(api_.cuMemImportFromShareableHandle(
                                   &handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                               "cuMemImportFromShareableHandle"));
    CUdeviceptr ptr = 0;
    Status st = check(api_.cuMemAddressReserve(&ptr, size, 0, 0, 0), "cuMemAddressReserve");
    if (st.ok()) {
      st = check(api_.cuMemMap(ptr, size, 0, handle, 0), "cuMemMap");
      if (st.ok()) {
        CUmemAccessDesc access{};
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = device;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        st = check(api_.cuMemSetAccess(ptr, size, &access, 1), "cuMemSetAccess");
        if (!st.ok()) (void)api_.cuMemUnmap(ptr, size);
      }
      if (!st.ok()) (void)api_.cuMemAddressFree(ptr, size);
    }
    if (!st.ok()) {
      (void)api_.cuMemRelease(handle);
      return st;
    }
    opened.local = ptr;
    opened.vmm_handle = handle;
    return opened;
  }

  void close_piece(const OpenedPiece& piece) override {
    if (piece.local == 0) return;
    if (piece.kind == IpcHandleKind::kLegacy) {
      (void)api_.cuIpcCloseMemHandle(piece.local);
      return;
    }
    (void)api_.cuMemUnmap(piece.local, piece.size);
    (void)api_.cuMemAddressFree(piece.local, piece.size);
    (void)api_.cuMemRelease(piece.vmm_handle);
  }

  Result<DeviceUuid> uuid(int device) override {
    CUdevice handle = 0;
    PDKV_RETURN_IF_ERROR(check(api_.cuDeviceGet(&handle, device), "cuDeviceGet"));
    CUuuid u{};
    PDKV_RETURN_IF_ERROR(check(api_.cuDeviceGetUuid_v2(&u, handle), "cuDeviceGetUuid"));
    DeviceUuid out;
    std::memcpy(out.data(), u.bytes, out.size());
    return out;
  }

  int device_with_uuid(const DeviceUuid& wanted) override {
    int count = 0;
    if (api_.cuDeviceGetCount(&count) != CUDA_SUCCESS) return -1;
    for (int d = 0; d < count; ++d) {
      Result<DeviceUuid> u = uuid(d);
      if (u.ok() && *u == wanted) return d;
    }
    return -1;
  }

  Result<bool> can_access_peer(int device, int peer) override {
    if (device == peer) return true;
    int can = 0;
    PDKV_RETURN_IF_ERROR(
        check(api_.cuDeviceCanAccessPeer(&can, device, peer), "cuDeviceCanAccessPeer"));
    return can != 0;
  }

  bool batches_copies() const override {
    return api_.cuMemcpyBatchAsync_v2 != nullptr || api_.cuMemcpyBatchAsync != nullptr;
  }

  Status copy_batch(DeviceStreamHandle stream, std::span<const CopyPiece> pieces) override {
    const auto s = static_cast<CUstream>(stream);
    if (pieces.empty()) return Status();
    if (!batches_copies() || pieces.size() == 1) {
      for (const CopyPiece& p : pieces) {
        PDKV_RETURN_IF_ERROR(
            check(api_.cuMemcpyDtoDAsync_v2(p.dst, p.src, p.bytes, s), "cuMemcpyDtoDAsync"));
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
    // One attribute entry for every copy: sources in stream order (the stream waited for
    // the sender's ready point before the batch).
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

  Status copy_strided(DeviceStreamHandle stream, const StridedCopy& c) override {
    CUDA_MEMCPY2D p{};
    p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = c.src;
    p.srcPitch = c.src_pitch;
    p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.dstDevice = c.dst;
    p.dstPitch = c.dst_pitch;
    p.WidthInBytes = c.width;
    p.Height = c.rows;
    return check(api_.cuMemcpy2DAsync_v2(&p, static_cast<CUstream>(stream)), "cuMemcpy2DAsync");
  }

 private:
  CudaIpcDriver(void* lib, std::string path) : lib_(lib), path_(std::move(path)) {}

  template <typename Fn>
  Status resolve(Fn* out, const char* name) {
    void* symbol = ::dlsym(lib_, name);
    if (symbol == nullptr) {
      return failed_precondition(path_ + " has no " + name +
                                 " (device IPC needs CUDA 11.4 or later)");
    }
    *out = reinterpret_cast<Fn>(symbol);
    return Status();
  }

  Status resolve_all() {
#define PDKV_RESOLVE(name) PDKV_RETURN_IF_ERROR(resolve(&api_.name, #name))
    PDKV_RESOLVE(cuGetErrorString);
    PDKV_RESOLVE(cuGetErrorName);
    PDKV_RESOLVE(cuDeviceGet);
    PDKV_RESOLVE(cuDeviceGetCount);
    PDKV_RESOLVE(cuMemGetAddressRange_v2);
    PDKV_RESOLVE(cuIpcGetMemHandle);
    PDKV_RESOLVE(cuIpcOpenMemHandle_v2);
    PDKV_RESOLVE(cuIpcCloseMemHandle);
    PDKV_RESOLVE(cuMemRetainAllocationHandle);
    PDKV_RESOLVE(cuMemExportToShareableHandle);
    PDKV_RESOLVE(cuMemImportFromShareableHandle);
    PDKV_RESOLVE(cuMemRelease);
    PDKV_RESOLVE(cuMemAddressReserve);
    PDKV_RESOLVE(cuMemAddressFree);
    PDKV_RESOLVE(cuMemMap);
    PDKV_RESOLVE(cuMemUnmap);
    PDKV_RESOLVE(cuMemSetAccess);
    PDKV_RESOLVE(cuDeviceCanAccessPeer);
    PDKV_RESOLVE(cuDeviceGetUuid_v2);
    PDKV_RESOLVE(cuMemcpyDtoDAsync_v2);
    PDKV_RESOLVE(cuMemcpy2DAsync_v2);
#undef PDKV_RESOLVE
    api_.cuMemcpyBatchAsync_v2 =
        reinterpret_cast<PFN_cuMemcpyBatchAsync_v2>(::dlsym(lib_, "cuMemcpyBatchAsync_v2"));
    if (api_.cuMemcpyBatchAsync_v2 == nullptr) {
      api_.cuMemcpyBatchAsync =
          reinterpret_cast<PFN_cuMemcpyBatchAsync>(::dlsym(lib_, "cuMemcpyBatchAsync"));
    }
    if (const char* off = std::getenv(std::string(kCudaNoBatchedCopies.name).c_str());
        off && *off && *off != '0') {
      api_.cuMemcpyBatchAsync_v2 = nullptr;
      api_.cuMemcpyBatchAsync = nullptr;
    }
    return Status();
  }

  // "cuMemMap failed: CUDA_ERROR_INVALID_VALUE (invalid argument; CUresult 1)", as
  // cuda_driver.cc words it. A context-fatal error (a copy into an opened peer's memory
  // that met an illegal address) becomes the process's device fault (device_health.h).
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
    std::string message = std::string(call) + " failed: " + name + " (" + text + "; CUresult " +
                          std::to_string(result) + ")";
    if (is_sticky_device_error(result)) {
      Status fault = internal_error(std::move(message));
      report_device_fault(fault);
      return fault;
    }
    if (result == CUDA_ERROR_OUT_OF_MEMORY) return unavailable(std::move(message));
    if (result == CUDA_ERROR_PEER_ACCESS_UNSUPPORTED || result == CUDA_ERROR_NOT_SUPPORTED) {
      return failed_precondition(std::move(message));
    }
    if (result == CUDA_ERROR_INVALID_VALUE || result == CUDA_ERROR_INVALID_HANDLE) {
      return invalid_argument(std::move(message));
    }
    return internal_error(std::move(message));
  }

  void* const lib_;
  const std::string path_;
  IpcApi api_;
};

struct Loaded {
  std::unique_ptr<IpcDriver> driver;
  std::string absent_reason;
};

const Loaded& loaded() {
  static const Loaded* instance = [] {
    auto* result = new Loaded();  // never freed, like the device driver it extends
    if (device_driver() == nullptr) {
      result->absent_reason = "no device driver: " + device_driver_absent_reason();
      return result;
    }
    const char* env = std::getenv(std::string(kCudaLibrary.name).c_str());
    const std::string path =
        env != nullptr && *env != '\0' ? env : std::string(kCudaLibrary.string_default);
    auto driver = CudaIpcDriver::load(path);
    if (driver.ok()) {
      result->driver = std::move(*driver);
    } else {
      result->absent_reason = driver.status().message();
      PDKV_LOG_INFO("device IPC unavailable: {}", result->absent_reason);
    }
    return result;
  }();
  return *instance;
}

}  // namespace

IpcDriver* ipc_driver() { return loaded().driver.get(); }
std::string ipc_driver_absent_reason() { return loaded().absent_reason; }

}  // namespace pdkv::engine
