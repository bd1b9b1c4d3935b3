#include "engine/batch_table.h"

#include "common/logging.h"

namespace pdkv::engine {

BatchId BatchTable::allocate(std::function<void(Status)> on_done) {
  MutexLock lock(mu_);
  uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    index = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& s = slots_[index];
  s.in_use = true;
  s.released = false;
  s.state = BatchState::kPending;
  s.error = Status();
  s.on_done = std::move(on_done);
  ++live_;
  return BatchId{index, s.generation};
}

void BatchTable::free_slot(uint32_t index) {
  Slot& s = slots_[index];
  s.in_use = false;
  s.released = false;
  s.error = Status();
  s.on_done = nullptr;
  // Generation 0 is reserved for "never valid".
  if (++s.generation == 0) s.generation = 1;
  free_.push_back(index);
  --live_;
}

const BatchTable::Slot* BatchTable::find(BatchId id) const {
  if (id.generation == 0 || id.index >= slots_.size()) return nullptr;
  const Slot& s = slots_[id.index];
  if (!s.in_use || s.released || s.generation != id.generation) return nullptr;
  return &s;
}

BatchStatus BatchTable::status_of(const Slot& slot) { return BatchStatus{slot.state, slot.error}; }

void BatchTable::complete(uint64_t token, Status status) {
  const BatchId id{static_cast<uint32_t>(token), static_cast<uint32_t>(token >> 32)};
  std::function<void(Status)> on_done;
  {
    MutexLock lock(mu_);
    if (id.index >= slots_.size()) return;
    Slot& s = slots_[id.index];
    if (!s.in_use || s.generation != id.generation || s.state != BatchState::kPending) {
      PDKV_LOG_WARN("batch table: ignoring duplicate or stale completion {}", token);
      return;
    }
    if (!s.on_done) {
      complete_locked(s, id.index, std::move(status));
      return;
    }
    on_done = std::move(s.on_done);
    free_slot(id.index);
  }
  on_done(std::move(status));
}

void BatchTable::complete_locked(Slot& s, uint32_t index, Status status) {
  if (s.released) {
    if (!status.ok()) PDKV_LOG_WARN("released batch failed: {}", status.to_string());
    free_slot(index);
    return;
  }
  s.state = status.ok() ? BatchState::kSucceeded : BatchState::kFailed;
  s.error = std::move(status);
  done_cv_.notify_all();
}

void BatchTable::abandon(BatchId id) {
  MutexLock lock(mu_);
  if (id.generation == 0 || id.index >= slots_.size()) return;
  Slot& s = slots_[id.index];
  if (s.in_use && s.generation == id.generation) free_slot(id.index);
}

Result<BatchStatus> BatchTable::poll(BatchId id) const {
  MutexLock lock(mu_);
  const Slot* s = find(id);
  if (s == nullptr) return not_found("unknown or released batch id");
  return status_of(*s);
}

Result<BatchStatus> BatchTable::wait_until(BatchId id,
                                           std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(mu_);
  if (find(id) == nullptr) return not_found("unknown or released batch id");
  done_cv_.wait_until(mu_, deadline, [&]() PDKV_REQUIRES(mu_) {
    const Slot* s = find(id);
    return s == nullptr || s->state != BatchState::kPending;
  });
  // Another thread may have released the id while this one waited.
  const Slot* s = find(id);
  if (s == nullptr) return not_found("batch id released while waiting");
  return status_of(*s);
}

Status BatchTable::release(BatchId id) {
  MutexLock lock(mu_);
  if (find(id) == nullptr) return not_found("unknown or released batch id");
  Slot& s = slots_[id.index];
  if (s.state == BatchState::kPending) {
    s.released = true;  // freed by complete()
    done_cv_.notify_all();
  } else {
    free_slot(id.index);
  }
  return Status();
}

size_t BatchTable::live_count() const {
  MutexLock lock(mu_);
  return live_;
}

}  // namespace pdkv::engine
