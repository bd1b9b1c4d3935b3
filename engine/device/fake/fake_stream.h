// Fake streams and events. A stream is one worker thread running an in-order FIFO queue
// of operations (copies, event records, waits on events, host functions), so the caller
// sees the same asynchrony as with a GPU: an async copy has not happened when its call
// returns, and only an event or a stream synchronisation says when it has.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "engine/device/cuda_driver_api.h"

namespace pdkv::fake_cuda {

// One side of a copy. type is CU_MEMORYTYPE_HOST, _DEVICE or _UNIFIED (decided by the
// pointer when the copy runs).
struct CopySide {
  unsigned type = CU_MEMORYTYPE_HOST;
  uintptr_t addr = 0;  // first byte of the first row
  size_t pitch = 0;
};

// Height rows of width bytes; a 1-D copy is one row.
struct CopyDesc {
  CopySide src;
  CopySide dst;
  size_t width = 0;
  size_t height = 1;
};

// One record of an event: reached when the stream's thread gets to it. A wait enqueued
// on another stream holds the record it was given, not the event, so re-recording or
// destroying the event afterwards changes nothing for it (as with the driver).
struct Marker {
  bool reached = false;  // guarded by marker_mutex()
  CUresult error = CUDA_SUCCESS;
};
Mutex& marker_mutex();

struct Op {
  enum class Kind { kCopy, kRecord, kWait, kHostFn } kind = Kind::kCopy;
  CopyDesc copy;
  std::vector<CopyDesc> batch;  // a batched copy: these too, after `copy` (one driver call)
  bool inject_failure = false;
  // A synchronous upload from pageable memory: its source was staged here (the caller may
  // reuse its buffer at once), it lands after the pageable delay, and it is not counted.
  std::shared_ptr<std::vector<uint8_t>> staged;
  std::shared_ptr<Marker> marker;
  CUhostFn fn = nullptr;
  void* user_data = nullptr;
};

}  // namespace pdkv::fake_cuda

struct CUstream_st {
  CUcontext ctx = nullptr;
  pdkv::Mutex mu;
  pdkv::CondVar cv;  // work queued, work finished, or stopping
  std::deque<pdkv::fake_cuda::Op> queue PDKV_GUARDED_BY(mu);
  bool busy PDKV_GUARDED_BY(mu) = false;  // the thread is running an op taken off the queue
  bool stopping PDKV_GUARDED_BY(mu) = false;
  // Sticky: once a copy failed, every later record reports it and no later copy or host
  // function runs (the driver treats such faults as fatal to the context).
  CUresult error PDKV_GUARDED_BY(mu) = CUDA_SUCCESS;
  std::thread worker;
};

struct CUevent_st {
  CUcontext ctx = nullptr;
  unsigned flags = 0;  // CU_EVENT_BLOCKING_SYNC: cuEventSynchronize sleeps instead of spinning
  pdkv::Mutex mu;
  std::shared_ptr<pdkv::fake_cuda::Marker> latest PDKV_GUARDED_BY(mu);  // null: never recorded
};

namespace pdkv::fake_cuda {

CUstream_st* create_stream(CUcontext ctx);
void destroy_stream(CUstream_st* stream);  // runs what is queued, then joins the thread
// Waits as the driver does by default for a stream: spinning (counted as a spin wait).
CUresult synchronize_stream(CUstream_st* stream);
// Waits for everything queued in ctx (every stream, the legacy one too), sleeping.
CUresult synchronize_context(CUcontext ctx);

// The synchronous copies (cuMemcpyHtoD_v2 / cuMemcpyDtoH_v2), in the order of ctx's legacy
// default stream: each first waits for the uploads queued there before it. An upload from
// pageable memory stages its source and returns before its bytes land (the reference's
// "API synchronization behavior"); a download, and an upload from pinned memory, return
// once done. Neither is counted by pdkvFakeCopyCount nor subject to the test modes.
CUresult copy_sync(CUcontext ctx, const CopyDesc& copy, bool pageable_upload);
// Forgets ctx's sticky error (the fake's own tests only: a real context stays failed).
void clear_context_error(CUcontext ctx);

// Checks the copy's shape, poisons a host destination in poison mode, and enqueues it.
CUresult enqueue_copy(CUstream_st* stream, const CopyDesc& copy);
// One op running every copy of `copies` (non-empty): a batched copy is one driver call,
// counted once, failed or delayed as a whole.
CUresult enqueue_copies(CUstream_st* stream, std::vector<CopyDesc> copies);
// Runs a copy at once on the calling thread (the synchronous cuMemcpy*_v2 and the stream
// threads): CUDA_ERROR_ILLEGAL_ADDRESS when a side is not where its type says.
CUresult copy_now(const CopyDesc& copy);
void enqueue_record(CUstream_st* stream, CUevent_st* event);
void enqueue_wait(CUstream_st* stream, CUevent_st* event);
void enqueue_host_fn(CUstream_st* stream, CUhostFn fn, void* user_data);

CUresult query_event(CUevent_st* event);
CUresult synchronize_event(CUevent_st* event);

}  // namespace pdkv::fake_cuda
