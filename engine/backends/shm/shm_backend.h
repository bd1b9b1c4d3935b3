// ShmBackend: same-host transfers with one kernel copy (process_vm_writev, CMA).
//
// Why CMA and not memfd mappings (measured on the 2-core dev VM, llama3-8b page-16
// workload: 16384 shuffled 32 KiB blocks, 512 MiB, steady state; BENCHMARKS.md):
//   single-thread memcpy into pre-faulted memory   7-8.8 GB/s (the P2 baseline)
//   memcpy into a peer's memfd mapped MAP_SHARED   6.5-6.8 GB/s (first touch 1.5 GB/s)
//   process_vm_writev, 1 thread / 2 threads        3.9-4.8 / 5.1-6.4 GB/s
//   process_vm_writev, 1 thread, THP on both sides 5.5-5.9 GB/s
// A mapping copies faster, but only memory the receiver allocated from a memfd can be
// mapped by a peer; the engine registers arbitrary (addr, length) ranges - KV buffers
// come from the serving engine's allocator - so a memfd design would need a new
// allocation API and a remap of foreign memory. CMA writes into any registered memory,
// costs no per-region setup, and needs no shared state that could outlive a crash. The
// copy is spread over copy_threads sender threads per part to close part of the gap.
//
// Safety: every part runs under a lease (engine/lease/lease_server.h): the receiver
// validates the part's destinations against its MemoryRegistry and pins them before the
// sender writes a byte; unregister_memory() revokes at once for new parts and waits for
// granted ones.
// With a cluster secret (EngineOptions::cluster_key) the lease channel starts with the
// session handshake (engine/lease/lease_auth.h): a sender that cannot prove the secret
// gets no lease (nor the pid and probe address a CMA write needs), and a receiver that
// cannot is never written.
// The handshake refuses peers on another host or pid namespace (boot id + pid-namespace
// inode) and probes CMA permission by writing a probe word in the receiver, so EPERM
// (ptrace rules: same uid, kernel.yama.ptrace_scope, CAP_SYS_PTRACE) is a clear
// FailedPrecondition at open_session() rather than a failed batch.
//
// Dead peer: EOF on the control socket or ESRCH from process_vm_writev fails the batch at
// once; a silent peer fails it after io_timeout_ms.
//
// Threads: a LeaseServer (acceptor + one thread per incoming session) and, per outgoing
// session, one LeasedPeer sender thread (+ copy_threads - 1 short-lived helpers per
// large part). Thread safety: as backend.h.
#pragma once

#include <memory>

#include "engine/backend.h"
#include "engine/backends/shm/shm_settings.h"

namespace pdkv::engine::shm {

struct ShmOptions {
  // Threads copying one part; 2 measured best on 2 cores (see above).
  int copy_threads = static_cast<int>(kShmCopyThreads.int_default);
  // Largest part leased at once; bounds the time a lease is held.
  uint64_t part_bytes = static_cast<uint64_t>(kShmPartBytes.int_default);
  // Control-channel waits and the lease length; a silent peer fails batches after this.
  int io_timeout_ms = static_cast<int>(kShmIoTimeoutMs.int_default);

  // PDKV_SHM_COPY_THREADS, PDKV_SHM_PART_BYTES, PDKV_SHM_IO_TIMEOUT_MS.
  // Each knob from `settings` if set there, else the environment, else the default.
  static Result<ShmOptions> from(const config::Settings& settings);
  static Result<ShmOptions> from_env() { return from(config::Settings()); }
};

Result<std::unique_ptr<Backend>> make_shm_backend(const BackendContext& ctx,
                                                  const ShmOptions& options);
// Same, with ShmOptions::from(ctx.options->settings) (what the engine's backend factory calls).
Result<std::unique_ptr<Backend>> make_shm_backend(const BackendContext& ctx);

}  // namespace pdkv::engine::shm
