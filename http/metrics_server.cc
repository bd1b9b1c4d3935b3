#include "http/metrics_server.h"

#include "common/logging.h"

namespace pdkv::http {

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& host, int port,
                                                            std::function<std::string()> render) {
  std::unique_ptr<MetricsServer> m(new MetricsServer());
  m->render_ = std::move(render);
  MetricsServer* raw = m.get();
  HttpRouter router("metrics");
  router.on(HttpMethod::kGet, "/metrics", [raw](const HttpRequest&, HttpResponse& res) {
    try {
      res.set_content(raw->render_(), "text/plain; version=0.0.4");
    } catch (const std::exception& e) {
      res.status = 500;
      res.set_content(std::string("metrics: ") + e.what(), "text/plain");
    }
  });
  router.on(HttpMethod::kGet, "/health",
            [](const HttpRequest&, HttpResponse& res) { res.set_content("OK", "text/plain"); });
  HttpListenerOptions listen{"metrics", host, port};
  listen.max_body_bytes = 4096;  // only GETs are served: no request needs a body
  PDKV_ASSIGN_OR_RETURN(m->listener_, HttpListener::start(listen, std::move(router)));
  PDKV_LOG_INFO("metrics: serving on {}:{}/metrics", host, m->listener_->port());
  return m;
}

}  // namespace pdkv::http
