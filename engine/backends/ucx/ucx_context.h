// UcxContext: the one UCP context of a UCX backend, shared by all its workers (the
// per-session receive workers and the per-peer send workers, ucx_backend.h). Memory is
// mapped and rkeys are packed on the context, so they are valid on every worker.
//
// Thread safety: created with mt_workers_shared, so get() may be used from every worker
// thread and from the backend's callers at once (UCP serialises context operations).
#pragma once

#include <ucp/api/ucp.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace pdkv::engine::ucx {

class UcxContext {
 public:
  // `tls` empty = UCX's own choice (UCX_TLS from the environment, else all transports).
  static Result<std::shared_ptr<UcxContext>> create(const std::string& tls);
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  ucp_context_h get() const { return ctx_; }
  // Workers can sleep on an event fd (UCP_FEATURE_WAKEUP was granted).
  bool wakeup() const { return wakeup_; }
  // The transports asked for ("" = UCX default), as logged and compared by backends.
  const std::string& requested_tls() const { return tls_; }

 private:
  UcxContext() = default;

  ucp_context_h ctx_ = nullptr;
  bool wakeup_ = false;
  std::string tls_;
};

}  // namespace pdkv::engine::ucx
