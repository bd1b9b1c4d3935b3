#include "kv/step_counter.h"

#include <algorithm>

namespace pdkv::kv {

int64_t StepCounter::reserve(int64_t layers) {
  MutexLock lock(mu_);
  int64_t begin = reserved_;
  reserved_ += std::max<int64_t>(layers, 0);
  last_begin_ = begin;
  return begin;
}

int64_t StepCounter::last_reservation() const {
  MutexLock lock(mu_);
  return last_begin_;
}

void StepCounter::mark_ready(int64_t layers) {
  MutexLock lock(mu_);
  ready_ += layers;
  changed_.notify_all();
}

int64_t StepCounter::ready() const {
  MutexLock lock(mu_);
  return ready_;
}

bool StepCounter::wait_ready(int64_t target, TimePoint deadline,
                             const std::function<bool()>& cancelled) {
  MutexLock lock(mu_);
  while (ready_ < target) {
    if (cancelled() || now() >= deadline) return false;
    TimePoint slice = std::min(deadline, now() + std::chrono::milliseconds(50));
    changed_.wait_until(mu_, slice, [&]() PDKV_REQUIRES(mu_) { return ready_ >= target; });
  }
  return true;
}

void StepCounter::wake_all() {
  MutexLock lock(mu_);
  changed_.notify_all();
}

}  // namespace pdkv::kv
