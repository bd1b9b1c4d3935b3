// Device buffers for tests, tools and benchmarks: allocation and synchronous copies
// through the same driver library the engine loaded (device_driver.h), so one test runs
// unchanged on the fake driver in CI and on a real GPU. The transfer path never uses
// this: it only moves memory the application allocated.
//
// Thread safety: any thread (each call binds its thread to the buffer's device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/status.h"

namespace pdkv::engine::testing {

class DeviceBuffer {
 public:
  // `managed`: CUDA managed memory (which registration must refuse).
  static Result<std::unique_ptr<DeviceBuffer>> allocate(int device, size_t bytes,
                                                        bool managed = false);
  // One address range made of `pieces` separately created pieces of `piece_bytes` each
  // (a multiple of the driver's granularity), mapped back to back: the way PyTorch's
  // expandable segments (and any cuMemMap allocator) grow a buffer.
  static Result<std::unique_ptr<DeviceBuffer>> allocate_mapped_pieces(int device,
                                                                      size_t piece_bytes,
                                                                      size_t pieces);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  uint64_t addr() const { return addr_; }
  size_t size() const { return size_; }
  int device() const { return device_; }

  // Copies between host memory and [addr() + offset, +bytes), landed on return: an upload
  // from pageable memory synchronises the context after the copy (the driver returns
  // from it once the source is staged, before the bytes land).
  Status upload(size_t offset, const void* src, size_t bytes);
  Status download(size_t offset, void* dst, size_t bytes) const;

 private:
  DeviceBuffer(uint64_t addr, size_t size, int device)
      : addr_(addr), size_(size), device_(device) {}
  uint64_t addr_;
  size_t size_;
  int device_;
  bool mapped_pieces_ = false;  // freed with cuMemUnmap + cuMemAddressFree
};

// An event made the way pdkv made them before it used blocking-sync events (timing off,
// nothing else): cuEventSynchronize on it polls a core. The benchmark's baseline for the
// waiting threads' CPU; destroy it with DeviceDriver::destroy_event. The calling thread
// must be bound to the device.
Result<void*> create_polling_event();

// The fake driver's test controls (engine/device/fake/), when the loaded driver is the
// fake; each returns false (and does nothing) on a real driver.
bool fake_device_set_copy_delay_us(unsigned us);
bool fake_device_set_poison(bool on);
bool fake_device_fail_copy_after(long n);
// -1 where the loaded driver is not the fake.
long fake_device_copy_count();
int fake_device_context_created(int device);
// Driver waits that polled a core / that slept (-1 on a real driver).
long fake_device_spin_waits();
long fake_device_blocking_waits();
// CU_DEVICE_ATTRIBUTE_MAX_PITCH from now on (0: the default).
bool fake_device_set_max_pitch(size_t bytes);

}  // namespace pdkv::engine::testing
