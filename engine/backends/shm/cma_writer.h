// cma_write(): copies pieces from this process into another process's memory with
// process_vm_writev (Cross-Memory Attach): one kernel copy, no shared mapping needed, so it
// works on whatever memory the receiver registered (malloc, mmap, pinned buffers).
//
// Each syscall carries at most kCmaMaxIov iovecs and kCmaChunkBytes bytes, so the lease
// deadline is checked at least every few milliseconds. Partial transfers are resumed.
// Errors: EPERM -> FailedPrecondition explaining the ptrace rule (same uid and
// kernel.yama.ptrace_scope 0, or CAP_SYS_PTRACE); ESRCH ->
// Unavailable (the peer exited); EFAULT -> Internal naming the piece range (a source
// block or the receiver's registered memory is not mapped); DeadlineExceeded when the
// lease ran out before the last syscall.
//
// Thread safety: a pure function; several threads may write disjoint pieces at once.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <span>

#include "common/clock.h"
#include "common/status.h"
#include "engine/lease/leased_peer.h"

namespace pdkv::engine::shm {

inline constexpr size_t kCmaMaxIov = 1024;  // IOV_MAX on Linux
inline constexpr uint64_t kCmaChunkBytes = 8ull << 20;

Status cma_write(pid_t pid, std::span<const lease::Piece> pieces, TimePoint deadline);

// Writes `value` to `addr` in `pid` (the handshake's permission probe).
Status cma_probe(pid_t pid, uint64_t addr, uint64_t value);

}  // namespace pdkv::engine::shm
