// DeviceDriver: what pdkv needs of a GPU driver, and nothing more.
//
// Pointer queries (at registration only: never per transfer), the current device of a
// thread, pinned host memory, streams, asynchronous device<->host copies (plain and
// strided, so a head-split run of 16 pieces is one driver call, not 16), events, waits on
// the device and host callbacks. One implementation exists today, CUDA's
// (cuda_driver.h), which also drives the fake driver CI tests with.
//
// Handles are opaque pointers owned by the caller, who destroys them with the matching
// call. Every call that touches a stream, an event or pinned memory must run on a thread
// bound to that device with bind_thread() (the driver refuses otherwise): pdkv never
// lets a copy thread fall back to an implicit device 0, which would create a context
// (hundreds of MiB) on a GPU the process does not use.
//
// Thread safety: all methods may be called concurrently; a stream's operations run in
// the order they were issued.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "common/status.h"
#include "engine/device/memory_kind.h"

namespace pdkv::engine {

struct PointerInfo {
  MemoryKind kind = MemoryKind::kHost;  // kHost also for memory the driver does not know
  int device = -1;                      // device ordinal (kCuda), else -1
  bool managed = false;                 // unified (managed) memory
  uint64_t allocation_base = 0;         // the device allocation holding it (kCuda)
  uint64_t allocation_size = 0;
};

// Height rows of `width` bytes: row i from src + i * src_pitch to dst + i * dst_pitch.
// Exactly one side is device memory (to_device says which); the other is host memory.
struct StridedCopy {
  uint64_t dst = 0;
  uint64_t dst_pitch = 0;
  uint64_t src = 0;
  uint64_t src_pitch = 0;
  uint64_t width = 0;
  uint64_t rows = 1;
  bool to_device = false;
};

// One copy of a batch: `bytes` from src to dst. Within a batch every copy goes the same
// way (to_device says which) and none overlaps another's destination.
struct CopyPiece {
  uint64_t dst = 0;
  uint64_t src = 0;
  uint64_t bytes = 0;
};

using DeviceStreamHandle = void*;
using DeviceEventHandle = void*;

class DeviceDriver {
 public:
  virtual ~DeviceDriver() = default;
  // "cuda (libcuda.so.1)" or the library the driver was loaded from.
  virtual const std::string& description() const = 0;
  virtual int device_count() const = 0;

  // Kind, device and allocation of `addr`, as the driver reports it (any thread).
  virtual Result<PointerInfo> query_pointer(uint64_t addr) const = 0;

  // Makes `device`'s primary context current on the calling thread (retained once per
  // device and process; a no-op when already current). For pdkv's own threads; on a
  // caller's thread use ScopedDevice, which gives the thread its context back.
  virtual Status bind_thread(int device) = 0;
  // What ScopedDevice is made of: makes `device`'s primary context current and returns
  // the context that was current before (null if none); restore_context puts it back.
  virtual Result<void*> swap_context(int device) = 0;
  virtual void restore_context(void* previous) = 0;

  virtual Result<void*> alloc_pinned(size_t bytes) = 0;
  virtual void free_pinned(void* ptr) = 0;
  virtual Result<DeviceStreamHandle> create_stream() = 0;
  virtual void destroy_stream(DeviceStreamHandle stream) = 0;
  virtual Result<DeviceEventHandle> create_event() = 0;
  virtual void destroy_event(DeviceEventHandle event) = 0;

  // Asynchronous copies on `stream` (they may run after the call returns).
  virtual Status copy_to_host(DeviceStreamHandle stream, void* dst, uint64_t src, size_t bytes) = 0;
  virtual Status copy_to_device(DeviceStreamHandle stream, uint64_t dst, const void* src,
                                size_t bytes) = 0;
  virtual Status copy_strided(DeviceStreamHandle stream, const StridedCopy& copy) = 0;
  // Many small copies (scattered pages, 512 B - 64 KiB each) as one driver call where the
  // driver has batched copies (cuMemcpyBatchAsync, CUDA 12.8+), else one call each. The
  // batch runs in stream order; its copies in any order among themselves.
  virtual Status copy_batch(DeviceStreamHandle stream, std::span<const CopyPiece> pieces,
                            bool to_device) = 0;
  // Whether copy_batch is one driver call (for the benchmark's report).
  virtual bool batches_copies() const = 0;

  virtual Status record(DeviceEventHandle event, DeviceStreamHandle stream) = 0;
  // True once everything before the event's record ran; an error if a copy failed.
  virtual Result<bool> event_done(DeviceEventHandle event) = 0;
  // Blocks the calling thread until the event is done (or failed).
  virtual Status event_wait(DeviceEventHandle event) = 0;
  // Makes `stream` wait on the device for `event` (no host synchronisation).
  virtual Status stream_wait(DeviceStreamHandle stream, DeviceEventHandle event) = 0;
  // Runs fn(user) on a driver thread once everything issued before on `stream` ran.
  // `fn` must not call the driver.
  virtual Status call_when_done(DeviceStreamHandle stream, void (*fn)(void*), void* user) = 0;
  virtual Status sync_stream(DeviceStreamHandle stream) = 0;
};

// Binds the calling thread to `device` for a scope and then restores whatever context it
// had: for work pdkv does on a caller's thread (a framework's thread keeps its own
// current device, which pdkv must not change under it).
class ScopedDevice {
 public:
  static Result<ScopedDevice> bind(DeviceDriver* driver, int device) {
    PDKV_ASSIGN_OR_RETURN(void* previous, driver->swap_context(device));
    return ScopedDevice(driver, previous);
  }
  ScopedDevice(ScopedDevice&& other) noexcept
      : driver_(std::exchange(other.driver_, nullptr)), previous_(other.previous_) {}
  ScopedDevice& operator=(ScopedDevice&&) = delete;
  ~ScopedDevice() {
    if (driver_ != nullptr) driver_->restore_context(previous_);
  }

 private:
  ScopedDevice(DeviceDriver* driver, void* previous) : driver_(driver), previous_(previous) {}
  DeviceDriver* driver_;
  void* previous_;
};

// The process's device driver, loaded on first use: the library named by PDKV_CUDA_LIBRARY,
// else libcuda.so.1. Null when there is none (a machine without a GPU driver: everything
// then runs on host memory). An unusable library named explicitly is logged once.
DeviceDriver* device_driver();

// Why device_driver() is null ("" when it is not): for errors that tell the user the fix.
std::string device_driver_absent_reason();

}  // namespace pdkv::engine
