#include "engine/backends/ucx/ucx_context.h"

#include "common/logging.h"

namespace pdkv::engine::ucx {
namespace {

std::string ucs_error(const std::string& what, ucs_status_t st) {
  return what + ": " + ucs_status_string(st);
}

}  // namespace

Result<std::shared_ptr<UcxContext>> UcxContext::create(const std::string& tls, int max_workers) {
  std::shared_ptr<UcxContext> c(new UcxContext());
  c->tls_ = tls;
  c->max_workers_ = max_workers;
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return internal_error(ucs_error("ucp_config_read", st));
  if (!tls.empty()) {
    st = ucp_config_modify(config, "TLS", tls.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return invalid_argument(ucs_error("UCX transports '" + tls + "'", st));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;  // one worker per session and per peer, each on its thread
  st = ucp_init(&params, config, &c->ctx_);
  if (st != UCS_OK) {
    // Some transport sets cannot wake a sleeping worker; then workers poll on a timer.
    params.features = UCP_FEATURE_RMA;
    st = ucp_init(&params, config, &c->ctx_);
  }
  ucp_config_release(config);
  if (st != UCS_OK) {
    c->ctx_ = nullptr;
    return unavailable(ucs_error("ucp_init", st));
  }
  c->wakeup_ = (params.features & UCP_FEATURE_WAKEUP) != 0;
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(c->ctx_, &attr) == UCS_OK) {
    c->cuda_memory_ = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  }
  PDKV_LOG_INFO("ucx: context up, transports requested '{}', wakeup {}, CUDA memory {}",
                tls.empty() ? "(UCX default)" : tls, c->wakeup_ ? "on" : "off (timer)",
                c->cuda_memory_ ? "yes (device memory registered natively)" : "no");
  return c;
}

Status UcxContext::acquire_worker() {
  if (workers_.fetch_add(1) >= max_workers_) {
    workers_.fetch_sub(1);
    return unavailable("ucx: already " + std::to_string(max_workers_) +
                       " UCP workers, one per peer and per sending session "
                       "(PDKV_UCX_MAX_WORKERS)");
  }
  return Status();
}

UcxContext::~UcxContext() {
  if (ctx_ != nullptr) ucp_cleanup(ctx_);
}

}  // namespace pdkv::engine::ucx
