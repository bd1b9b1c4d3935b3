// A rank's own Prometheus endpoint (PDKV_METRICS_PORT): GET /metrics answers with
// whatever `render` returns at that moment, GET /health with "OK". The managers keep
// their counters; this only serves them, so any process can expose several ranks.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "http/http_listener.h"

namespace pdkv::http {

class MetricsServer {
 public:
  // `render` runs on the HTTP workers (must be thread-safe and quick); an exception it
  // throws becomes a 500.
  static Result<std::unique_ptr<MetricsServer>> start(const std::string& host, int port,
                                                      std::function<std::string()> render);
  int port() const { return listener_->port(); }
  void stop() { listener_->stop(); }

 private:
  MetricsServer() = default;
  std::function<std::string()> render_;
  std::unique_ptr<HttpListener> listener_;
};

}  // namespace pdkv::http
