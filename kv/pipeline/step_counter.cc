#include "kv/pipeline/step_counter.h"

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
}

int64_t StepCounter::ready() const {
  MutexLock lock(mu_);
  return ready_;
}

}  // namespace pdkv::kv
