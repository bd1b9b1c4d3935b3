#include "kv/metrics/process_metrics_endpoint.h"

#include "common/mutex.h"
#include "kv/metrics/metrics_registry.h"

namespace pdkv::kv {
namespace {

Mutex g_endpoint_mu;
// The running endpoint, if any handle still holds it.
std::weak_ptr<ProcessMetricsEndpoint>& running() PDKV_REQUIRES(g_endpoint_mu) {
  static auto* endpoint = new std::weak_ptr<ProcessMetricsEndpoint>();  // leaked: see registry
  return *endpoint;
}

}  // namespace

Result<std::shared_ptr<ProcessMetricsEndpoint>> ProcessMetricsEndpoint::acquire(
    const std::string& host, int port) {
  if (port < 0 || port > 65535) {
    return invalid_argument("metrics port " + std::to_string(port) + " is not in [0, 65535]");
  }
  MutexLock lock(g_endpoint_mu);
  if (auto existing = running().lock()) {
    if (port == 0 || port == existing->port()) return existing;
    return failed_precondition("this process already serves its metrics on port " +
                               std::to_string(existing->port()) + " (every manager of the " +
                               "process is there); asked for port " + std::to_string(port));
  }
  std::shared_ptr<ProcessMetricsEndpoint> endpoint(new ProcessMetricsEndpoint());
  endpoint->host_ = host;
  PDKV_ASSIGN_OR_RETURN(endpoint->server_, http::MetricsServer::start(host, port, [] {
                          return MetricsRegistry::process().render();
                        }));
  running() = endpoint;
  return endpoint;
}

ProcessMetricsEndpoint::~ProcessMetricsEndpoint() {
  if (server_) server_->stop();
}

}  // namespace pdkv::kv
