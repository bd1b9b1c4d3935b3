#include "engine/device/registered_bytes.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "engine/device/device_driver.h"

namespace pdkv::engine {
namespace {

constexpr size_t kChunkBytes = 1 << 20;

// One thread's staging for one device, released when the thread ends.
class ThreadStaging {
 public:
  ~ThreadStaging() { reset(); }

  // The calling thread is bound to `device` (visit_registered_bytes' ScopedDevice).
  Status prepare(DeviceDriver* driver, int device) {
    if (driver_ == driver && device_ == device) return Status();
    reset();
    driver_ = driver;
    device_ = device;
    PDKV_ASSIGN_OR_RETURN(stream_, driver->create_stream());
    PDKV_ASSIGN_OR_RETURN(event_, driver->create_event());
    PDKV_ASSIGN_OR_RETURN(void* buffer, driver->alloc_pinned(kChunkBytes));
    buffer_ = static_cast<uint8_t*>(buffer);
    return Status();
  }

  // Copies [src, src + bytes) (bytes <= kChunkBytes) of device memory and waits for it.
  Result<const uint8_t*> fetch(uint64_t src, size_t bytes) {
    Status st = driver_->copy_to_host(stream_, buffer_, src, bytes);
    if (st.ok()) st = driver_->record(event_, stream_);
    if (st.ok()) st = driver_->event_wait(event_);
    if (!st.ok()) {
      reset();  // a failed stream may stay failed: start afresh next time
      return st;
    }
    return buffer_;
  }

 private:
  void reset() {
    if (driver_ == nullptr) return;
    Result<ScopedDevice> bound = ScopedDevice::bind(driver_, device_);
    if (bound.ok()) {
      if (stream_ != nullptr) (void)driver_->sync_stream(stream_);
      driver_->free_pinned(buffer_);
      driver_->destroy_event(event_);
      driver_->destroy_stream(stream_);
    }
    driver_ = nullptr;
    device_ = -1;
    stream_ = nullptr;
    event_ = nullptr;
    buffer_ = nullptr;
  }

  DeviceDriver* driver_ = nullptr;
  int device_ = -1;
  DeviceStreamHandle stream_ = nullptr;
  DeviceEventHandle event_ = nullptr;
  uint8_t* buffer_ = nullptr;
};

}  // namespace

Status visit_registered_bytes(const DeviceRegions& regions, uint64_t addr, uint64_t length,
                              const std::function<void(const uint8_t*, size_t)>& visit) {
  if (length == 0) return Status();
  const int device = regions.device_of(addr, length);
  if (device == DeviceRegions::kHost) {
    visit(reinterpret_cast<const uint8_t*>(addr), length);
    return Status();
  }
  if (device == DeviceRegions::kMixed) {
    return invalid_argument(
        fmt::format("range {:#x}+{} straddles the edge of registered device memory", addr, length));
  }
  DeviceDriver* driver = device_driver();
  if (driver == nullptr)
    return failed_precondition("no device driver for registered device memory");
  // Possibly a caller's thread (a KVSender.send runs the pipeline's pass itself): its
  // current context comes back afterwards.
  PDKV_ASSIGN_OR_RETURN(ScopedDevice bound, ScopedDevice::bind(driver, device));
  thread_local ThreadStaging staging;
  PDKV_RETURN_IF_ERROR(staging.prepare(driver, device));
  for (uint64_t at = 0; at < length;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, length - at));
    PDKV_ASSIGN_OR_RETURN(const uint8_t* bytes, staging.fetch(addr + at, n));
    visit(bytes, n);
    at += n;
  }
  return Status();
}

}  // namespace pdkv::engine
