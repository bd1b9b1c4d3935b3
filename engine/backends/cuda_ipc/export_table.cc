#include "engine/backends/cuda_ipc/export_table.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

namespace pdkv::engine::cuda_ipc {

Status ExportTable::add_region(uint64_t addr, uint64_t length, int device) {
  PDKV_ASSIGN_OR_RETURN(DeviceUuid uuid, ipc_->uuid(device));
  MutexLock lock(mu_);
  if (regions_.count(addr) != 0) return failed_precondition("region already exported");
  std::vector<uint64_t> bases;
  Status st;
  const uint64_t end = addr + length;
  for (uint64_t at = addr; at < end && st.ok();) {
    auto it = pieces_.upper_bound(at);
    if (it != pieces_.begin()) {
      --it;
      if (at - it->first < it->second.entry.size) {  // already exported: count this region
        ++it->second.regions;
        bases.push_back(it->first);
        at = it->first + it->second.entry.size;
        continue;
      }
    }
    Result<ExportedPiece> exported = ipc_->export_piece(at);
    if (!exported.ok()) {
      st = exported.status();
      break;
    }
    if (exported->base > at || at - exported->base >= exported->size) {
      st = internal_error("the driver reported a piece that does not hold the address");
      break;
    }
    Piece piece;
    piece.entry.kind = exported->kind;
    piece.entry.id = next_id_++;
    piece.entry.base = exported->base;
    piece.entry.size = exported->size;
    piece.entry.device = uuid;
    piece.entry.legacy = exported->legacy;
    piece.fd = std::move(exported->fd);
    piece.regions = 1;
    bases.push_back(exported->base);
    at = exported->base + exported->size;
    pieces_.emplace(exported->base, std::move(piece));
  }
  if (!st.ok()) {
    for (uint64_t base : bases) {
      auto it = pieces_.find(base);
      if (it != pieces_.end() && --it->second.regions == 0) pieces_.erase(it);
    }
    return st.with_context("exporting device memory for cuda_ipc");
  }
  regions_.emplace(addr, std::move(bases));
  epoch_.fetch_add(1, std::memory_order_acq_rel);
  return Status();
}

void ExportTable::remove_region(uint64_t addr) {
  MutexLock lock(mu_);
  auto r = regions_.find(addr);
  if (r == regions_.end()) return;
  for (uint64_t base : r->second) {
    auto it = pieces_.find(base);
    if (it != pieces_.end() && --it->second.regions == 0) pieces_.erase(it);
  }
  regions_.erase(r);
  epoch_.fetch_add(1, std::memory_order_acq_rel);
}

Result<ExportTable::Snapshot> ExportTable::snapshot() {
  Snapshot s;
  MutexLock lock(mu_);
  s.epoch = epoch_.load(std::memory_order_acquire);
  s.entries.reserve(pieces_.size());
  for (const auto& [base, piece] : pieces_) {
    s.entries.push_back(piece.entry);
    UniqueFd fd;
    if (piece.fd.valid()) {
      fd = UniqueFd(::fcntl(piece.fd.get(), F_DUPFD_CLOEXEC, 0));
      if (!fd.valid())
        return unavailable(std::string("dup a device handle: ") + std::strerror(errno));
    }
    s.fds.push_back(std::move(fd));
  }
  return s;
}

}  // namespace pdkv::engine::cuda_ipc
