// The part of the CUDA driver API pdkv calls, declared by pdkv itself.
//
// Debian main ships no CUDA toolkit (no cuda.h), and pdkv must build and run on machines
// without one, so these declarations are written from NVIDIA's public driver API reference
// (types, enumerator values, function signatures) and the driver library is opened at run
// time (cuda_driver.h). Only what pdkv needs is here. Functions are named with the version
// suffix the driver exports them under (cuMemcpyDtoHAsync_v2, ...): the un-suffixed names
// are the old ABI with 32-bit sizes, kept by the driver for old binaries.
//
// The fake driver (engine/device/fake/) exports the same names with the same signatures,
// so the loader cannot tell them apart.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // the driver's type on 64-bit platforms
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUarray = struct CUarray_st*;
using CUhostFn = void (*)(void* user_data);

// CUresult values pdkv distinguishes.
inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
inline constexpr CUresult CUDA_ERROR_INVALID_CONTEXT = 201;
inline constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
inline constexpr CUresult CUDA_ERROR_NOT_READY = 600;
inline constexpr CUresult CUDA_ERROR_ILLEGAL_ADDRESS = 700;
// The errors the reference calls fatal to the context: "any further CUDA work will return
// the same error" until the process is relaunched (cuda_driver.cc: is_sticky_error).
inline constexpr CUresult CUDA_ERROR_LAUNCH_TIMEOUT = 702;
inline constexpr CUresult CUDA_ERROR_HARDWARE_STACK_ERROR = 714;
inline constexpr CUresult CUDA_ERROR_ILLEGAL_INSTRUCTION = 715;
inline constexpr CUresult CUDA_ERROR_MISALIGNED_ADDRESS = 716;
inline constexpr CUresult CUDA_ERROR_INVALID_ADDRESS_SPACE = 717;
inline constexpr CUresult CUDA_ERROR_INVALID_PC = 718;
inline constexpr CUresult CUDA_ERROR_LAUNCH_FAILED = 719;
inline constexpr CUresult CUDA_ERROR_UNKNOWN = 999;

// CUmemorytype.
inline constexpr unsigned CU_MEMORYTYPE_HOST = 1;
inline constexpr unsigned CU_MEMORYTYPE_DEVICE = 2;
inline constexpr unsigned CU_MEMORYTYPE_ARRAY = 3;
inline constexpr unsigned CU_MEMORYTYPE_UNIFIED = 4;

// CUpointer_attribute.
using CUpointer_attribute = int;
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_CONTEXT = 1;
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;     // unsigned
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_IS_MANAGED = 8;      // int (bool)
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;  // int

// Flags.
inline constexpr unsigned CU_MEMHOSTALLOC_PORTABLE = 0x1;
inline constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
inline constexpr unsigned CU_EVENT_BLOCKING_SYNC = 0x1;  // cuEventSynchronize sleeps, not spins
inline constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
inline constexpr unsigned CU_MEM_ATTACH_GLOBAL = 0x1;

// CUdevice_attribute.
using CUdevice_attribute = int;
// The largest pitch (bytes) a 2-D copy may have; a larger one is CUDA_ERROR_INVALID_VALUE.
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_PITCH = 11;

// CUDA_MEMCPY2D (the _v2 layout): a copy of Height rows of WidthInBytes bytes, row i at
// src + srcY*srcPitch + srcXInBytes + i*srcPitch (and likewise for dst).
struct CUDA_MEMCPY2D {
  size_t srcXInBytes;
  size_t srcY;
  unsigned srcMemoryType;
  const void* srcHost;
  CUdeviceptr srcDevice;
  CUarray srcArray;
  size_t srcPitch;
  size_t dstXInBytes;
  size_t dstY;
  unsigned dstMemoryType;
  void* dstHost;
  CUdeviceptr dstDevice;
  CUarray dstArray;
  size_t dstPitch;
  size_t WidthInBytes;
  size_t Height;
};

// CUmemLocation / CUmemcpyAttributes_v1: per-copy attributes of a batched copy. pdkv
// sets only the source access order (stream order: the sources were written by work
// queued before the batch); the location hints matter for managed memory only.
struct CUmemLocation {
  int type;  // CUmemLocationType; 0 = invalid (no hint)
  int id;
};
struct CUmemcpyAttributes {
  int srcAccessOrder;  // CUmemcpySrcAccessOrder
  CUmemLocation srcLocHint;
  CUmemLocation dstLocHint;
  unsigned flags;
};
enum : int { CU_MEMCPY_SRC_ACCESS_ORDER_STREAM = 0x1 };

// The virtual memory management API (cuMemAddressReserve / cuMemCreate / cuMemMap), as
// PyTorch's expandable segments use it: one address range, several physical pieces mapped
// into it. Only tests allocate this way; pdkv meets such memory at registration.
using CUmemGenericAllocationHandle = unsigned long long;
inline constexpr int CU_MEM_ALLOCATION_TYPE_PINNED = 0x1;
inline constexpr int CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR =
    0x1;  // a bit of requestedHandleTypes
inline constexpr int CU_MEM_LOCATION_TYPE_DEVICE = 0x1;
inline constexpr int CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3;
inline constexpr int CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0;
struct CUmemAllocationProp {
  int type;                  // CUmemAllocationType
  int requestedHandleTypes;  // CUmemAllocationHandleType (a bit mask)
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};
struct CUmemAccessDesc {
  CUmemLocation location;
  int flags;  // CUmemAccess_flags
};

// Signatures, as function-pointer types (the loader resolves each by name).
using PFN_cuInit = CUresult (*)(unsigned flags);
using PFN_cuGetErrorString = CUresult (*)(CUresult error, const char** text);
using PFN_cuGetErrorName = CUresult (*)(CUresult error, const char** name);
using PFN_cuDeviceGetCount = CUresult (*)(int* count);
using PFN_cuDeviceGet = CUresult (*)(CUdevice* device, int ordinal);
using PFN_cuDeviceGetAttribute = CUresult (*)(int* value, CUdevice_attribute attribute,
                                              CUdevice device);
using PFN_cuDevicePrimaryCtxRetain = CUresult (*)(CUcontext* ctx, CUdevice device);
using PFN_cuDevicePrimaryCtxRelease_v2 = CUresult (*)(CUdevice device);
using PFN_cuCtxSetCurrent = CUresult (*)(CUcontext ctx);
using PFN_cuCtxGetCurrent = CUresult (*)(CUcontext* ctx);
using PFN_cuCtxSynchronize = CUresult (*)();
using PFN_cuPointerGetAttributes = CUresult (*)(unsigned count, CUpointer_attribute* attributes,
                                                void** data, CUdeviceptr ptr);
using PFN_cuMemGetAddressRange_v2 = CUresult (*)(CUdeviceptr* base, size_t* size, CUdeviceptr ptr);
using PFN_cuMemHostAlloc = CUresult (*)(void** ptr, size_t bytes, unsigned flags);
using PFN_cuMemFreeHost = CUresult (*)(void* ptr);
using PFN_cuStreamCreate = CUresult (*)(CUstream* stream, unsigned flags);
using PFN_cuStreamDestroy_v2 = CUresult (*)(CUstream stream);
using PFN_cuStreamSynchronize = CUresult (*)(CUstream stream);
using PFN_cuStreamWaitEvent = CUresult (*)(CUstream stream, CUevent event, unsigned flags);
using PFN_cuEventCreate = CUresult (*)(CUevent* event, unsigned flags);
using PFN_cuEventDestroy_v2 = CUresult (*)(CUevent event);
using PFN_cuEventRecord = CUresult (*)(CUevent event, CUstream stream);
using PFN_cuEventQuery = CUresult (*)(CUevent event);
using PFN_cuEventSynchronize = CUresult (*)(CUevent event);
using PFN_cuMemcpyDtoHAsync_v2 = CUresult (*)(void* dst, CUdeviceptr src, size_t bytes,
                                              CUstream stream);
using PFN_cuMemcpyHtoDAsync_v2 = CUresult (*)(CUdeviceptr dst, const void* src, size_t bytes,
                                              CUstream stream);
using PFN_cuMemcpy2DAsync_v2 = CUresult (*)(const CUDA_MEMCPY2D* copy, CUstream stream);
using PFN_cuLaunchHostFunc = CUresult (*)(CUstream stream, CUhostFn fn, void* user_data);
// Batched copies. CUDA 13 exports the form without a failure index as _v2; CUDA 12.8 and
// 12.9 export the first form, whose failIdx (set on an error) pdkv does not read.
using PFN_cuMemcpyBatchAsync_v2 = CUresult (*)(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                               size_t count, CUmemcpyAttributes* attrs,
                                               size_t* attrs_idxs, size_t num_attrs,
                                               CUstream stream);
using PFN_cuMemcpyBatchAsync = CUresult (*)(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                            size_t count, CUmemcpyAttributes* attrs,
                                            size_t* attrs_idxs, size_t num_attrs, size_t* fail_idx,
                                            CUstream stream);
// Used by tests and tools that make device buffers (never by the transfer path).
using PFN_cuMemAlloc_v2 = CUresult (*)(CUdeviceptr* ptr, size_t bytes);
using PFN_cuMemAllocManaged = CUresult (*)(CUdeviceptr* ptr, size_t bytes, unsigned flags);
using PFN_cuMemFree_v2 = CUresult (*)(CUdeviceptr ptr);
using PFN_cuMemcpyHtoD_v2 = CUresult (*)(CUdeviceptr dst, const void* src, size_t bytes);
using PFN_cuMemcpyDtoH_v2 = CUresult (*)(void* dst, CUdeviceptr src, size_t bytes);
using PFN_cuMemAddressReserve = CUresult (*)(CUdeviceptr* ptr, size_t size, size_t alignment,
                                             CUdeviceptr addr, unsigned long long flags);
using PFN_cuMemAddressFree = CUresult (*)(CUdeviceptr ptr, size_t size);
using PFN_cuMemCreate = CUresult (*)(CUmemGenericAllocationHandle* handle, size_t size,
                                     const CUmemAllocationProp* prop, unsigned long long flags);
using PFN_cuMemRelease = CUresult (*)(CUmemGenericAllocationHandle handle);
using PFN_cuMemMap = CUresult (*)(CUdeviceptr ptr, size_t size, size_t offset,
                                  CUmemGenericAllocationHandle handle, unsigned long long flags);
using PFN_cuMemUnmap = CUresult (*)(CUdeviceptr ptr, size_t size);
using PFN_cuMemSetAccess = CUresult (*)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                        size_t count);
using PFN_cuMemGetAllocationGranularity = CUresult (*)(size_t* granularity,
                                                       const CUmemAllocationProp* prop, int option);

// --- Same-host device IPC (engine/device/cuda_ipc_driver.h) ---------------------------------
// Exporting device memory to another process and mapping it there: the legacy IPC handles
// of cuMemAlloc-style allocations, the POSIX file-descriptor handles of the virtual-memory
// API (cuMemCreate allocations), peer access between two devices, and the device-to-device
// copies the writer issues into what it mapped.
inline constexpr CUresult CUDA_ERROR_ALREADY_MAPPED = 208;
inline constexpr CUresult CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217;
inline constexpr CUresult CUDA_ERROR_INVALID_HANDLE = 400;
inline constexpr CUresult CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704;
inline constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;

inline constexpr size_t CU_IPC_HANDLE_SIZE = 64;
struct CUipcMemHandle {
  char reserved[CU_IPC_HANDLE_SIZE];
};
inline constexpr unsigned CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1;

struct CUuuid {
  char bytes[16];
};

using PFN_cuIpcGetMemHandle = CUresult (*)(CUipcMemHandle* handle, CUdeviceptr ptr);
using PFN_cuIpcOpenMemHandle_v2 = CUresult (*)(CUdeviceptr* ptr, CUipcMemHandle handle,
                                               unsigned flags);
using PFN_cuIpcCloseMemHandle = CUresult (*)(CUdeviceptr ptr);
using PFN_cuMemRetainAllocationHandle = CUresult (*)(CUmemGenericAllocationHandle* handle,
                                                     void* addr);
using PFN_cuMemExportToShareableHandle = CUresult (*)(void* shareable,
                                                      CUmemGenericAllocationHandle handle,
                                                      int handle_type, unsigned long long flags);
using PFN_cuMemImportFromShareableHandle = CUresult (*)(CUmemGenericAllocationHandle* handle,
                                                        void* os_handle, int handle_type);
using PFN_cuDeviceCanAccessPeer = CUresult (*)(int* can_access, CUdevice device, CUdevice peer);
using PFN_cuCtxEnablePeerAccess = CUresult (*)(CUcontext peer, unsigned flags);
using PFN_cuDeviceGetUuid_v2 = CUresult (*)(CUuuid* uuid, CUdevice device);
using PFN_cuMemcpyDtoDAsync_v2 = CUresult (*)(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                              CUstream stream);
// --- end of same-host device IPC ------------------------------------------------------------

}  // extern "C"
