// UcxBackend: one-sided writes as UCX puts (ucp_put_nbx) - the path to RDMA (rc/ud/dc),
// cuda_ipc and NVLink on machines that have them; shared memory or tcp here.
//
// Control plane: the shm backend's lease channel (engine/lease/lease_server.h) at
// the engine endpoint. With a cluster secret it starts with the session handshake
// (engine/lease/lease_auth.h), and only then does the receiver send its worker address
// and rkeys: the sender creates its UCP endpoint (UCX wire-up) after the handshake, and
// a peer that cannot prove the secret gets neither. UCX's own transports are not
// authenticated by pdkv (docs/SECURITY.md). The hello ack carries the receiver's UCP
// worker address (the sender creates its endpoint from it); every part is leased, so
// the receiver validates destinations against its MemoryRegistry (OutOfRange naming the
// entry) and unregister waits for granted parts, exactly as for shm. Memory is
// registered with ucp_mem_map in on_register_memory(); the region table with packed
// rkeys is served over the channel and refreshed by the sender whenever a grant names a
// newer table epoch (so new or removed regions are picked up on the next part); each
// rkey is bounds-checked before UCX unpacks it (packed_rkey.h). rkeys still restrict
// hardware RDMA to registered memory; the software check is what names the entry and
// covers transports that emulate puts in software (tcp, posix/sysv).
//
// Data plane: the sender's part = puts for every piece (split at region boundaries),
// then ucp_ep_flush_nbx; flush completion is remote completion, then the lease is
// released and the receiver acknowledges. Errors become batch failures with UCX's text:
// unreachable (ucp_ep_create), rkey unpack failure, endpoint error (peer death, with
// PEER error mode). A dead or silent peer is also caught by the control channel (EOF,
// lease deadline): the endpoint is then force-closed, which completes the flush with
// CANCELED, so a batch never hangs.
//
// Error-handling mode: UCX 1.13's posix/sysv/cma transports cannot do peer failure
// handling, so an endpoint that asks for UCP_ERR_HANDLING_MODE_PEER silently drops them
// and runs over tcp. err_mode "auto" therefore uses NONE unless only tcp is allowed; the
// control channel provides failure detection either way.
//
// Never a silent slow path: each endpoint logs the transports its lanes use (from
// ucp_ep_print_info) and warns when it ended up on tcp although shared memory or RDMA was
// asked for (PDKV_UCX_TLS, else UCX_TLS).
//
// Other hardware: nothing here is transport-specific. On an RDMA host run the same tests
// and benchmark with PDKV_UCX_TLS=rc,self (or ud / dc) and check the logged lanes;
// cuda_ipc needs GPU memory registration (ucp_mem_map with a CUDA memory type), which the
// engine does not expose yet, so those tests do not exist here rather than being skipped.
//
// Registration order: the engine adds a region to its MemoryRegistry before calling
// on_register_memory(), so for a moment a lease can be granted on memory whose rkey is not
// in the table yet; such a part fails with "no rkey covers dst". The caller cannot
// legitimately target memory whose register_memory() has not returned, so this only
// affects writes that were wrong anyway.
//
// Sanitizers: UCX is not instrumented; on tcp/posix the receiver's worker thread writes
// registered memory with memcpy, which TSan sees as racing with the application's later
// reads (their order is set by the control plane through the kernel). The tests read
// received regions from uninstrumented checkers and then need no TSan suppressions
// (the conformance suite is TSan-clean over tcp and posix/sysv/cma).
//
// Threads: one UcxWorker thread (all UCX calls), the LeaseServer's threads, one
// LeasedPeer sender thread per session. Thread safety: as backend.h.
#pragma once

#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/backends/ucx/ucx_settings.h"

namespace pdkv::engine::ucx {

struct UcxOptions {
  // UCX transports (UCX_TLS syntax); empty = UCX_TLS from the environment or UCX's default.
  std::string tls;
  // "auto" (NONE unless only tcp/self are allowed), "peer" or "none".
  std::string err_mode = std::string(kUcxErrMode.string_default);
  // Control-channel waits and the lease length.
  int io_timeout_ms = static_cast<int>(kUcxIoTimeoutMs.int_default);
  // Largest part (one lease, one flush).
  uint64_t part_bytes = static_cast<uint64_t>(kUcxPartBytes.int_default);
  // Most UCP workers at once: one per peer we send to, one per session sending to us.
  int max_workers = static_cast<int>(kUcxMaxWorkers.int_default);

  // PDKV_UCX_TLS, PDKV_UCX_ERR_MODE, PDKV_UCX_IO_TIMEOUT_MS, PDKV_UCX_PART_BYTES,
  // PDKV_UCX_MAX_WORKERS.
  // Each knob from `settings` if set there, else the environment, else the default.
  static Result<UcxOptions> from(const config::Settings& settings);
  static Result<UcxOptions> from_env() { return from(config::Settings()); }
};

Result<std::unique_ptr<Backend>> make_ucx_backend(const BackendContext& ctx,
                                                  const UcxOptions& options);
// Same, with UcxOptions::from(ctx.options->settings) (what the engine's backend factory calls).
Result<std::unique_ptr<Backend>> make_ucx_backend(const BackendContext& ctx);

}  // namespace pdkv::engine::ucx
