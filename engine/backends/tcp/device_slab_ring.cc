#include "engine/backends/tcp/device_slab_ring.h"

#include "common/logging.h"

namespace pdkv::engine::tcp {

Result<std::unique_ptr<DeviceSlabRing>> DeviceSlabRing::create(DeviceDriver* driver, int device,
                                                               size_t slabs, size_t slab_bytes) {
  PDKV_RETURN_IF_ERROR(driver->bind_thread(device));
  std::unique_ptr<DeviceSlabRing> ring(new DeviceSlabRing(driver, device, slab_bytes));
  PDKV_ASSIGN_OR_RETURN(ring->stream_, driver->create_stream());
  ring->slabs_.resize(slabs);
  for (Slab& s : ring->slabs_) {
    PDKV_ASSIGN_OR_RETURN(void* data, driver->alloc_pinned(slab_bytes));
    s.data = static_cast<uint8_t*>(data);
    PDKV_ASSIGN_OR_RETURN(s.event, driver->create_event());
  }
  return ring;
}

DeviceSlabRing::~DeviceSlabRing() {
  if (stream_ != nullptr) {
    // Copies into the slabs and the host callbacks that signal their owner must be over
    // before either goes away. A failed stream reports its error here; it is already known.
    if (Status st = driver_->bind_thread(device_); !st.ok()) {
      PDKV_LOG_WARN("device slab ring: {}", st.to_string());
    }
    (void)driver_->sync_stream(stream_);
  }
  for (Slab& s : slabs_) {
    driver_->destroy_event(s.event);
    driver_->free_pinned(s.data);
  }
  driver_->destroy_stream(stream_);
}

int DeviceSlabRing::take_free() {
  for (size_t i = 0; i < slabs_.size(); ++i) {
    if (!slabs_[i].busy) {
      slabs_[i].busy = true;
      return static_cast<int>(i);
    }
  }
  return -1;
}

void DeviceSlabRing::give_back(int slab) {
  if (slab >= 0) slabs_[static_cast<size_t>(slab)].busy = false;
}

bool DeviceSlabRing::all_free() const {
  for (const Slab& s : slabs_) {
    if (s.busy) return false;
  }
  return true;
}

}  // namespace pdkv::engine::tcp
