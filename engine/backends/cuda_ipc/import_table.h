// ImportTable: a writer's view of one receiver's exported device pieces (export_table.h),
// each mapped into this process on first use and translated from the receiver's
// addresses to ours.
//
// The table is replaced whole when the receiver's epoch changed (a lease grant says so):
// pieces with a known id stay mapped, pieces gone are unmapped, new ones are mapped when a
// write first lands in them. Pieces are mapped for one local device per session (the
// device the writer's copies run on).
//
// Thread safety: none; the owning session's sender thread uses it (bound to the device).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backends/cuda_ipc/handle_wire.h"
#include "engine/device/cuda_ipc_driver.h"

namespace pdkv::engine::cuda_ipc {

class ImportTable {
 public:
  explicit ImportTable(IpcDriver* ipc) : ipc_(ipc) {}
  ~ImportTable() { close_all(); }
  ImportTable(const ImportTable&) = delete;
  ImportTable& operator=(const ImportTable&) = delete;

  // DataLoss (and no change) when pieces overlap or a kPosixFd entry lacks its
  // descriptor; `fds` is indexed like `entries`.
  Status replace(uint64_t epoch, std::vector<HandleEntry> entries, std::vector<UniqueFd> fds);
  uint64_t epoch() const { return epoch_; }
  std::vector<HandleEntry> entries() const;

  // Where [remote, remote + length) is mapped here (0 when no piece holds all of it),
  // mapping its piece for `device` first; *piece_end is the remote end of that piece.
  Result<uint64_t> translate(uint64_t remote, uint64_t length, int device, uint64_t* piece_end);

  void close_all();

 private:
  struct Imported {
    HandleEntry entry;
    UniqueFd fd;
    OpenedPiece opened;
  };
  IpcDriver* const ipc_;
  uint64_t epoch_ = 0;
  std::vector<Imported> pieces_;  // sorted by entry.base, disjoint
};

}  // namespace pdkv::engine::cuda_ipc
