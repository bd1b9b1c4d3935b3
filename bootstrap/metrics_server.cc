#include "bootstrap/metrics_server.h"

#include <httplib.h>

#include "common/logging.h"

namespace pdkv::bootstrap {

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& host, int port,
                                                            std::function<std::string()> render) {
  std::unique_ptr<MetricsServer> m(new MetricsServer());
  m->render_ = std::move(render);
  MetricsServer* raw = m.get();
  auto install = [raw](httplib::Server& h) {
    h.Get("/metrics", [raw](const httplib::Request&, httplib::Response& res) {
      try {
        res.set_content(raw->render_(), "text/plain; version=0.0.4");
      } catch (const std::exception& e) {
        res.status = 500;
        res.set_content(std::string("metrics: ") + e.what(), "text/plain");
      }
    });
    h.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("OK", "text/plain");
    });
  };
  PDKV_ASSIGN_OR_RETURN(m->listener_,
                        HttpListener::start(HttpListenerOptions{"metrics", host, port}, install));
  PDKV_LOG_INFO("metrics: serving on {}:{}/metrics", host, m->listener_->port());
  return m;
}

}  // namespace pdkv::bootstrap
