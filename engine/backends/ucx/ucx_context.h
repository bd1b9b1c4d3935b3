// UcxContext: the one UCP context of a UCX backend, shared by all its workers (the
// per-session receive workers and the per-peer send workers, ucx_backend.h). Memory is
// mapped and rkeys are packed on the context, so they are valid on every worker.
//
// It also counts the workers: each costs a thread and, over posix/sysv, about 4 MiB of
// shared-memory rings (measured with UCX 1.13; ~80 KiB over tcp), and peers decide how
// many there are, so at most `max_workers` exist at once (PDKV_UCX_MAX_WORKERS).
//
// Thread safety: created with mt_workers_shared, so get() may be used from every worker
// thread and from the backend's callers at once (UCP serialises context operations);
// acquire_worker/release_worker from any thread.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <memory>
#include <string>

#include "common/status.h"

namespace pdkv::engine::ucx {

class UcxContext {
 public:
  // `tls` empty = UCX's own choice (UCX_TLS from the environment, else all transports).
  static Result<std::shared_ptr<UcxContext>> create(const std::string& tls, int max_workers);
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  ucp_context_h get() const { return ctx_; }
  // Workers can sleep on an event fd (UCP_FEATURE_WAKEUP was granted).
  bool wakeup() const { return wakeup_; }
  // The transports asked for ("" = UCX default), as logged and compared by backends.
  const std::string& requested_tls() const { return tls_; }
  // Whether this UCX was built with CUDA support, as ucp_context_query reports its memory
  // types (a registration of device memory "succeeding" proves nothing: UCX without
  // CUDA accepts a host buffer labelled CUDA).
  bool cuda_memory() const { return cuda_memory_; }

  // One more worker, or Unavailable naming PDKV_UCX_MAX_WORKERS when max_workers exist.
  Status acquire_worker();
  void release_worker() { workers_.fetch_sub(1); }

 private:
  UcxContext() = default;

  ucp_context_h ctx_ = nullptr;
  bool wakeup_ = false;
  bool cuda_memory_ = false;
  std::string tls_;
  int max_workers_ = 0;
  std::atomic<int> workers_{0};
};

}  // namespace pdkv::engine::ucx
