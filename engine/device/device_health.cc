#include "engine/device/device_health.h"

#include <atomic>

#include "common/logging.h"
#include "common/mutex.h"
#include "engine/device/cuda_driver_api.h"

namespace pdkv::engine {
namespace {

struct Health {
  Mutex mu;
  Status fault PDKV_GUARDED_BY(mu);
  std::atomic<bool> healthy{true};
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
}

Status device_fault() {
  Health& h = health();
  if (h.healthy.load(std::memory_order_acquire)) return Status();
  MutexLock lock(h.mu);
  return h.fault;
}

bool device_healthy() { return health().healthy.load(std::memory_order_acquire); }

}  // namespace pdkv::engine
