// ExportTable: the receiver's device pieces, exported once each while a registered region
// holds them, and what a writer fetches (snapshot()).
//
// A registered region may span several pieces (mapped pieces of one reservation) and a
// piece may hold several regions (the KV buffers of one cudaMalloc): pieces are counted
// per region. Only memory registered peer-writable is ever exported: a piece is exported
// when the first region in it is registered and dropped (its descriptor closed) when the
// last one is unregistered; the epoch changes with every change, and travels in every
// lease grant, so a writer knows when to fetch the table again.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <vector>

#include "common/mutex.h"
#include "engine/backends/cuda_ipc/handle_wire.h"
#include "engine/device/cuda_ipc_driver.h"

namespace pdkv::engine::cuda_ipc {

class ExportTable {
 public:
  explicit ExportTable(IpcDriver* ipc) : ipc_(ipc) {}

  // Exports the pieces of [addr, addr + length), device memory of `device` (the caller's
  // thread bound to it).
  Status add_region(uint64_t addr, uint64_t length, int device);
  void remove_region(uint64_t addr);
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

  // The table as it is now: entries, and a duplicate of each kPosixFd entry's descriptor
  // (same index; invalid for kLegacy), sent without holding the table's lock.
  struct Snapshot {
    uint64_t epoch = 0;
    std::vector<HandleEntry> entries;
    std::vector<UniqueFd> fds;
  };
  Result<Snapshot> snapshot();

 private:
  struct Piece {
    HandleEntry entry;
    UniqueFd fd;
    int regions = 0;
  };
  IpcDriver* const ipc_;
  Mutex mu_;
  std::map<uint64_t, Piece> pieces_ PDKV_GUARDED_BY(mu_);                   // by base
  std::map<uint64_t, std::vector<uint64_t>> regions_ PDKV_GUARDED_BY(mu_);  // addr -> bases
  uint64_t next_id_ PDKV_GUARDED_BY(mu_) = 1;
  std::atomic<uint64_t> epoch_{1};
};

}  // namespace pdkv::engine::cuda_ipc
