// CudaIpcBackend: device memory to device memory between processes of one host, copied by
// the GPU (copy engines over NVLink or PCIe peer-to-peer, or within one GPU), never
// through host memory or a socket.
//
// Receiver: exports every device piece that holds a region registered peer-writable
// (export_table.h: a legacy IPC handle per cuMemAlloc allocation, a POSIX file descriptor
// per cuMemCreate piece) and serves two channels:
//  * the lease channel (engine/lease/): the session handshake with the cluster secret,
//    then one lease per part: the part's (dst, length, grant) list is admitted by the
//    MemoryRegistry (registered memory and the write grant each range names) and pinned
//    before the writer issues a single copy, exactly as for the shm and UCX backends;
//  * a Unix-domain socket (fd_channel.h) that hands the handle table, descriptors
//    attached with SCM_RIGHTS, only to a caller presenting the random token that this
//    session's hello carried (sent only after the handshake proved the secret). The token
//    lives as long as its lease session; a stranger never learns it, so never gets a handle.
// Writer: fetches the table at connect and again whenever a grant carries another epoch,
// maps each piece on first use (cuIpcOpenMemHandle with lazy peer access, or
// cuMemImportFromShareableHandle + cuMemMap + cuMemSetAccess for its own device), and per
// granted part issues device-to-device copies on its own stream: one strided 2-D copy per
// equally spaced run (a head-split page is one copy), one batched copy for the scattered
// rest. Sources are ordered after the sender's ready events by a wait on that stream
// (post_after), and the part completes only after an event recorded behind its copies
// completed; then the lease is released and acknowledged.
//
// What the grant protects: a cooperating member that names a destination outside its
// grant is refused before any copy (OutOfRange, as on every path). A mapped handle gives
// the writer's GPU access to the whole exported allocation, so - as with CMA for shm - a
// member that runs hostile code could write where it was not granted; handles go only to
// members that proved the cluster secret (docs/SECURITY.md).
//
// Threads: the LeaseServer's (acceptor + one per session), one handle-socket thread, and
// per outgoing session one LeasedPeer sender thread. Thread safety: as backend.h.
#pragma once

#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/backends/cuda_ipc/cuda_ipc_settings.h"

namespace pdkv::engine::cuda_ipc {

struct CudaIpcOptions {
  int io_timeout_ms = static_cast<int>(kCudaIpcIoTimeoutMs.int_default);
  uint64_t part_bytes = static_cast<uint64_t>(kCudaIpcPartBytes.int_default);
  static Result<CudaIpcOptions> from(const config::Settings& settings);
};

// Whether this backend can move bytes from local memory of `local` kind into a peer's
// memory of `peer` kind: only into device memory of a peer on this host, and only where
// the driver has the IPC calls. `why_not` says why not (for the path report).
struct PathVerdict {
  bool can_serve = false;
  std::string why_not;
};
PathVerdict can_serve(MemoryKind local, MemoryKind peer, bool same_host);

Result<std::unique_ptr<Backend>> make_cuda_ipc_backend(const BackendContext& ctx,
                                                       const CudaIpcOptions& options);
Result<std::unique_ptr<Backend>> make_cuda_ipc_backend(const BackendContext& ctx);

}  // namespace pdkv::engine::cuda_ipc
