#include "engine/backends/cuda_ipc/import_table.h"

#include <algorithm>
#include <map>

namespace pdkv::engine::cuda_ipc {

Status ImportTable::replace(uint64_t epoch, std::vector<HandleEntry> entries,
                            std::vector<UniqueFd> fds) {
  if (fds.size() != entries.size()) return data_loss("device-handle table: descriptors missing");
  std::vector<Imported> next;
  next.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const bool has_fd = fds[i].valid();
    if (has_fd != (entries[i].kind == IpcHandleKind::kPosixFd)) {
      return data_loss("device-handle table: descriptor does not match the entry's kind");
    }
    next.push_back(Imported{entries[i], std::move(fds[i]), OpenedPiece{}});
  }
  std::sort(next.begin(), next.end(),
            [](const Imported& a, const Imported& b) { return a.entry.base < b.entry.base; });
  for (size_t i = 1; i < next.size(); ++i) {
    if (next[i].entry.base < next[i - 1].entry.base + next[i - 1].entry.size) {
      return data_loss("device-handle table: pieces overlap");
    }
  }
  // Keep what is mapped for entries that stay; unmap the rest.
  std::map<uint64_t, Imported*> old;
  for (Imported& p : pieces_) old[p.entry.id] = &p;
  for (Imported& p : next) {
    auto it = old.find(p.entry.id);
    if (it == old.end() || it->second->entry.base != p.entry.base ||
        it->second->entry.size != p.entry.size) {
      continue;
    }
    p.opened = it->second->opened;
    it->second->opened = OpenedPiece{};
  }
  close_all();
  pieces_ = std::move(next);
  epoch_ = epoch;
  return Status();
}

std::vector<HandleEntry> ImportTable::entries() const {
  std::vector<HandleEntry> out;
  for (const Imported& p : pieces_) out.push_back(p.entry);
  return out;
}

Result<uint64_t> ImportTable::translate(uint64_t remote, uint64_t length, int device,
                                        uint64_t* piece_end) {
  auto it = std::upper_bound(pieces_.begin(), pieces_.end(), remote,
                             [](uint64_t r, const Imported& p) { return r < p.entry.base; });
  if (it == pieces_.begin()) return uint64_t{0};
  --it;
  const uint64_t offset = remote - it->entry.base;
  if (offset >= it->entry.size || length > it->entry.size - offset) return uint64_t{0};
  if (it->opened.local == 0) {
    PDKV_ASSIGN_OR_RETURN(it->opened, ipc_->open_piece(it->entry.kind, it->entry.legacy,
                                                       it->fd.get(), it->entry.size, device));
  }
  *piece_end = it->entry.base + it->entry.size;
  return it->opened.local + offset;
}

void ImportTable::close_all() {
  for (Imported& p : pieces_) {
    ipc_->close_piece(p.opened);
    p.opened = OpenedPiece{};
  }
}

}  // namespace pdkv::engine::cuda_ipc
