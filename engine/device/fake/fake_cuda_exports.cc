// libpdkv_fake_cuda.so: a stand-in for the CUDA driver (libcuda.so.1) so that pdkv's GPU
// path runs in CI on machines without a GPU. pdkv opens it through PDKV_CUDA_LIBRARY and
// resolves the same names, with the same signatures (engine/device/cuda_driver_api.h).
//
// What a test run against it proves:
//  - pdkv never touches device memory with the CPU: device addresses are PROT_NONE, so a
//    load or store faults and send()/recv()/process_vm_writev() on them fail with EFAULT.
//  - pdkv waits for a copy before using its result: copies run on a stream thread, later
//    than the call that enqueued them (PDKV_FAKE_CUDA_DELAY_US makes that later still), and
//    in poison mode a host destination holds 0xA5 bytes until the copy really ran.
//  - pdkv binds each thread to the registered device's primary context: every allocation,
//    copy, stream and event call without a current context fails with
//    CUDA_ERROR_INVALID_CONTEXT, and pdkvFakeContextCreated() says which devices got one.
//  - pdkv handles driver errors: PDKV_FAKE_CUDA_FAIL_COPY_AFTER fails one copy with
//    CUDA_ERROR_ILLEGAL_ADDRESS, and, as the reference says of that error, the whole
//    context is failed afterwards: every later call needing it returns the same error,
//    on every stream and thread, and no copy or host function runs any more.
//  - pdkv synchronises after a synchronous upload from pageable memory before a
//    non-blocking stream reads the bytes: such an upload returns once its source is
//    staged and lands later (PDKV_FAKE_CUDA_PAGEABLE_DELAY_US, default 1 ms).
//  - pdkv's waits sleep: cuEventSynchronize on an event made without
//    CU_EVENT_BLOCKING_SYNC, and cuStreamSynchronize, spin a core as the driver does by
//    default; pdkvFakeSpinWaits() / pdkvFakeBlockingWaits() count each kind.
//  - pdkv splits 2-D copies whose pitch exceeds CU_DEVICE_ATTRIBUTE_MAX_PITCH
//    (PDKV_FAKE_CUDA_MAX_PITCH): the fake refuses them with CUDA_ERROR_INVALID_VALUE.
//  - pdkv registers memory made of several mapped pieces (cuMemAddressReserve +
//    cuMemCreate + cuMemMap, as PyTorch's expandable segments): cuMemGetAddressRange
//    gives the mapped piece, not the reservation.
//  - error messages carry both cuGetErrorName and cuGetErrorString, which differ.
//  - pdkv merges strided runs into 2-D copies and scattered pieces into batched copies:
//    pdkvFakeCopyCount() counts driver copies (a batch counts once).
//  - copies stay inside one allocation: a range that strays out is CUDA_ERROR_ILLEGAL_ADDRESS,
//    and allocations are never adjacent.
//
// What it does not prove:
//  - anything about speed: a copy is a memcpy on a CPU thread, with no DMA engine, no PCIe
//    or NVLink, no overlap limits of real copy engines. Never quote timings taken with it.
//  - unified addressing beyond what is described here: CU_MEMORYTYPE_UNIFIED means "look
//    the pointer up", pageable host memory is accepted as is, a pinned host pointer is not
//    accepted as a device address, and managed memory is only a flag (it is no more
//    CPU-accessible than device memory).
//  - the driver's own quirks: no peer access, no default (null) stream handle (pdkv always
//    creates its own; the null stream is refused with CUDA_ERROR_INVALID_VALUE; only the
//    synchronous copies use the legacy stream internally), no context reset (only the
//    fake's own tests clear a sticky error, pdkvFakeClearStickyError), no limits on memory,
//    virtual memory in 2 MiB granules with mapping offsets but no other flags. Its behaviour
//    follows the public reference as far as pdkv relies on it; where the reference is silent the
//    fake is the stricter choice.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/device/cuda_driver_api.h"
#include "engine/device/fake/fake_memory.h"
#include "engine/device/fake/fake_state.h"
#include "engine/device/fake/fake_stream.h"

#define PDKV_FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace fc = pdkv::fake_cuda;

namespace {

// The checks every call taking a handle starts with, in the driver's order: a current
// context (else its error), then a handle at all (else CUDA_ERROR_INVALID_VALUE).
CUresult require_handle(const void* handle, CUcontext* ctx) {
  if (CUresult r = fc::require_context(ctx); r != CUDA_SUCCESS) return r;
  return handle == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

// A destroy or free call still frees what it was given when the context has failed (so a
// failed process does not leak), and reports the context's error.
bool freeing_allowed(CUresult r) {
  return r == CUDA_SUCCESS ||
         (fc::current_context() != nullptr && r == fc::current_context()->sticky_error.load());
}

// Streams and events are used under the context they were created in; any other current
// context is the driver's "invalid resource handle".
CUresult require_stream(CUstream stream, CUcontext* ctx) {
  if (CUresult r = require_handle(stream, ctx); r != CUDA_SUCCESS) return r;
  return stream->ctx == *ctx ? CUDA_SUCCESS : fc::kErrorInvalidHandle;
}

CUresult async_copy(CUstream stream, const fc::CopyDesc& copy) {
  CUcontext ctx;
  if (CUresult r = require_stream(stream, &ctx); r != CUDA_SUCCESS) return r;
  return fc::enqueue_copy(stream, copy);
}

fc::CopyDesc linear_copy(unsigned src_type, uintptr_t src, unsigned dst_type, uintptr_t dst,
                         size_t bytes) {
  fc::CopyDesc c;
  c.src = {src_type, src, bytes};
  c.dst = {dst_type, dst, bytes};
  c.width = bytes;
  c.height = 1;
  return c;
}

// A 2-D side: where row 0 starts, with the host or device pointer the type selects.
fc::CopySide side(unsigned type, const void* host, CUdeviceptr device, size_t x, size_t y,
                  size_t pitch) {
  uintptr_t base = type == CU_MEMORYTYPE_HOST ? reinterpret_cast<uintptr_t>(host)
                                              : static_cast<uintptr_t>(device);
  return {type, base + y * pitch + x, pitch};
}

}  // namespace

PDKV_FAKE_EXPORT CUresult cuInit(unsigned flags) { return fc::init(flags); }

namespace {
struct ErrorText {
  CUresult code;
  const char* name;
  const char* description;
};
// Names as cuda.h spells them; descriptions in the driver's words where pdkv's tests or
// users read them (the fake's own, never parsed by pdkv).
constexpr ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {fc::kErrorInvalidHandle, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
    // The inter-process calls' (fake_ipc.cc, fake_vmm_exports.cc).
    {CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
     "peer access is not supported between these two devices"},
    {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
     "peer access is already enabled"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};
const ErrorText* error_text(CUresult error) {
  for (const ErrorText& e : kErrors) {
    if (e.code == error) return &e;
  }
  return nullptr;
}
}  // namespace

// Both leave *text untouched on an unknown code and return CUDA_ERROR_INVALID_VALUE, as
// the reference says.
PDKV_FAKE_EXPORT CUresult cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = error_text(error);
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *text = e->description;
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuGetErrorName(CUresult error, const char** name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = error_text(error);
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *name = e->name;
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = fc::device_count();
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (fc::primary_context(ordinal) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

// Only CU_DEVICE_ATTRIBUTE_MAX_PITCH (PDKV_FAKE_CUDA_MAX_PITCH, default 2^31 - 1).
PDKV_FAKE_EXPORT CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute,
                                               CUdevice device) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (fc::primary_context(device) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (attribute != CU_DEVICE_ATTRIBUTE_MAX_PITCH) return CUDA_ERROR_INVALID_VALUE;
  *value = static_cast<int>(std::min<size_t>(fc::modes().max_pitch.load(), 2147483647));
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* primary = fc::primary_context(device);
  if (primary == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  primary->refcount.fetch_add(1);
  primary->ever_retained.store(true);
  *ctx = primary;
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUctx_st* primary = fc::primary_context(device);
  if (primary == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  int n = primary->refcount.load();
  while (n > 0 && !primary->refcount.compare_exchange_weak(n, n - 1)) {
  }
  return n > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;  // released more than retained
}

PDKV_FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx != nullptr && !fc::is_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  fc::set_current_context(ctx);
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuCtxSynchronize() {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  return fc::synchronize_context(ctx);
}

PDKV_FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = fc::current_context();
  return CUDA_SUCCESS;
}

// Works without a current context (the pointer says which context it belongs to). Unknown
// pointers succeed with "unknown" values: memory type 0, not managed, ordinal -1, no context.
PDKV_FAKE_EXPORT CUresult cuPointerGetAttributes(unsigned count, CUpointer_attribute* attributes,
                                                 void** data, CUdeviceptr ptr) {
  if (!fc::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (count > 0 && (attributes == nullptr || data == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  fc::PointerInfo info = fc::lookup(static_cast<uintptr_t>(ptr));
  const bool device = info.kind == fc::PointerKind::kDevice;
  for (unsigned i = 0; i < count; ++i) {
    if (data[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    switch (attributes[i]) {
      case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data[i]) = info.ctx; break;
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *static_cast<unsigned*>(data[i]) = device ? CU_MEMORYTYPE_DEVICE
                                           : info.kind == fc::PointerKind::kPinnedHost
                                               ? CU_MEMORYTYPE_HOST
                                               : 0u;
        break;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *static_cast<int*>(data[i]) = info.managed ? 1 : 0;
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *static_cast<int*>(data[i]) = device ? info.ctx->device : -1;
        break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size,
                                                  CUdeviceptr ptr) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  fc::PointerInfo info = fc::lookup(static_cast<uintptr_t>(ptr));
  if (info.kind != fc::PointerKind::kDevice) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = info.base;
  if (size != nullptr) *size = info.size;
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuMemHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  return fc::alloc_pinned_host(bytes, ctx, ptr);
}

PDKV_FAKE_EXPORT CUresult cuMemFreeHost(void* ptr) {
  CUcontext ctx;
  CUresult r = fc::require_context(&ctx);
  if (!freeing_allowed(r)) return r;
  CUresult freed = fc::free_pinned_host(ptr);
  return r != CUDA_SUCCESS ? r : freed;
}

PDKV_FAKE_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned flags) {
  CUcontext ctx;
  if (CUresult r = require_handle(stream, &ctx); r != CUDA_SUCCESS) return r;
  *stream = fc::create_stream(ctx);
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  CUcontext ctx;
  CUresult r = require_handle(stream, &ctx);
  if (!freeing_allowed(r) || stream == nullptr) return r;
  fc::destroy_stream(stream);
  return r;
}

PDKV_FAKE_EXPORT CUresult cuStreamSynchronize(CUstream stream) {
  CUcontext ctx;
  if (CUresult r = require_handle(stream, &ctx); r != CUDA_SUCCESS) return r;
  return fc::synchronize_stream(stream);
}

// The event may belong to another context or device (the driver allows cross-device waits).
PDKV_FAKE_EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned flags) {
  CUcontext ctx;
  if (CUresult r = require_stream(stream, &ctx); r != CUDA_SUCCESS) return r;
  if (event == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  fc::enqueue_wait(stream, event);
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuEventCreate(CUevent* event, unsigned flags) {
  CUcontext ctx;
  if (CUresult r = require_handle(event, &ctx); r != CUDA_SUCCESS) return r;
  auto* e = new CUevent_st();
  e->ctx = ctx;
  e->flags = flags;
  *event = e;
  return CUDA_SUCCESS;
}

// A record still queued holds its own marker, so destroying a pending event is safe.
PDKV_FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent event) {
  CUcontext ctx;
  CUresult r = require_handle(event, &ctx);
  if (!freeing_allowed(r) || event == nullptr) return r;
  delete event;
  return r;
}

PDKV_FAKE_EXPORT CUresult cuEventRecord(CUevent event, CUstream stream) {
  CUcontext ctx;
  if (CUresult r = require_stream(stream, &ctx); r != CUDA_SUCCESS) return r;
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (event->ctx != ctx) return fc::kErrorInvalidHandle;
  fc::enqueue_record(stream, event);
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuEventQuery(CUevent event) {
  CUcontext ctx;
  if (CUresult r = require_handle(event, &ctx); r != CUDA_SUCCESS) return r;
  return fc::query_event(event);
}

PDKV_FAKE_EXPORT CUresult cuEventSynchronize(CUevent event) {
  CUcontext ctx;
  if (CUresult r = require_handle(event, &ctx); r != CUDA_SUCCESS) return r;
  return fc::synchronize_event(event);
}

PDKV_FAKE_EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes,
                                               CUstream stream) {
  return async_copy(
      stream, linear_copy(CU_MEMORYTYPE_DEVICE, static_cast<uintptr_t>(src), CU_MEMORYTYPE_HOST,
                          reinterpret_cast<uintptr_t>(dst), bytes));
}

PDKV_FAKE_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes,
                                               CUstream stream) {
  return async_copy(stream, linear_copy(CU_MEMORYTYPE_HOST, reinterpret_cast<uintptr_t>(src),
                                        CU_MEMORYTYPE_DEVICE, static_cast<uintptr_t>(dst), bytes));
}

PDKV_FAKE_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* copy, CUstream stream) {
  if (copy == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // A pitch above CU_DEVICE_ATTRIBUTE_MAX_PITCH is refused, whatever the height.
  const size_t max_pitch = fc::modes().max_pitch.load();
  if (copy->srcPitch > max_pitch || copy->dstPitch > max_pitch) return CUDA_ERROR_INVALID_VALUE;
  fc::CopyDesc c;
  c.src = side(copy->srcMemoryType, copy->srcHost, copy->srcDevice, copy->srcXInBytes, copy->srcY,
               copy->srcPitch);
  c.dst = side(copy->dstMemoryType, copy->dstHost, copy->dstDevice, copy->dstXInBytes, copy->dstY,
               copy->dstPitch);
  c.width = copy->WidthInBytes;
  c.height = copy->Height;
  return async_copy(stream, c);
}

// The CUDA 13 form (no failure index). Like the driver, every copy needs an attribute
// entry: attrs_idxs[0] must be 0, the entries strictly increasing, each with a valid
// source access order.
PDKV_FAKE_EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                                size_t count, CUmemcpyAttributes* attrs,
                                                size_t* attrs_idxs, size_t num_attrs,
                                                CUstream stream) {
  CUcontext ctx;
  if (CUresult r = require_stream(stream, &ctx); r != CUDA_SUCCESS) return r;
  if (count == 0 || dsts == nullptr || srcs == nullptr || sizes == nullptr || attrs == nullptr ||
      attrs_idxs == nullptr || num_attrs == 0 || num_attrs > count || attrs_idxs[0] != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < num_attrs; ++i) {
    if (attrs[i].srcAccessOrder < 1 || attrs[i].srcAccessOrder > 3) return CUDA_ERROR_INVALID_VALUE;
    if (i > 0 && attrs_idxs[i] <= attrs_idxs[i - 1]) return CUDA_ERROR_INVALID_VALUE;
    if (attrs_idxs[i] >= count) return CUDA_ERROR_INVALID_VALUE;
  }
  std::vector<fc::CopyDesc> copies;
  copies.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    copies.push_back(linear_copy(CU_MEMORYTYPE_UNIFIED, static_cast<uintptr_t>(srcs[i]),
                                 CU_MEMORYTYPE_UNIFIED, static_cast<uintptr_t>(dsts[i]), sizes[i]));
  }
  return fc::enqueue_copies(stream, std::move(copies));
}

PDKV_FAKE_EXPORT CUresult cuLaunchHostFunc(CUstream stream, CUhostFn fn, void* user_data) {
  CUcontext ctx;
  if (CUresult r = require_stream(stream, &ctx); r != CUDA_SUCCESS) return r;
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  fc::enqueue_host_fn(stream, fn, user_data);
  return CUDA_SUCCESS;
}

PDKV_FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  return fc::alloc_device(bytes, ctx, /*managed=*/false, ptr);
}

PDKV_FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* ptr, size_t bytes, unsigned flags) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  return fc::alloc_device(bytes, ctx, /*managed=*/true, ptr);
}

PDKV_FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
  CUcontext ctx;
  CUresult r = fc::require_context(&ctx);
  if (!freeing_allowed(r)) return r;
  CUresult freed = fc::free_device(ptr);
  return r != CUDA_SUCCESS ? r : freed;
}

// The synchronous copies, in the legacy default stream's order (fake_stream.h:
// copy_sync): from pageable memory an upload returns before its bytes land, so a reader
// on a non-blocking stream (all of pdkv's) must synchronise first (cuCtxSynchronize).
// They bypass the test modes and the copy count.
PDKV_FAKE_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  const auto from = reinterpret_cast<uintptr_t>(src);
  const bool pageable = fc::lookup(from).kind != fc::PointerKind::kPinnedHost;
  return fc::copy_sync(ctx,
                       linear_copy(CU_MEMORYTYPE_HOST, from, CU_MEMORYTYPE_DEVICE,
                                   static_cast<uintptr_t>(dst), bytes),
                       pageable && bytes > 0);
}

PDKV_FAKE_EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  CUcontext ctx;
  if (CUresult r = fc::require_context(&ctx); r != CUDA_SUCCESS) return r;
  return fc::copy_sync(ctx,
                       linear_copy(CU_MEMORYTYPE_DEVICE, static_cast<uintptr_t>(src),
                                   CU_MEMORYTYPE_HOST, reinterpret_cast<uintptr_t>(dst), bytes),
                       false);
}

// --- Test controls (also set from the environment at the first cuInit, fake_state.cc)
// --------------------------------------------------------------------

PDKV_FAKE_EXPORT int pdkvFakeContextCreated(int device) {
  CUctx_st* primary = fc::primary_context(device);
  return primary != nullptr && primary->ever_retained.load() ? 1 : 0;
}

PDKV_FAKE_EXPORT void pdkvFakeSetCopyDelayUs(unsigned us) { fc::modes().copy_delay_us.store(us); }

PDKV_FAKE_EXPORT void pdkvFakeSetPoison(int on) { fc::modes().poison.store(on != 0); }

PDKV_FAKE_EXPORT void pdkvFakeFailCopyAfter(long n) {
  fc::modes().fail_countdown.store(n > 0 ? n : -1);
}

// Async copies the stream threads took up (a 2-D copy is one; an injected failure counts; a
// copy skipped because its stream had already failed does not). Synchronous copies do not.
PDKV_FAKE_EXPORT long pdkvFakeCopyCount(void) { return fc::modes().copies_executed.load(); }

PDKV_FAKE_EXPORT void pdkvFakeSetMaxPitch(size_t bytes) {
  fc::modes().max_pitch.store(bytes > 0 ? bytes : fc::kDefaultMaxPitch);
}

PDKV_FAKE_EXPORT void pdkvFakeSetPageableDelayUs(unsigned us) {
  fc::modes().pageable_delay_us.store(us);
}

// Waits that spun (an event without CU_EVENT_BLOCKING_SYNC, cuStreamSynchronize) and waits
// that slept (a blocking-sync event), counted only when the call had to wait at all.
PDKV_FAKE_EXPORT long pdkvFakeSpinWaits(void) { return fc::modes().spin_waits.load(); }
PDKV_FAKE_EXPORT long pdkvFakeBlockingWaits(void) { return fc::modes().blocking_waits.load(); }

// The context's sticky error, or CUDA_SUCCESS.
PDKV_FAKE_EXPORT CUresult pdkvFakeStickyError(int device) {
  CUctx_st* primary = fc::primary_context(device);
  return primary != nullptr ? primary->sticky_error.load() : CUDA_ERROR_INVALID_DEVICE;
}

// For the fake's own tests, which share one process: a real driver has no way back from
// a sticky error but a new process.
PDKV_FAKE_EXPORT void pdkvFakeClearStickyError(int device) {
  if (CUctx_st* primary = fc::primary_context(device)) fc::clear_context_error(primary);
}
