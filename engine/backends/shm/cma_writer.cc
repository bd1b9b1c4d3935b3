#include "engine/backends/shm/cma_writer.h"

#include <sys/uio.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "engine/piece_cursor.h"

namespace pdkv::engine::shm {
namespace {

Status errno_status(int err, pid_t pid, std::span<const lease::Piece> pieces, size_t first,
                    size_t last) {
  std::string where =
      "blocks " + std::to_string(pieces[first].index) + ".." + std::to_string(pieces[last].index);
  switch (err) {
    case EPERM:
      return failed_precondition(
          "process_vm_writev into pid " + std::to_string(pid) +
          " denied (EPERM): the shm backend needs ptrace rights over the receiver (same "
          "uid and kernel.yama.ptrace_scope 0, or CAP_SYS_PTRACE); use the tcp or ucx "
          "backend otherwise");
    case ESRCH: return unavailable("receiver process " + std::to_string(pid) + " exited");
    case EFAULT:
      return internal_error("process_vm_writev: EFAULT on " + where +
                            ": a source block or the receiver's registered memory is not "
                            "mapped");
    default: return internal_error("process_vm_writev on " + where + ": " + std::strerror(err));
  }
}

}  // namespace

Status cma_write(pid_t pid, std::span<const lease::Piece> pieces, TimePoint deadline) {
  std::array<iovec, kCmaMaxIov> local{};
  std::array<iovec, kCmaMaxIov> remote{};
  size_t i = 0;         // next piece
  uint64_t offset = 0;  // bytes of pieces[i] already written
  while (i < pieces.size()) {
    if (now() >= deadline) {
      return deadline_exceeded("shm lease expired before block " + std::to_string(pieces[i].index) +
                               " was written");
    }
    // Fill one syscall's worth, splitting a piece that overflows the chunk.
    size_t n = 0;
    uint64_t bytes = 0;
    size_t j = i;
    uint64_t off = offset;
    while (j < pieces.size() && n < kCmaMaxIov && bytes < kCmaChunkBytes) {
      uint64_t len = std::min(pieces[j].length - off, kCmaChunkBytes - bytes);
      local[n] = iovec{reinterpret_cast<void*>(pieces[j].src_addr + off), len};
      remote[n] = iovec{reinterpret_cast<void*>(pieces[j].dst_addr + off), len};
      ++n;
      bytes += len;
      off += len;
      if (off == pieces[j].length) {
        ++j;
        off = 0;
      }
    }
    ssize_t w = process_vm_writev(pid, local.data(), n, remote.data(), n, 0);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, pid, pieces, i, std::min(j, pieces.size() - 1));
    }
    if (w == 0) return errno_status(EFAULT, pid, pieces, i, std::min(j, pieces.size() - 1));
    // Advance by what was written (a partial transfer resumes at the exact byte).
    advance_cursor(
        static_cast<uint64_t>(w), [&](size_t k) { return pieces[k].length; }, &i, &offset);
  }
  return Status();
}

Status cma_probe(pid_t pid, uint64_t addr, uint64_t value) {
  iovec local{&value, sizeof(value)};
  iovec remote{reinterpret_cast<void*>(addr), sizeof(value)};
  if (process_vm_writev(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof(value))) {
    return Status();
  }
  lease::Piece p{reinterpret_cast<uint64_t>(&value), addr, sizeof(value), 0, 0};
  return errno_status(errno, pid, std::span<const lease::Piece>(&p, 1), 0, 0)
      .with_context("shm handshake probe");
}

}  // namespace pdkv::engine::shm
