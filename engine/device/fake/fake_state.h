// Process-wide state of the fake CUDA driver: initialisation, devices, primary contexts,
// the calling thread's current context, and the test modes (delay, poison, injected
// failure). fake_memory.h and fake_stream.h build on it; fake_cuda_exports.cc is the only
// caller from outside.
#pragma once

#include <atomic>
#include <cstddef>

#include "engine/device/cuda_driver_api.h"

// A device's primary context. One per device, created at cuInit and never freed (the
// handle must stay valid for as long as the library is loaded, as the driver's does).
struct CUstream_st;
struct CUctx_st {
  int device = 0;
  std::atomic<int> refcount{0};
  std::atomic<bool> ever_retained{false};
  // A fault the reference calls fatal to the context (an illegal address in a copy): once
  // set, every call that needs the context returns it, on every stream and thread.
  std::atomic<CUresult> sticky_error{CUDA_SUCCESS};
  // The legacy default stream, on which the synchronous copies run (made at first use):
  // an upload from pageable memory returns once its source is staged, before it lands.
  std::atomic<CUstream_st*> legacy_stream{nullptr};
};

namespace pdkv::fake_cuda {

// Not in cuda_driver_api.h (pdkv does not branch on it) but what the driver returns for a
// stream or event used under another context, so the fake returns it too.
inline constexpr CUresult kErrorInvalidHandle = 400;

CUresult init(unsigned flags);
bool initialized();
int device_count();  // 0 before cuInit
// nullptr for an ordinal out of range or before cuInit.
CUctx_st* primary_context(int device);
// Whether ctx is one of the primary contexts (a handle pdkv could have been given).
bool is_context(CUcontext ctx);

CUcontext current_context();
void set_current_context(CUcontext ctx);

// NOT_INITIALIZED before cuInit; INVALID_CONTEXT when the thread has no current context or
// its context was released to zero; otherwise CUDA_SUCCESS and *ctx = the current context.
// Every allocation, copy, stream and event call goes through it: that is what lets a test
// prove pdkv bound the thread to the registered device's context first.
// A context whose sticky error is set gets that error (after *ctx is set, so a destroy
// call can still free what it was given).
CUresult require_context(CUcontext* ctx);

// Marks ctx failed for good with `error` (the first such error stays).
void poison_context(CUcontext ctx, CUresult error);

// The largest 2-D copy pitch (CU_DEVICE_ATTRIBUTE_MAX_PITCH); real GPUs report 2^31 - 1.
inline constexpr size_t kDefaultMaxPitch = 2147483647;

// Test modes. Set from the environment at the first cuInit and by the pdkvFake* controls.
struct Modes {
  std::atomic<unsigned> copy_delay_us{0};
  std::atomic<bool> poison{false};
  // Async copies left to enqueue before the failing one (1 = the next); <= 0 = none.
  std::atomic<long> fail_countdown{-1};
  std::atomic<long> copies_executed{0};
  std::atomic<size_t> max_pitch{kDefaultMaxPitch};
  // How long an upload from pageable memory takes to land after cuMemcpyHtoD returns.
  std::atomic<unsigned> pageable_delay_us{1000};
  // cuEventSynchronize / cuStreamSynchronize calls that had to wait, by how: spinning (an
  // event without CU_EVENT_BLOCKING_SYNC, a stream under the default scheduling, burning a
  // core as the driver does) or sleeping (a blocking-sync event).
  std::atomic<long> spin_waits{0};
  std::atomic<long> blocking_waits{0};
};
Modes& modes();

// Called once per enqueued async copy: whether this copy is the one to fail.
bool take_injected_failure();

}  // namespace pdkv::fake_cuda
