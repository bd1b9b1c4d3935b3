// Maps EngineOptions::backend to a backend implementation. A new backend adds one line
// here and its library to engine/CMakeLists.txt; the engine core does not change.
#include "engine/backend.h"
#include "engine/backends/tcp/tcp_backend.h"

namespace pdkv::engine {

Result<std::unique_ptr<Backend>> make_backend(const BackendContext& ctx) {
  const std::string& name = ctx.options->backend;
  if (name == "tcp") return tcp::make_tcp_backend(ctx);
  if (name == "shm" || name == "ucx") {
    return failed_precondition("engine backend '" + name + "' is not implemented in this build");
  }
  return invalid_argument("unknown engine backend '" + name + "' (expected tcp, shm or ucx)");
}

}  // namespace pdkv::engine
