// DeviceSlabRing: one TCP stream's pinned host slabs for one device, with the device
// stream its copies run on and one event per slab.
//
// A slab holds one staged part (sender) or one chunk of a part (receiver). Several slabs
// let copies into the next ones overlap the socket work on the current one. The ring is
// created on the thread that uses it, which it binds to the device's primary context;
// only that thread issues copies on it.
//
// After a copy failed, the driver's stream may stay failed (CUDA errors are sticky), so
// a ring that saw an error is marked broken and replaced once its slabs are idle.
//
// Thread safety: none (one stream or connection thread owns it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "engine/device/device_driver.h"

namespace pdkv::engine::tcp {

class DeviceSlabRing {
 public:
  // Binds the calling thread to `device`.
  static Result<std::unique_ptr<DeviceSlabRing>> create(DeviceDriver* driver, int device,
                                                        size_t slabs, size_t slab_bytes);
  // Waits for the ring's copies (and host callbacks) to finish, then frees everything.
  ~DeviceSlabRing();
  DeviceSlabRing(const DeviceSlabRing&) = delete;
  DeviceSlabRing& operator=(const DeviceSlabRing&) = delete;

  DeviceDriver* driver() const { return driver_; }
  int device() const { return device_; }
  DeviceStreamHandle stream() const { return stream_; }
  size_t size() const { return slabs_.size(); }
  size_t slab_bytes() const { return slab_bytes_; }
  uint8_t* slab(size_t i) const { return slabs_[i].data; }
  DeviceEventHandle event(size_t i) const { return slabs_[i].event; }

  // Slab bookkeeping for a sender (a receiver uses the slabs in turn).
  // A free slab's index, or -1.
  int take_free();
  void give_back(int slab);
  bool all_free() const;

  bool broken() const { return broken_; }
  void mark_broken() { broken_ = true; }

 private:
  struct Slab {
    uint8_t* data = nullptr;
    DeviceEventHandle event = nullptr;
    bool busy = false;
  };
  DeviceSlabRing(DeviceDriver* driver, int device, size_t slab_bytes)
      : driver_(driver), device_(device), slab_bytes_(slab_bytes) {}

  DeviceDriver* const driver_;
  const int device_;
  const size_t slab_bytes_;
  DeviceStreamHandle stream_ = nullptr;
  std::vector<Slab> slabs_;
  bool broken_ = false;
};

}  // namespace pdkv::engine::tcp
