#include "engine/device/device_health.h"

#include <atomic>
#include <map>

#include "common/logging.h"
#include "common/mutex.h"
#include "engine/device/cuda_driver_api.h"

namespace pdkv::engine {
namespace {

struct Health {
  Mutex mu;
  Status fault PDKV_GUARDED_BY(mu);
  std::atomic<bool> healthy{true};
  std::map<uint64_t, DeviceFaultListener> listeners PDKV_GUARDED_BY(mu);
  uint64_t next_id PDKV_GUARDED_BY(mu) = 1;
};

Health& health() {
  static Health* h = new Health();  // never freed: driver threads may report during exit
  return *h;
}

}  // namespace

bool is_sticky_device_error(int r) {
  switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED: return true;
    default: return false;
  }
}

void report_device_fault(const Status& fault) {
  Health& h = health();
  MutexLock lock(h.mu);
  if (!h.fault.ok() || fault.ok()) return;
  h.fault = fault;
  h.healthy.store(false, std::memory_order_release);
  PDKV_LOG_ERROR(
      "device memory: the CUDA context failed for good ({}); every transfer that needs device "
      "memory fails from now on, host memory still works: restart this process",
      fault.message());
  // Under the lock: a listener removed after this returns is never called again.
  for (auto& [id, fn] : h.listeners) fn(fault);
}

Status device_fault() {
  Health& h = health();
  if (h.healthy.load(std::memory_order_acquire)) return Status();
  MutexLock lock(h.mu);
  return h.fault;
}

bool device_healthy() { return health().healthy.load(std::memory_order_acquire); }

uint64_t add_device_fault_listener(DeviceFaultListener fn) {
  Health& h = health();
  MutexLock lock(h.mu);
  const uint64_t id = h.next_id++;
  if (!h.fault.ok()) fn(h.fault);
  h.listeners.emplace(id, std::move(fn));
  return id;
}

void remove_device_fault_listener(uint64_t id) {
  Health& h = health();
  MutexLock lock(h.mu);
  h.listeners.erase(id);
}

}  // namespace pdkv::engine
