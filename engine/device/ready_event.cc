#include "engine/device/ready_event.h"

namespace pdkv::engine {

ReadyEvent::~ReadyEvent() { pool_->give_back(event_, device_); }

Status ReadyEvent::wait_on_host() const {
  DeviceDriver* driver = pool_->driver_;
  PDKV_ASSIGN_OR_RETURN(ScopedDevice bound, ScopedDevice::bind(driver, device_));
  PDKV_ASSIGN_OR_RETURN(bool done, driver->event_done(event_));
  if (done) return Status();
  return driver->event_wait(event_);
}

ReadyEventPool::~ReadyEventPool() {
  MutexLock lock(mu_);
  for (auto& [device, event] : free_) {
    Result<ScopedDevice> bound = ScopedDevice::bind(driver_, device);
    if (bound.ok()) driver_->destroy_event(event);
  }
}

Result<std::shared_ptr<const ReadyEvent>> ReadyEventPool::record_on(DeviceStreamHandle stream,
                                                                    int device) {
  // The caller's thread: its own current context comes back when this returns.
  PDKV_ASSIGN_OR_RETURN(ScopedDevice bound, ScopedDevice::bind(driver_, device));
  DeviceEventHandle event = nullptr;
  {
    MutexLock lock(mu_);
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].first == device) {
        event = free_[i].second;
        free_[i] = free_.back();
        free_.pop_back();
        break;
      }
    }
  }
  if (event == nullptr) {
    PDKV_ASSIGN_OR_RETURN(event, driver_->create_event());
  }
  Status recorded = driver_->record(event, stream);
  if (!recorded.ok()) {
    driver_->destroy_event(event);
    return Status(recorded.code(), "recording the source's ready event on the caller's stream: " +
                                       recorded.message());
  }
  return std::shared_ptr<const ReadyEvent>(new ReadyEvent(shared_from_this(), event, device));
}

void ReadyEventPool::give_back(DeviceEventHandle event, int device) {
  MutexLock lock(mu_);
  free_.emplace_back(device, event);
}

}  // namespace pdkv::engine
