// BatchTable: the engine's batch ids and their completion state (internal to engine/).
//
// A slot is named by index + generation, so a stale id (released, or from an older use
// of the slot) is NotFound instead of aliasing a newer batch. Backends complete a batch
// through its token (index and generation packed in 64 bits); a completion for a slot
// whose id was released while pending frees the slot.
//
// A batch allocated with a callback is reported through it instead (the engine's
// submit_async): no thread waits for it.
//
// Thread safety: all methods may be called concurrently. wait() blocks on a condition
// variable shared by all batches (notify_all on each completion): a few waiters at a
// time is the expected load, so per-slot condition variables are not worth their cost.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "engine/engine_handles.h"

namespace pdkv::engine {

class BatchTable {
 public:
  BatchTable() = default;
  BatchTable(const BatchTable&) = delete;
  BatchTable& operator=(const BatchTable&) = delete;

  // `on_done`, if set, takes the place of poll/wait: complete() frees the slot and calls it
  // (outside the table's lock) instead of recording the state.
  BatchId allocate(std::function<void(Status)> on_done = {});
  static uint64_t token_of(BatchId id) { return (uint64_t{id.generation} << 32) | id.index; }

  // First completion wins; a second one for the same token is ignored (logged).
  void complete(uint64_t token, Status status);

  // Frees a batch that was never posted (no completion will come), without calling its
  // callback.
  void abandon(BatchId id);

  Result<BatchStatus> poll(BatchId id) const;
  // `deadline` bounds the wait; kPending on timeout.
  Result<BatchStatus> wait_until(BatchId id, std::chrono::steady_clock::time_point deadline);
  Status release(BatchId id);

  size_t live_count() const;  // slots allocated and not yet freed (for tests)

 private:
  struct Slot {
    uint32_t generation = 1;
    bool in_use = false;
    bool released = false;  // id freed by the user while the batch was pending
    BatchState state = BatchState::kPending;
    Status error;
    std::function<void(Status)> on_done;
  };
  const Slot* find(BatchId id) const PDKV_REQUIRES(mu_);
  void free_slot(uint32_t index) PDKV_REQUIRES(mu_);
  static BatchStatus status_of(const Slot& slot);
  void complete_locked(Slot& s, uint32_t index, Status status) PDKV_REQUIRES(mu_);

  mutable Mutex mu_;
  CondVar done_cv_;
  std::vector<Slot> slots_ PDKV_GUARDED_BY(mu_);
  std::vector<uint32_t> free_ PDKV_GUARDED_BY(mu_);
  size_t live_ PDKV_GUARDED_BY(mu_) = 0;
};

}  // namespace pdkv::engine
