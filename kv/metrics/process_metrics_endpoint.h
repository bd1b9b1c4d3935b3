// ProcessMetricsEndpoint: the one Prometheus endpoint of a process. GET /metrics serves
// every KV manager alive in the process (MetricsRegistry::process()), GET /health "OK".
// Many ranks in one process share it instead of each binding a port of its own.
//
// acquire() starts it, or joins the one running: port 0 joins whatever runs (or starts
// on a free port), a fixed port must match the running one (FailedPrecondition naming it
// otherwise; the host of the first caller applies). It stops when the last handle goes.
//
// Thread safety: acquire() and the handles may be used from any thread.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "http/metrics_server.h"

namespace pdkv::kv {

class ProcessMetricsEndpoint {
 public:
  static Result<std::shared_ptr<ProcessMetricsEndpoint>> acquire(const std::string& host, int port);
  ~ProcessMetricsEndpoint();
  ProcessMetricsEndpoint(const ProcessMetricsEndpoint&) = delete;
  ProcessMetricsEndpoint& operator=(const ProcessMetricsEndpoint&) = delete;

  int port() const { return server_->port(); }
  const std::string& host() const { return host_; }

 private:
  ProcessMetricsEndpoint() = default;
  std::string host_;
  std::unique_ptr<http::MetricsServer> server_;
};

}  // namespace pdkv::kv
