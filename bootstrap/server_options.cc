// ServerOptions read from settings, so `pdkv bootstrap`, pdkv.BootstrapServer(config=...)
// and a manager take the cluster secret by the same rule.
#include "bootstrap/server.h"
#include "common/cluster_key.h"
#include "common/config.h"

namespace pdkv::bootstrap {

Result<ServerOptions> ServerOptions::from(const config::Settings& settings) {
  ServerOptions o;
  PDKV_ASSIGN_OR_RETURN(o.cluster_key, ClusterKey::from(settings));
  return o;
}

Status ServerOptions::check() const {
  if (authenticate_reads && !cluster_key) {
    return invalid_argument(
        "authenticated reads need a cluster secret (PDKV_SECRET_FILE): without one no "
        "request can be signed");
  }
  return Status();
}

}  // namespace pdkv::bootstrap
