// Maps EngineOptions::backend to a backend implementation. A new backend adds one line
// here and its library to engine/CMakeLists.txt; the engine core does not change.
#include "engine/backend.h"
#include "engine/backends/cuda_ipc/cuda_ipc_backend.h"
#include "engine/backends/shm/shm_backend.h"
#include "engine/backends/tcp/tcp_backend.h"
#ifdef PDKV_HAVE_UCX
#include "engine/backends/ucx/ucx_backend.h"
#endif

namespace pdkv::engine {

Result<std::unique_ptr<Backend>> make_backend(const BackendContext& ctx) {
  const std::string& name = ctx.options->backend;
  if (name == "tcp") return tcp::make_tcp_backend(ctx);
  if (name == "shm") return shm::make_shm_backend(ctx);
  if (name == "cuda_ipc") return cuda_ipc::make_cuda_ipc_backend(ctx);
  if (name == "ucx") {
#ifdef PDKV_HAVE_UCX
    return ucx::make_ucx_backend(ctx);
#else
    return failed_precondition("engine backend 'ucx' is not built: UCX (libucx-dev) was not "
                               "found when this binary was configured");
#endif
  }
  return invalid_argument("unknown engine backend '" + name +
                          "' (expected tcp, shm, cuda_ipc or ucx)");
}

Status check_backend_settings(const config::Settings& settings) {
  PDKV_RETURN_IF_ERROR(shm::ShmOptions::from(settings).status());
  PDKV_RETURN_IF_ERROR(cuda_ipc::CudaIpcOptions::from(settings).status());
#ifdef PDKV_HAVE_UCX
  PDKV_RETURN_IF_ERROR(ucx::UcxOptions::from(settings).status());
#endif
  return Status();
}

}  // namespace pdkv::engine
