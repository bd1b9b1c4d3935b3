// RegistryHttpServer: `pdkv bootstrap --registry etcd --instance NAME` — the bootstrap
// server's read side (GET /route, same queries and JSON as bootstrap/server.h) for the
// routes of one prefill instance kept in etcd, so tools that only speak HTTP (and decodes
// left on PDKV_REGISTRY=http) keep working when the ranks register in etcd. Answers come
// from the watched mirror (etcd_route_watcher.h), never from a table of its own:
//
//   GET /route?engine_rank=..&target_dp_group=..  as bootstrap/server.h, for NAME
//   GET /instances   every instance and rank under the prefix (operators' inspection)
//   GET /health      200 "OK" while the mirror is in sync with etcd, else 503 naming etcd
//   PUT, DELETE /route  405: ranks register in etcd themselves (PDKV_REGISTRY=etcd)
//
// Threads: an HttpListener's workers run the handlers; they read the watcher
// (thread-safe). stop() from any thread, idempotent; also run by the destructor.
#pragma once

#include <memory>
#include <string>

#include "http/http_listener.h"
#include "kv/registry/etcd_route_watcher.h"

namespace pdkv::kv {

class RegistryHttpServer {
 public:
  // `watcher` must outlive the server.
  static Result<std::unique_ptr<RegistryHttpServer>> start(EtcdRouteWatcher& watcher,
                                                           std::string instance,
                                                           const std::string& host, int port);
  ~RegistryHttpServer();
  RegistryHttpServer(const RegistryHttpServer&) = delete;
  RegistryHttpServer& operator=(const RegistryHttpServer&) = delete;

  int port() const { return listener_->port(); }
  void stop();

 private:
  RegistryHttpServer(EtcdRouteWatcher& watcher, std::string instance)
      : watcher_(watcher), instance_(std::move(instance)) {}
  void install_routes(http::HttpRouter& h);

  EtcdRouteWatcher& watcher_;
  const std::string instance_;
  std::unique_ptr<http::HttpListener> listener_;
};

// Runs the server until SIGTERM/SIGINT (blocked in the caller's mask), reading
// PDKV_ETCD_* for the cluster; prints "pdkv bootstrap listening on H:P (etcd ...)". With a
// cluster secret (`secret_file`, else PDKV_SECRET_FILE) it serves only entries whose
// signature verifies (etcd_route_seal.h), as a decode would take them.
int run_registry_http_server(const std::string& host, int port, const std::string& instance,
                             const std::string& secret_file = "");

}  // namespace pdkv::kv
